"""``inspect``: the schema, record count and shards of any TFRecord dataset.

Works on tfopt's datasets and on foreign ones alike: the schema is inferred from every record
read to count them (feature names and list types, fixed or variable length, present in every
record or not, which bytes features hold JPEG/PNG images and their sizes), GZIP is detected
from the files, and the common image/label key conventions (the Model Garden's
``image/encoded`` + ``image/class/label`` and kin) are named. :func:`sample_schema` is the
build-time sample of pipelines: the first records of every file.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import logging
import re
import struct
import zlib
from pathlib import Path

from tfopt._progress import Progress
from tfopt._tf_messages import short_tf_message
from tfopt._validate import require
from tfopt.errors import DatasetError
from tfopt.records._files_of import is_gzip, resolve_files, tf_compression_type
from tfopt.records.image_header import image_size, sniff_format
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME, Manifest, read_manifest
from tfopt.records.schema import Encoding

logger = logging.getLogger("tfopt")

# Keys that hold the encoded image / the class label in public datasets, most specific first.
IMAGE_KEY_CANDIDATES = ("image/encoded", "image/jpeg", "image_raw", "image/raw", "image_bytes",
                        "image", "img", "encoded", "jpeg", "png")
LABEL_KEY_CANDIDATES = ("image/class/label", "image/label", "label", "labels", "class_id",
                        "class", "target", "y", "image/class")


@dataclasses.dataclass(frozen=True)
class FeatureInfo:
    """One feature as seen in the sampled records.

    Attributes:
        name: The feature key.
        kind: ``"bytes"``, ``"int64"`` or ``"float"``.
        min_length: Fewest values in one record.
        max_length: Most values in one record.
        present_in: Sampled records that have the feature.
        image_format: ``"jpeg"``, ``"png"``, ... when every value is an image of that format,
            ``"mixed"`` for several formats, else None.
        min_size: Smallest image ``(height, width)`` seen, for image features.
        max_size: Largest image ``(height, width)`` seen, for image features.
        example: A short rendering of the first value.
    """

    name: str
    kind: str
    min_length: int
    max_length: int
    present_in: int
    image_format: str | None = None
    min_size: tuple[int, int] | None = None
    max_size: tuple[int, int] | None = None
    example: str = ""
    mean_pixels: float | None = None  # mean height*width of the sampled images
    records: int = 0  # records read: present_in below it means the feature is optional
    kinds: tuple[str, ...] = ()  # the list types seen (two or more: kind is "mixed")

    @property
    def optional(self) -> bool:
        """Missing from some of the records read."""
        return self.present_in < self.records

    @property
    def fixed_length(self) -> bool:
        """One length in every record read: a pipeline parses it dense, else ragged."""
        return self.min_length == self.max_length and not self.optional

    def describe_length(self) -> str:
        length = (str(self.min_length) if self.min_length == self.max_length
                  else f"{self.min_length}-{self.max_length} (varies)")
        if self.optional:
            length += f" (in {self.present_in:,} of {self.records:,} records)"
        return length

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["kinds"] = list(self.kinds)
        data["fixed_length"] = self.fixed_length
        data["optional"] = self.optional
        return data


@dataclasses.dataclass(frozen=True)
class FileInfo:
    path: str
    num_bytes: int
    num_records: int | None


@dataclasses.dataclass(frozen=True)
class InspectResult:
    """What ``inspect`` found.

    Attributes:
        path: What was inspected.
        files: Each TFRecord file with its size and record count.
        compression: ``"gzip"`` or None.
        features: The inferred schema.
        image_key: The feature holding encoded images, if recognised.
        label_key: The feature holding the label, if recognised.
        num_records: Total records (None when not counted).
        counted_from: ``"records"`` (read and counted) or ``"manifest"``.
        sampled: Records read to infer the schema.
        manifest: The tfopt manifest, when there is one.
        notes: Things the user should know (incomplete dataset, no manifest...).
    """

    path: str
    files: list[FileInfo]
    compression: str | None
    features: list[FeatureInfo]
    image_key: str | None
    label_key: str | None
    num_records: int | None
    counted_from: str
    sampled: int
    manifest: Manifest | None
    notes: list[str]

    @property
    def num_bytes(self) -> int:
        return sum(info.num_bytes for info in self.files)

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "compression": self.compression,
            "num_records": self.num_records,
            "counted_from": self.counted_from,
            "num_files": len(self.files),
            "num_bytes": self.num_bytes,
            "files": [dataclasses.asdict(info) for info in self.files],
            "image_key": self.image_key,
            "label_key": self.label_key,
            "features": [feature.to_json() for feature in self.features],
            "sampled": self.sampled,
            "class_names": self.manifest.class_names if self.manifest else None,
            "splits": ({name: split.num_records for name, split in self.manifest.splits.items()}
                       if self.manifest else None),
            "notes": self.notes,
        }

    def describe(self) -> str:
        """A human-readable report."""
        from tfopt._text import human_bytes, table

        lines = [f"{self.path}: {len(self.files)} file(s), {human_bytes(self.num_bytes)}, "
                 f"compression {self.compression or 'none'}"]
        if self.num_records is not None:
            lines.append(f"records: {self.num_records:,} (from the {self.counted_from})")
        if self.manifest is not None:
            splits = ", ".join(f"{name} {split.num_records:,} in {len(split.shards)} shards"
                               for name, split in self.manifest.splits.items())
            lines.append(f"splits: {splits}")
            if self.manifest.class_names:
                names = self.manifest.class_names
                shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
                lines.append(f"classes ({len(names)}): {shown}")
        lines.append(f"image key: {self.image_key or '-'}   label key: {self.label_key or '-'}")
        rows = []
        raw = ({spec.name: spec.dtype for spec in self.manifest.features
                if spec.encoding is Encoding.RAW} if self.manifest is not None else {})
        for feature in self.features:
            length = feature.describe_length()
            detail = feature.example
            if feature.image_format:
                detail = (f"{feature.image_format} images, {feature.min_size[0]}x{feature.min_size[1]}"
                          f" to {feature.max_size[0]}x{feature.max_size[1]} px")
            kind = (f"mixed ({', '.join(feature.kinds)})" if feature.kind == "mixed"
                    else feature.kind)
            if feature.name in raw:  # an array stored as its bytes: say what they hold
                kind = f"{raw[feature.name]} (raw bytes)"
            rows.append([feature.name, kind, length, detail])
        lines.append(f"schema (from {self.sampled:,} records):")
        lines.append(table(rows, ["feature", "type", "length", "content"], align="llrl"))
        if len(self.files) <= 20:
            file_rows = [[Path(info.path).name, human_bytes(info.num_bytes),
                          "-" if info.num_records is None else f"{info.num_records:,}"]
                         for info in self.files]
            lines.append(table(file_rows, ["file", "bytes", "records"]))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def inspect(path, *, fast: bool = False, sample: int = 64,
            progress: bool | None = False) -> InspectResult:
    """Describe any TFRecord dataset: schema, image/label keys, record count, shards.

    Args:
        path: A dataset folder, one TFRecord file, or a glob.
        fast: Take record counts from the manifest instead of reading every record. Defaults
            to False (exact count by reading).
        sample: With ``fast`` and a manifest, the records read to infer the schema: the first
            of every shard (at least one from each of up to 256 shards spread evenly).
            Without, every record is read to count it and the schema comes from all of them.
            Defaults to 64.
        progress: Progress bar on stderr while counting (None: when stderr is a terminal).
            Defaults to False.

    Raises:
        tfopt.DatasetError: Nothing readable at ``path``, records that are not
            ``tf.train.Example``, or mixed compression.
        tfopt.InvalidArgumentError: ``sample`` is below 1.

    Example:
        >>> info = inspect("imagenet/train-*")
        >>> info.image_key, info.label_key
        ('image/encoded', 'image/class/label')
    """
    # take(0) reads nothing and take(-1) everything: both would mislead, so refuse them here
    require(sample >= 1, "sample", sample,
            "a positive number of records, e.g. 64")
    files, manifest, notes = resolve_files(path)
    if manifest is None and Path(str(path)).is_dir():
        files = tfrecord_files_of_folder(path, files, notes)
    elif manifest is None:
        owner, folder = manifest_listing(files)
        if owner is not None:  # the schema shown is what the records hold, not the manifest's
            notes.append(f"these shards belong to the tfopt dataset in {folder}: pipelines "
                         f"read them with its manifest's schema ('tfopt inspect {folder}')")
    missing = [str(file) for file in files if not file.is_file()]  # a folder there is missing too
    if missing:
        raise DatasetError(f"{path}: shard(s) listed in the manifest are missing: "
                           f"{', '.join(missing[:3])}; run 'tfopt verify {path}'")
    compression = detect_compression(files, manifest)
    if fast and manifest is not None:
        # the manifest holds the counts; a sample spread over every shard gives image sizes
        schema = sample_schema(files, compression, records=sample)
        features, sampled = schema.features, schema.records
        infos = [FileInfo(str(file), file.stat().st_size, shard.num_records)
                 for file, shard in zip(files, manifest.shards, strict=True)]
        counted_from = "manifest"
    else:
        if fast:
            notes.append("--fast needs a manifest; counted the records instead")
        # every record is read to count it anyway: the schema comes from all of them
        stats = _SchemaStats()
        infos = _count_records(files, compression, progress, stats)
        features, sampled = stats.result(files)
        counted_from = "records"
        if manifest is not None and sum(info.num_records for info in infos) != manifest.num_records:
            # a shard cut at a record boundary reads without an error: only the count shows it
            notes.append(f"{sum(info.num_records for info in infos):,} records counted, the "
                         f"manifest says {manifest.num_records:,}: run 'tfopt verify {path}'")
    if manifest is not None:
        features = _with_raw_examples(features, manifest, files, compression)
    image_key = manifest.image_key if manifest else pick_image_key(features)
    label_key = manifest.label_key if manifest else pick_label_key(features)
    total = sum(info.num_records for info in infos)
    return InspectResult(str(path), infos, compression, features, image_key, label_key, total,
                         counted_from, sampled, manifest, notes)


def _with_raw_examples(features: list[FeatureInfo], manifest: Manifest, files,
                       compression) -> list[FeatureInfo]:
    """Show raw-bytes arrays (float64, one-byte integers, ...) as the numbers they hold, decoded
    with the manifest's dtype and shape, instead of as bytes such as b'\\x00\\x00\\xf8\\x7f'."""
    import numpy as np
    import tensorflow as tf

    raw = {spec.name: spec for spec in manifest.features if spec.encoding is Encoding.RAW}
    if not raw or not files:
        return features
    for record in tf.data.TFRecordDataset(str(files[0]), tf_compression_type(compression)).take(1):
        example = tf.train.Example.FromString(record.numpy())
        break
    else:
        return features
    shown = []
    for info in features:
        spec, feature = raw.get(info.name), example.features.feature.get(info.name)
        if spec is not None and feature is not None and feature.bytes_list.value:
            values = np.frombuffer(feature.bytes_list.value[0],
                                   np.dtype(spec.dtype).newbyteorder("<")).ravel()
            kind = "float" if values.dtype.kind == "f" else "int64"
            text = _render([value.item() for value in values], kind)
            info = dataclasses.replace(info, example=text)
        shown.append(info)
    return shown


