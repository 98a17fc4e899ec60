"""The schema of TFRecord files inferred from their records: the features and their keys.

:class:`SchemaStats` takes in records one by one (feature names and list types, fixed or
variable length, present in every record or not, which bytes features hold JPEG/PNG images and
their sizes); :func:`sample_schema` is the build-time sample of pipelines, the first records of
every file; :func:`pick_image_key` and :func:`pick_label_key` name the common key conventions
(the Model Garden's ``image/encoded`` + ``image/class/label`` and kin).

Example:
    >>> sample = sample_schema(["data/train-00000-of-00002", "data/train-00001-of-00002"], None)
    >>> pick_image_key(sample.features), pick_label_key(sample.features)
    ('image/encoded', 'image/class/label')
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tfopt.errors import DatasetError
from tfopt.records.format.example_wire import ExampleReader
from tfopt.records.format.framing import RecordError, read_records
from tfopt.records.image_header import image_size, sniff_format

# Keys that hold the encoded image / the class label in public datasets, most specific first.
IMAGE_KEY_CANDIDATES = ("image/encoded", "image/jpeg", "image_raw", "image/raw", "image_bytes",
                        "image", "img", "encoded", "jpeg", "png")
# A bytes feature whose sampled values are images but for at most one in this many is still
# the image feature: one damaged image among those sampled made a dataset of images one of raw
# bytes, and the pipeline ignored image_size without a word
MOST_NOT_IMAGES = 10
# Records in a row without a feature after which a file is given up: no dataset holds such
# runs, and a GZIP bomb of empty records does (2e7 of them fit in 606 KB, and inspect and
# verify would read through every one; the cap stops them after a 200th of that).
FEATURELESS_RECORDS_CAP = 100_000
LABEL_KEY_CANDIDATES = ("image/class/label", "image/label", "label", "labels", "class_id",
                        "class", "target", "y", "image/class")


@dataclasses.dataclass(frozen=True)
class FeatureInfo:
    """One feature as seen in the sampled records.

    Attributes:
        name: The feature key.
        kind: ``"bytes"``, ``"int64"`` or ``"float"``; ``"mixed"`` for several list types,
            ``"empty"`` when every list read was empty.
        min_length: Fewest values in one record.
        max_length: Most values in one record.
        present_in: Sampled records that have the feature.
        image_format: ``"jpeg"``, ``"png"``, ... when the values are images of that format,
            ``"mixed"`` for several formats, else None. A few values that are not images (at
            most 1 in :data:`MOST_NOT_IMAGES`) leave the feature an image one: damaged records
            in a dataset of images, counted in ``not_images``.
        min_size: Smallest image ``(height, width)`` seen, for image features.
        max_size: Largest image ``(height, width)`` seen, for image features.
        example: A short rendering of the first value.
        mean_pixels: Mean ``height * width`` of the sampled images, for image features.
        sizes: Every sampled image's ``(height, width)``, for image features (the sample is
            bounded, so is this).
        records: Records read: ``present_in`` below it means the feature is optional.
        kinds: The list types seen; two or more make ``kind`` "mixed".
        not_images: Values of an image feature that are not images (no known header).
        first_not_image: Where the first of them is: ``"FILE, record N"``.
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
    mean_pixels: float | None = None
    records: int = 0
    kinds: tuple[str, ...] = ()
    sizes: tuple[tuple[int, int], ...] = ()
    not_images: int = 0
    first_not_image: str = ""

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
        tfopt.errors.DatasetError: Records that are not ``tf.train.Example``, a corrupted file (named),
            or no records at all.
    """
    files = [Path(file) for file in files]
    chosen = files
    if len(files) > max_files:
        step = (len(files) - 1) / (max_files - 1)
        chosen = [files[round(i * step)] for i in range(max_files)]
    per_file = max(1, records // len(chosen))
    # the first record tells the record size, which bounds the records per file
    first = _first_record_size(chosen, compression, stop_at_corruption)
    if first:
        per_file = max(1, min(per_file, max_bytes // (first * len(chosen))))
    schema = SchemaStats()
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


def _first_record_size(files, compression, stop_at_corruption: bool) -> int | None:
    for file in files:
        try:
            for record in read_records(file, compression):
                return len(record)
        except RecordError as error:
            if error.kind == "trailing":  # TensorFlow's reader ends there too, without an error
                continue
            if not stop_at_corruption:
                raise _corrupted(error) from None
    return None


def _corrupted(error: RecordError) -> DatasetError:
    if error.kind == "too_long":  # the limit, not damage, is what stops it here
        return DatasetError(f"{error.file}: record {error.index:,}: {error.reason}")
    return DatasetError(f"{error.file}: corrupted or not a TFRecord file (record {error.index}: "
                        f"{error.reason}); run 'tfopt verify' on it")


def _read_in_order(schema: SchemaStats, files, compression, per_file: int,
                   stop_at_corruption) -> None:
    """Observe the first ``per_file`` records of each file, one file after the other."""
    corrupted = None  # the first corrupted file's error, while nothing has been sampled
    for file in files:
        try:
            for index, raw in enumerate(read_records(file, compression)):
                if index >= per_file:
                    break
                schema.observe(raw, file, index)
        except RecordError as error:
            if error.kind == "trailing":  # TensorFlow's reader ends there too, without an error
                continue
            problem = _corrupted(error)
            if not stop_at_corruption:
                raise problem from None
            # keep what was read before it, and sample the next files
            corrupted = corrupted or problem
    if schema.records == 0 and corrupted is not None:
        raise corrupted


class SchemaStats:
    """Feature statistics accumulated record by record, in constant memory per feature."""

    def __init__(self):
        self.features: dict[str, dict] = {}
        self.records = 0
        self.record_bytes = 0
        self._featureless = 0  # records in a row without a feature, up to the last one
        # looked up once: observe runs for every record read, where a lookup per call adds up
        self._read = ExampleReader().read

    def observe(self, raw: bytes, file, index: int) -> None:
        """Take in one serialized record, record ``index`` of ``file`` (named in errors)."""
        example, problem = self._read(raw)
        if problem is not None:  # verify's verdict too: one decoder (ExampleReader) for both
            raise DatasetError(f"{file}: record {index} is {problem}; run 'tfopt verify' on it")
        self.records += 1
        self.record_bytes += len(raw)
        features = example.features.feature
        if not features:
            self._featureless += 1
            if self._featureless >= FEATURELESS_RECORDS_CAP:
                first = index - FEATURELESS_RECORDS_CAP + 1
                raise DatasetError(
                    f"{file}: {FEATURELESS_RECORDS_CAP:,} records in a row from record {first:,} "
                    "hold no features: not tf.train.Example data, or a decompression bomb (a "
                    f"GZIP of empty records); tfopt gives up after {FEATURELESS_RECORDS_CAP:,} "
                    "such records")
            return
        self._featureless = 0
        for name, feature in features.items():
            _observe(self.features.setdefault(name, {}), feature, file, index)

    def result(self, files) -> tuple[list[FeatureInfo], int]:
        """The features seen, sorted by name, and the records read."""
        if self.records == 0:
            raise DatasetError(f"{files[0]}: no records to infer a schema from")
        if not self.features:
            raise DatasetError(f"{files[0]}: records have no features: not tf.train.Example "
                               "records?")
        return ([_feature_info(name, stat, self.records)
                 for name, stat in sorted(self.features.items())], self.records)


_KIND_NAMES = {"bytes_list": "bytes", "int64_list": "int64", "float_list": "float"}


def _observe(stat: dict, feature, file, index: int) -> None:
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
        stat["example"] = render_values(values, name)
    if name == "bytes":
        formats = stat.setdefault("formats", set())
        for value in values:
            image_format = sniff_format(value[:32])
            if not image_format:
                stat["not_images"] = stat.get("not_images", 0) + 1
                stat.setdefault("first_not_image", f"{file}, record {index}")
                continue
            formats.add(image_format.value)
            stat["images"] = stat.get("images", 0) + 1
            try:  # a header read: microseconds, cheap beside the record read
                height, width = image_size(value, image_format)
            except ValueError:
                continue
            pixels = height * width
            stat["pixels"] = stat.get("pixels", 0) + pixels
            stat["sized"] = stat.get("sized", 0) + 1
            stat.setdefault("sizes", []).append((height, width))
            if "min_size" not in stat or pixels < stat["min_size"][0] * stat["min_size"][1]:
                stat["min_size"] = (height, width)
            if "max_size" not in stat or pixels > stat["max_size"][0] * stat["max_size"][1]:
                stat["max_size"] = (height, width)


def render_values(values, kind: str) -> str:
    """A short rendering of a feature's values (``kind``: "bytes", "int64" or "float")."""
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
    not_images = stat.get("not_images", 0)
    images = stat.get("images", 0)
    if formats and not_images * MOST_NOT_IMAGES <= images + not_images:
        image_format = next(iter(formats)) if len(formats) == 1 else "mixed"
        min_size = stat.get("min_size", (0, 0))
        max_size = stat.get("max_size", (0, 0))
        if stat.get("sized"):
            mean_pixels = stat["pixels"] / stat["sized"]
    return FeatureInfo(name, kind, stat["min"], stat["max"], stat["present"], image_format,
                       min_size, max_size, stat.get("example", ""), mean_pixels,
                       records=records, kinds=tuple(sorted(kinds)),
                       sizes=tuple(stat.get("sizes", ())) if image_format else (),
                       not_images=not_images if image_format else 0,
                       first_not_image=stat.get("first_not_image", "") if image_format else "")


def pick_image_key(features: list[FeatureInfo]) -> str | None:
    """The feature holding encoded images: a known key first (IMAGE_KEY_CANDIDATES)."""
    images = {feature.name for feature in features if feature.image_format}
    for candidate in IMAGE_KEY_CANDIDATES:
        if candidate in images:
            return candidate
    return min(images) if images else None


def pick_label_key(features: list[FeatureInfo]) -> str | None:
    """The feature holding the class label: one int64 per record, a known key first."""
    scalars = {feature.name for feature in features
               if feature.kind == "int64" and feature.fixed_length and feature.max_length == 1}
    for candidate in LABEL_KEY_CANDIDATES:
        if candidate in scalars:
            return candidate
    named = sorted(name for name in scalars if "label" in name.lower())
    return named[0] if named else None
