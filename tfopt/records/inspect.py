"""``inspect``: the schema, record count and shards of any TFRecord dataset.

Works on tfopt's datasets and on foreign ones alike: without ``fast``, every record is read to
count it and the schema comes from all of them (see
:mod:`tfopt.records.format.schema_sample`); GZIP is detected from the files.

Example:
    >>> info = inspect("imagenet/train-*")
    >>> info.image_key, info.num_records
    ('image/encoded', 1281167)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tfopt._progress import Progress
from tfopt._validate import flag, whole_number
from tfopt.errors import DatasetError
from tfopt.records.format.example_pb import example_classes
from tfopt.records.format.framing import RecordError, read_records
from tfopt.records.format.layout import Layout, manifest_listing, resolve_dataset
from tfopt.records.format.schema_sample import (
    FeatureInfo,
    SchemaStats,
    pick_image_key,
    pick_label_key,
    render_values,
    sample_schema,
)
from tfopt.records.manifest import MANIFEST_NAME, Manifest, interrupted_swap
from tfopt.records.schema import Encoding

_FILES_SHOWN = 20  # a per-file table longer than this buries the schema; --json has them all


@dataclasses.dataclass(frozen=True)
class FileInfo:
    """One TFRecord file as ``inspect`` found it (``num_records`` None: not counted)."""

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
        layout: How the files were found: a manifest, split names, split folders...
        split_files: Split -> its files, as every reader resolves them
            (:func:`~tfopt.records.format.layout.resolve_dataset`); empty without splits.
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
    layout: Layout = Layout.FILES
    split_files: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    @property
    def num_bytes(self) -> int:
        return sum(info.num_bytes for info in self.files)

    @property
    def split_records(self) -> dict[str, int | None]:
        """Split -> its records: the manifest's, else those counted in its files."""
        if self.manifest is not None:
            return {name: split.num_records for name, split in self.manifest.splits.items()}
        counted = {info.path: info.num_records for info in self.files}
        return {name: (None if any(counted.get(f) is None for f in files)
                       else sum(counted[f] for f in files))
                for name, files in self.split_files.items()}

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
            "splits": self.split_records or None,
            "layout": self.layout.value,
            "split_files": self.split_files,
            "notes": self.notes,
        }

    def _shown_name(self, path: str) -> str:
        """A file's name, or its path inside a folder of split subfolders (train/part-0)."""
        if self.layout is Layout.SPLIT_FOLDERS:
            return str(Path(path).relative_to(self.path))
        return Path(path).name

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
        elif self.split_files:  # no manifest: told from the names or the subfolders
            records = self.split_records
            splits = ", ".join(f"{name} {records[name]:,} in {len(files)} file(s)"
                               for name, files in self.split_files.items())
            lines.append(f"splits (from {self.layout.told_from}): {splits}")
        if self.manifest is not None:
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
                if feature.not_images:
                    detail += (f"; {feature.not_images:,} not an image (first: "
                               f"{feature.first_not_image})")
            kind = (f"mixed ({', '.join(feature.kinds)})" if feature.kind == "mixed"
                    else feature.kind)
            if feature.name in raw:  # an array stored as its bytes: say what they hold
                kind = f"{raw[feature.name]} (raw bytes)"
            rows.append([feature.name, kind, length, detail])
        lines.append(f"schema (from {self.sampled:,} records):")
        lines.append(table(rows, ["feature", "type", "length", "content"], align="llrl"))
        if len(self.files) <= _FILES_SHOWN:
            file_rows = [[self._shown_name(info.path), human_bytes(info.num_bytes),
                          "-" if info.num_records is None else f"{info.num_records:,}"]
                         for info in self.files]
            lines.append(table(file_rows, ["file", "bytes", "records"]))
        else:
            lines.append(f"{len(self.files):,} files: the per-file table is shown for up to "
                         f"{_FILES_SHOWN}; --json lists every file")
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
        tfopt.errors.DatasetError: Nothing readable at ``path``, records that are not
            ``tf.train.Example``, or mixed compression.
        tfopt.errors.InvalidArgumentError: ``sample`` is not an int >= 1, or ``fast`` not a bool.

    Example:
        >>> info = inspect("imagenet/train-*")
        >>> info.image_key, info.label_key
        ('image/encoded', 'image/class/label')
    """
    # take(0) reads nothing and take(-1) everything: both would mislead, so refuse them here
    sample = whole_number(sample, "sample", 1, "an int >= 1 (records), e.g. 64")
    fast = flag(fast, "fast")
    folder = Path(str(path))
    if folder.name == MANIFEST_NAME and folder.is_file():
        folder = folder.parent
    swap = interrupted_swap(folder) if folder.is_dir() else None
    if swap is not None:  # its shards would pass for a dataset of their own
        raise DatasetError(f"{folder}: incomplete dataset: {swap}")
    try:
        return _inspect(path, fast, sample, progress)
    except OSError as error:  # a shard that cannot be opened or read (permissions, I/O)
        raise DatasetError(f"{error.filename or path}: cannot be read "
                           f"({error.strerror or error}); make it readable, or leave it out"
                           ) from None


def _inspect(path, fast: bool, sample: int, progress) -> InspectResult:
    dataset = resolve_dataset(path)  # what the pipelines and verify read, split the same way
    files, manifest, notes = list(dataset.files), dataset.manifest, list(dataset.notes)
    if dataset.layout is Layout.FILES:
        owner, folder = manifest_listing(files)
        if owner is not None:  # the schema shown is what the records hold, not the manifest's
            notes.append(f"these shards belong to the tfopt dataset in {folder}: pipelines "
                         f"read them with its manifest's schema ('tfopt inspect {folder}')")
    missing = [str(file) for file in files if not file.is_file()]  # a folder there is missing too
    if missing:
        raise DatasetError(f"{path}: shard(s) listed in the manifest are missing: "
                           f"{', '.join(missing[:3])}; run 'tfopt verify {path}'")
    compression = dataset.compression
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
        stats = SchemaStats()
        infos = _count_records(files, compression, progress, stats, notes)
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
                         counted_from, sampled, manifest, notes, dataset.layout,
                         {name: [str(file) for file in split]
                          for name, split in dataset.splits.items()})


def _with_raw_examples(features: list[FeatureInfo], manifest: Manifest, files,
                       compression) -> list[FeatureInfo]:
    """Show raw-bytes arrays (float64, one-byte integers, ...) as the numbers they hold, decoded
    with the manifest's dtype and shape, instead of as bytes such as b'\\x00\\x00\\xf8\\x7f'."""
    import numpy as np

    raw = {spec.name: spec for spec in manifest.features if spec.encoding is Encoding.RAW}
    if not raw or not files:
        return features
    try:
        record = next(iter(read_records(files[0], compression)), None)
    except RecordError:
        record = None  # the schema shown says what could be read; verify names the damage
    if record is None:
        return features
    example = example_classes().Example.FromString(record)
    shown = []
    for info in features:
        spec, feature = raw.get(info.name), example.features.feature.get(info.name)
        if spec is not None and feature is not None and feature.bytes_list.value:
            values = np.frombuffer(feature.bytes_list.value[0],
                                   np.dtype(spec.dtype).newbyteorder("<")).ravel()
            kind = "float" if values.dtype.kind == "f" else "int64"
            text = render_values([value.item() for value in values], kind)
            info = dataclasses.replace(info, example=text)
        shown.append(info)
    return shown