# Names of TFRecord files: by extension (compressed too), the tfds layout
# (name-train.tfrecord-00000-of-00010) and the Model Garden's (train-00000-of-01024).
_TFRECORD_NAME = re.compile(
    r"(\.(tfrecords?|tfrec|tfr|records?)(\.(gz|gzip|zlib))?$)|(\.tfrecords?-\d+-of-\d+$)"
    r"|(-\d+-of-\d+(\.[a-z]+)?$)", re.IGNORECASE)


def is_tfrecord_file(path) -> bool:
    """Whether a file is meant as TFRecord: its name says so, or it starts with a record header.

    A TFRecord record starts with its length (8 bytes) and the masked CRC-32C of that length (4
    bytes), so a text or other file fails the check; an empty file is an empty TFRecord file.
    A file named as TFRecord is taken whatever it holds, so that a damaged shard is reported.
    """
    path = Path(path)
    if _TFRECORD_NAME.search(path.name):
        return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(12)
            if head[:2] == b"\x1f\x8b":  # GZIP: the header of the decompressed stream
                handle.seek(0)
                with gzip.GzipFile(fileobj=handle) as stream:
                    head = stream.read(12)
    except (OSError, EOFError, zlib.error):
        return False
    if not head:
        return True
    if len(head) < 12:
        return False
    (masked,) = struct.unpack("<I", head[8:])
    return masked == _masked_crc32c(head[:8])


