"""``inspect``: the schema, record count and shards of any TFRecord dataset.

Works on tfopt's datasets and on foreign ones alike: the schema is inferred from the first
records (feature names and list types, fixed or variable length, which bytes features hold
JPEG/PNG images and their sizes), GZIP is detected from the files, and the common image/label
key conventions (the Model Garden's ``image/encoded`` + ``image/class/label`` and kin) are named.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tfopt._progress import Progress
from tfopt._tf_messages import short_tf_message
from tfopt._validate import require
from tfopt.errors import DatasetError
from tfopt.records._files_of import is_gzip, resolve_files, tf_compression_type
from tfopt.records.image_header import image_size, sniff_format
from tfopt.records.manifest import Manifest

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

    @property
    def fixed_length(self) -> bool:
        return self.min_length == self.max_length

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["fixed_length"] = self.fixed_length
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
        for feature in self.features:
            length = (str(feature.min_length) if feature.fixed_length
                      else f"{feature.min_length}-{feature.max_length} (varies)")
            detail = feature.example
            if feature.image_format:
                detail = (f"{feature.image_format} images, {feature.min_size[0]}x{feature.min_size[1]}"
                          f" to {feature.max_size[0]}x{feature.max_size[1]} px")
            rows.append([feature.name, feature.kind, length, detail])
        lines.append(f"schema (from {self.sampled} records):")
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
        sample: Records read to infer the schema. Defaults to 64.
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
    missing = [str(file) for file in files if not file.is_file()]  # a folder there is missing too
    if missing:
        raise DatasetError(f"{path}: shard(s) listed in the manifest are missing: "
                           f"{', '.join(missing[:3])}; run 'tfopt verify {path}'")
    compression = detect_compression(files, manifest)
    features, sampled = infer_schema(files, compression, sample)
    image_key = manifest.image_key if manifest else pick_image_key(features)
    label_key = manifest.label_key if manifest else pick_label_key(features)
    if fast and manifest is not None:
        infos = [FileInfo(str(file), file.stat().st_size, shard.num_records)
                 for file, shard in zip(files, manifest.shards, strict=True)]
        counted_from = "manifest"
    else:
        if fast:
            notes.append("--fast needs a manifest; counted the records instead")
        infos = _count_records(files, compression, progress)
        counted_from = "records"
        if manifest is not None and sum(info.num_records for info in infos) != manifest.num_records:
            # a shard cut at a record boundary reads without an error: only the count shows it
            notes.append(f"{sum(info.num_records for info in infos):,} records counted, the "
                         f"manifest says {manifest.num_records:,}: run 'tfopt verify {path}'")
    total = sum(info.num_records for info in infos)
    return InspectResult(str(path), infos, compression, features, image_key, label_key, total,
                         counted_from, sampled, manifest, notes)


def detect_compression(files: list[Path], manifest: Manifest | None) -> str | None:
    if manifest is not None:
        return manifest.compression
    gzipped = {file: is_gzip(file) for file in files}
    if len(set(gzipped.values())) > 1:
        plain = [str(file) for file, flag in gzipped.items() if not flag][:2]
        raise DatasetError(f"mixed compression: some files are GZIP and some not (e.g. {plain}); "
                           "inspect them separately")
    return "gzip" if next(iter(gzipped.values())) else None


def infer_schema(files, compression, sample,
                 stop_at_corruption: bool = False) -> tuple[list[FeatureInfo], int]:
    """Infer the schema from the first ``sample`` records, reading the files in order.

    Args:
        files: TFRecord files.
        compression: ``"gzip"`` or None.
        sample: Records to read.
        stop_at_corruption: Use the records read before a corrupted one instead of raising,
            or those of the next files when a file's first record is corrupted (readers that
            handle corruption themselves). Defaults to False.

    Raises:
        tfopt.DatasetError: Records that are not ``tf.train.Example``, a corrupted file (named),
            or no records at all.
    """
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    stats: dict[str, dict] = {}
    sampled = 0
    corrupted = None  # the first corrupted file's error, while nothing has been sampled
    for file in files:
        if sampled >= sample:
            break
        dataset = tf.data.TFRecordDataset(str(file), tf_compression_type(compression))
        try:
            for index, raw in enumerate(dataset.take(sample - sampled)):
                try:
                    example = tf.train.Example.FromString(raw.numpy())
                except DecodeError:
                    raise DatasetError(
                        f"{file}: record {index} is not a tf.train.Example (SequenceExample and "
                        "other protos are not supported)") from None
                sampled += 1
                for name, feature in example.features.feature.items():
                    _observe(stats.setdefault(name, {}), feature)
        except tf.errors.DataLossError as error:
            problem = DatasetError(f"{file}: corrupted or not a TFRecord file "
                                   f"({short_tf_message(error)}); run 'tfopt verify' on it")
            if not stop_at_corruption:
                raise problem from None
            if sampled:
                break
            # nothing read yet (the first record is bad): sample the next file
            corrupted = corrupted or problem
    if sampled == 0 and corrupted is not None:
        raise corrupted
    if sampled == 0:
        raise DatasetError(f"{files[0]}: no records to infer a schema from")
    if not stats:
        raise DatasetError(f"{files[0]}: records have no features: not tf.train.Example records?")
    return [_feature_info(name, stat) for name, stat in sorted(stats.items())], sampled


def _observe(stat: dict, feature) -> None:
    kind = feature.WhichOneof("kind")
    values = getattr(feature, kind).value if kind else []
    name = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}.get(kind, "empty")
    stat.setdefault("kinds", set()).add(name)
    stat.setdefault("lengths", []).append(len(values))
    if "example" not in stat and len(values):
        stat["example"] = _render(values, name)
    if name == "bytes":
        for value in values:
            image_format = sniff_format(value[:32])
            stat.setdefault("formats", set()).add(image_format.value if image_format else None)
            if image_format:
                try:
                    stat.setdefault("sizes", []).append(image_size(value, image_format))
                except ValueError:
                    pass


def _render(values, kind: str) -> str:
    first = values[0]
    if kind == "bytes":
        text = first[:24]
        shown = repr(text) + ("..." if len(first) > 24 else "")
        return shown if len(values) == 1 else f"[{shown}, ...] ({len(values)} values)"
    shown = ", ".join(f"{value:g}" if kind == "float" else str(value) for value in values[:4])
    return shown if len(values) == 1 else f"[{shown}{', ...' if len(values) > 4 else ''}]"


def _feature_info(name: str, stat: dict) -> FeatureInfo:
    kinds = stat["kinds"] - {"empty"}
    kind = kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "empty")
    lengths = stat["lengths"]
    image_format = min_size = max_size = None
    formats = stat.get("formats", set())
    if formats and None not in formats:
        image_format = formats.pop() if len(formats) == 1 else "mixed"
        sizes = stat.get("sizes") or [(0, 0)]
        min_size = min(sizes, key=lambda hw: hw[0] * hw[1])
        max_size = max(sizes, key=lambda hw: hw[0] * hw[1])
    mean_pixels = None
    if image_format and stat.get("sizes"):
        mean_pixels = sum(h * w for h, w in stat["sizes"]) / len(stat["sizes"])
    return FeatureInfo(name, kind, min(lengths), max(lengths), len(lengths), image_format,
                       min_size, max_size, stat.get("example", ""), mean_pixels)


def pick_image_key(features: list[FeatureInfo]) -> str | None:
    images = {feature.name for feature in features if feature.image_format}
    for candidate in IMAGE_KEY_CANDIDATES:
        if candidate in images:
            return candidate
    return min(images) if images else None


def pick_label_key(features: list[FeatureInfo]) -> str | None:
    scalars = {feature.name for feature in features
               if feature.kind == "int64" and feature.min_length == feature.max_length == 1}
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


def _count_records(files, compression, progress) -> list[FileInfo]:
    import tensorflow as tf

    infos = []
    with Progress(len(files), "count", unit="file",
                  enabled=progress) as bar:
        for file in files:
            try:
                count = count_records(file, compression)
            except tf.errors.OpError as error:
                raise DatasetError(f"{file}: cannot read every record ({short_tf_message(error)}); "
                                   f"run 'tfopt verify' for details") from None
            infos.append(FileInfo(str(file), file.stat().st_size, count))
            bar.update()
    return infos