def _count_records(files, compression, progress, stats: SchemaStats,
                   notes: list[str]) -> list[FileInfo]:
    """Read every record of every file: count them and feed the schema statistics.

    Fewer bytes than a record header after the last whole record end a file as they end it
    for TensorFlow's reader (a note says so); any other damage is an error naming the file.
    """
    counts = [0] * len(files)
    with Progress(len(files), "count", unit="file", enabled=progress) as bar:
        for position, file in enumerate(files):
            try:
                for raw in read_records(file, compression):
                    stats.observe(raw, file, counts[position])
                    counts[position] += 1
            except RecordError as error:
                count = counts[position]
                if error.kind == "too_long":  # the limit, not damage, is what stops it here
                    raise DatasetError(f"{file}: record {error.index:,}: {error.reason}"
                                       ) from None
                if error.kind == "trailing":
                    notes.append(f"{file}: {error.reason} (after {count:,} records); run "
                                 f"'tfopt verify' on it")
                elif count == 0:
                    raise DatasetError(f"{file}: corrupted or not a TFRecord file "
                                       f"({error.reason}); run 'tfopt verify' on it") from None
                else:
                    raise DatasetError(f"{file}: cannot read every record ({error.reason}, "
                                       f"after {count:,} records); run 'tfopt verify' for "
                                       "details") from None
            bar.update()
    return [FileInfo(str(file), file.stat().st_size, count)
            for file, count in zip(files, counts, strict=True)]