def _masked_crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_files_of_folder(path, files: list[Path], notes: list[str]) -> list[Path]:
    """The TFRecord files of a folder without a manifest; the others are named in a note."""
    kept, others = [], []
    for file in files:  # one pass: a membership test against kept was quadratic in the files
        if is_tfrecord_file(file):
            kept.append(file)
        else:
            others.append(file.name)
    shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
    if not kept:
        raise DatasetError(f"{path}: no TFRecord files in this folder ({len(others)} other "
                           f"file(s): {shown})")
    if others:
        notes.append(f"not read: {len(others)} file(s) that are not TFRecord files (neither "
                     f"a TFRecord name nor a record header): {shown}")
    if not (Path(str(path)) / JOURNAL_NAME).exists():  # not an interrupted conversion
        notes.append(f"pipelines read a folder only with its manifest; {folder_hint(path, kept)}")
    return kept


def manifest_listing(files) -> tuple[Manifest | None, Path | None]:
    """The manifest (and its folder) that lists every one of ``files``, if there is one.

    Shards of a tfopt dataset named by a glob or a list rather than by their folder: the
    manifest beside them holds their schema (raw arrays, shapes) and counts. None unless all
    files lie in one folder whose readable manifest lists each of them.
    """
    folders = {Path(file).resolve().parent for file in files}
    if len(folders) != 1:
        return None, None
    folder = folders.pop()
    if not (folder / MANIFEST_NAME).is_file():
        return None, None
    try:
        manifest = read_manifest(folder)
    except DatasetError as error:
        logger.warning("%s; the schema is inferred from the records instead", error)
        return None, None
    listed = {(folder / shard.file).resolve() for shard in manifest.shards}
    unlisted = [file for file in files if Path(file).resolve() not in listed]
    if unlisted:
        logger.info("%s is not listed in %s: the schema is inferred from the records",
                    unlisted[0], folder / MANIFEST_NAME)
        return None, None
    return manifest, folder


def folder_hint(folder, files: list[Path] | None = None) -> str:
    """How to read the TFRecord files of a folder without a manifest: a glob that names them."""
    folder = Path(folder)
    if files is None:
        files = sorted(entry for entry in folder.iterdir() if entry.is_file()
                       and not entry.name.startswith(".") and is_tfrecord_file(entry))
    if not files:
        return "it holds no TFRecord files"
    wanted = sorted(str(file) for file in files)
    patterns = [str(folder / "*-of-*")]
    if len({file.suffix for file in files}) == 1 and files[0].suffix:
        patterns.insert(0, str(folder / f"*{files[0].suffix}"))
    for pattern in patterns:
        if sorted(glob.glob(pattern)) == wanted:
            return (f"for TFRecord files written elsewhere, pass the glob '{pattern}' "
                    f"({len(files)} file(s)) or a list of files")
    return f"for TFRecord files written elsewhere, pass a list of its {len(files)} TFRecord files"


def detect_compression(files: list[Path], manifest: Manifest | None) -> str | None:
    if manifest is not None:
        return manifest.compression
    gzipped = {file: is_gzip(file) for file in files}
    if len(set(gzipped.values())) > 1:
        plain = [str(file) for file, flag in gzipped.items() if not flag][:2]
        raise DatasetError(f"mixed compression: some files are GZIP and some not (e.g. {plain}); "
                           "inspect them separately")
    return "gzip" if next(iter(gzipped.values())) else None


def sample_schema(files, compression, *, records: int = 1024, max_bytes: int = 64 << 20,
                  max_files: int = 256, stop_at_corruption: bool = False) -> SchemaSample:
    """Infer the schema from the first records of every file (of ``max_files`` spread evenly).

    What a pipeline reads at build time, where it must not read a whole dataset: the first
    ``records // files`` records of each file (at least one), fewer when the first record is
    large, so that about ``max_bytes`` are read. A feature that first appears, disappears or
    changes its length further into a file is not seen.

    Args:
        files: TFRecord files.
        compression: ``"gzip"`` or None.
        records: Records to read in all (at least one per sampled file). Defaults to 1024.
        max_bytes: About the bytes to read in all. Defaults to 64 MiB.
        max_files: Files sampled; beyond it, this many spread evenly over the list, the first
            and the last included. Defaults to 256.
        stop_at_corruption: At a corrupted record, keep the records read before it and go on
            with the next file instead of raising (readers that handle corruption themselves).
            Defaults to False.

    Raises:
        tfopt.DatasetError: Records that are not ``tf.train.Example``, a corrupted file (named),
            or no records at all.
    """
    import tensorflow as tf

    files = [Path(file) for file in files]
    chosen = files
    if len(files) > max_files:
        step = (len(files) - 1) / (max_files - 1)
        chosen = [files[round(i * step)] for i in range(max_files)]
    per_file = max(1, records // len(chosen))
    schema = _SchemaStats()
    try:
        # the first record tells the record size, which bounds the records per file
        first = _first_record_size(chosen, compression)
        if first:
            per_file = max(1, min(per_file, max_bytes // (first * len(chosen))))
        names = tf.data.Dataset.from_tensor_slices([str(file) for file in chosen])
        take = tf.constant(per_file, tf.int64)
        pairs = names.interleave(
            lambda name: tf.data.TFRecordDataset(name, tf_compression_type(compression)).take(
                take).map(lambda raw: (name, raw)),
            cycle_length=min(len(chosen), 16), block_length=per_file,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        index: dict[bytes, int] = {}
        for name, raw in pairs.batch(256).as_numpy_iterator():
            for file, record in zip(name, raw, strict=True):
                position = index.get(file, 0)
                index[file] = position + 1
                schema.observe(record, file.decode(), position)
    except tf.errors.OpError:
        # a corrupted or unreadable file: read them one by one, to name it (or read past it)
        schema = _SchemaStats()
        _read_in_order(schema, chosen, compression, per_file, stop_at_corruption)
    features, sampled = schema.result(files)
    return SchemaSample(features, sampled, len(chosen), per_file,
                        schema.record_bytes / sampled if sampled else None)


@dataclasses.dataclass(frozen=True)
class SchemaSample:
    """What :func:`sample_schema` read and inferred.

    Attributes:
        features: The inferred schema.
        records: Records read.
        files: Files read from.
        per_file: Records read at most from each file.
        mean_record_bytes: Mean serialized size of the records read.
    """

    features: list[FeatureInfo]
    records: int
    files: int
    per_file: int
    mean_record_bytes: float | None


def _first_record_size(files, compression) -> int | None:
    import tensorflow as tf

    for record in tf.data.TFRecordDataset([str(f) for f in files],
                                          tf_compression_type(compression)).take(1):
        return len(record.numpy())
    return None


def _read_in_order(schema: _SchemaStats, files, compression, per_file: int,
                   stop_at_corruption) -> None:
    """Observe the first ``per_file`` records of each file, one file after the other."""
    import tensorflow as tf

    corrupted = None  # the first corrupted file's error, while nothing has been sampled
    for file in files:
        dataset = tf.data.TFRecordDataset(str(file), tf_compression_type(compression))
        try:
            for index, raw in enumerate(dataset.take(per_file).as_numpy_iterator()):
                schema.observe(raw, file, index)
        except tf.errors.DataLossError as error:
            problem = DatasetError(f"{file}: corrupted or not a TFRecord file "
                                   f"({short_tf_message(error)}); run 'tfopt verify' on it")
            if not stop_at_corruption:
                raise problem from None
            # keep what was read before it, and sample the next files
            corrupted = corrupted or problem
    if schema.records == 0 and corrupted is not None:
        raise corrupted


def _other_top_level_field(raw: bytes) -> int | None:
    """The number of a top-level field other than Example's ``features`` (1), if any.

    A ``tf.train.SequenceExample`` parses as an ``Example`` (its ``context`` is field 1 too);
    its ``feature_lists`` (field 2) would be dropped without a word. An Example holds one
    length-delimited field 1, so this walk costs a few operations per record.
    """
    position, end = 0, len(raw)
    while position < end:
        tag, position = _varint(raw, position)
        if tag >> 3 != 1 or tag & 7 != 2:
            return tag >> 3
        length, position = _varint(raw, position)
        position += length
    return None


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while position < len(data):
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    return value, position


class _SchemaStats:
    """Feature statistics accumulated record by record, in constant memory per feature."""

    def __init__(self):
        import tensorflow as tf
        from google.protobuf.message import DecodeError

        self.features: dict[str, dict] = {}
        self.records = 0
        self.record_bytes = 0
        # looked up once: observe runs for every record read, and the imports took ~20 % of it
        self._parse_example = tf.train.Example.FromString
        self._decode_error = DecodeError

    def observe(self, raw: bytes, file, index: int) -> None:
        try:
            example = self._parse_example(raw)
        except self._decode_error:
            raise DatasetError(
                f"{file}: record {index} is not a tf.train.Example (SequenceExample and "
                "other protos are not supported)") from None
        other = _other_top_level_field(raw)
        if other is not None:
            what = " (a tf.train.SequenceExample?)" if other == 2 else ""
            raise DatasetError(
                f"{file}: record {index} is not a tf.train.Example{what}: it has field {other}, "
                "which an Example lacks (SequenceExample and other protos are not supported)")
        self.records += 1
        self.record_bytes += len(raw)
        for name, feature in example.features.feature.items():
            _observe(self.features.setdefault(name, {}), feature)

    def result(self, files) -> tuple[list[FeatureInfo], int]:
        if self.records == 0:
            raise DatasetError(f"{files[0]}: no records to infer a schema from")
        if not self.features:
            raise DatasetError(f"{files[0]}: records have no features: not tf.train.Example "
                               "records?")
        return ([_feature_info(name, stat, self.records)
                 for name, stat in sorted(self.features.items())], self.records)


_KIND_NAMES = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}


def _observe(stat: dict, feature) -> None:
    kind = feature.WhichOneof("kind")
    values = getattr(feature, kind).value if kind else []
    name = _KIND_NAMES.get(kind, "empty")
    kinds = stat.get("kinds")
    if kinds is None:
        kinds = stat["kinds"] = set()
        stat["min"] = stat["max"] = len(values)
        stat["present"] = 0
    kinds.add(name)
    stat["present"] += 1
    length = len(values)
    if length < stat["min"]:
        stat["min"] = length
    elif length > stat["max"]:
        stat["max"] = length
    if "example" not in stat and length:
        stat["example"] = _render(values, name)
    if name == "bytes":
        formats = stat.setdefault("formats", set())
        for value in values:
            image_format = sniff_format(value[:32])
            formats.add(image_format.value if image_format else None)
            if image_format:  # a header read: microseconds, cheap beside the record read
                try:
                    height, width = image_size(value, image_format)
                except ValueError:
                    continue
                pixels = height * width
                stat["pixels"] = stat.get("pixels", 0) + pixels
                stat["sized"] = stat.get("sized", 0) + 1
                if "min_size" not in stat or pixels < stat["min_size"][0] * stat["min_size"][1]:
                    stat["min_size"] = (height, width)
                if "max_size" not in stat or pixels > stat["max_size"][0] * stat["max_size"][1]:
                    stat["max_size"] = (height, width)


def _render(values, kind: str) -> str:
    first = values[0]
    if kind == "bytes":
        text = first[:24]
        shown = repr(text) + ("..." if len(first) > 24 else "")
        return shown if len(values) == 1 else f"[{shown}, ...] ({len(values)} values)"
    shown = ", ".join(f"{value:g}" if kind == "float" else str(value) for value in values[:4])
    return shown if len(values) == 1 else f"[{shown}{', ...' if len(values) > 4 else ''}]"


def _feature_info(name: str, stat: dict, records: int) -> FeatureInfo:
    kinds = stat["kinds"] - {"empty"}
    kind = next(iter(kinds)) if len(kinds) == 1 else ("mixed" if kinds else "empty")
    image_format = min_size = max_size = mean_pixels = None
    formats = stat.get("formats", set())
    if formats and None not in formats:
        image_format = next(iter(formats)) if len(formats) == 1 else "mixed"
        min_size = stat.get("min_size", (0, 0))
        max_size = stat.get("max_size", (0, 0))
        if stat.get("sized"):
            mean_pixels = stat["pixels"] / stat["sized"]
    return FeatureInfo(name, kind, stat["min"], stat["max"], stat["present"], image_format,
                       min_size, max_size, stat.get("example", ""), mean_pixels,
                       records=records, kinds=tuple(sorted(kinds)))


def pick_image_key(features: list[FeatureInfo]) -> str | None:
    images = {feature.name for feature in features if feature.image_format}
    for candidate in IMAGE_KEY_CANDIDATES:
        if candidate in images:
            return candidate
    return min(images) if images else None


def pick_label_key(features: list[FeatureInfo]) -> str | None:
    scalars = {feature.name for feature in features
               if feature.kind == "int64" and feature.fixed_length and feature.max_length == 1}
    for candidate in LABEL_KEY_CANDIDATES:
        if candidate in scalars:
            return candidate
    named = sorted(name for name in scalars if "label" in name.lower())
    return named[0] if named else None


def count_records(file: Path, compression: str | None) -> int:
    """Exact record count of one file, read in a graph loop (no Python per record)."""
    import numpy as np
    import tensorflow as tf

    dataset = tf.data.TFRecordDataset(str(file), tf_compression_type(compression))
    return int(dataset.reduce(np.int64(0), lambda count, _: count + 1))


def _count_records(files, compression, progress, stats: _SchemaStats) -> list[FileInfo]:
    """Read every record of every file: count them and feed the schema statistics.

    One dataset reads the files one after the other, tagged with their index, and crosses
    into Python 256 records at a time: a dataset per file costs about 25 ms to make and
    iterate, which took 14 s for 500 small files.
    """
    import numpy as np
    import tensorflow as tf

    kind = tf_compression_type(compression)
    counts = [0] * len(files)
    tagged = tf.data.Dataset.from_tensor_slices(
        (np.arange(len(files), dtype=np.int64), [str(file) for file in files])).flat_map(
        lambda index, name: tf.data.TFRecordDataset(name, kind).map(lambda raw: (index, raw)))
    with Progress(len(files), "count", unit="file", enabled=progress) as bar:
        done = 0  # files finished, for the progress bar
        try:
            for indices, block in tagged.batch(256).as_numpy_iterator():
                for index, raw in zip(indices.tolist(), block, strict=True):
                    stats.observe(raw, files[index], counts[index])
                    counts[index] += 1
                if indices[-1] > done:
                    bar.update(int(indices[-1]) - done)
                    done = int(indices[-1])
        except tf.errors.OpError as error:
            # the failing file is the first one not read to its end: find it, to name it
            bad = _first_unreadable(files[done:], compression) or files[done]
            count = counts[files.index(bad)]
            if count == 0:
                raise DatasetError(f"{bad}: corrupted or not a TFRecord file "
                                   f"({short_tf_message(error)}); run 'tfopt verify' on it"
                                   ) from None
            raise DatasetError(f"{bad}: cannot read every record ({short_tf_message(error)}, "
                               f"after {count:,} records); run 'tfopt verify' for details"
                               ) from None
        bar.update(len(files) - done)
    return [FileInfo(str(file), file.stat().st_size, count)
            for file, count in zip(files, counts, strict=True)]


def _first_unreadable(files, compression):
    import tensorflow as tf

    for file in files:
        try:
            count_records(file, compression)
        except tf.errors.OpError:
            return file
    return None
