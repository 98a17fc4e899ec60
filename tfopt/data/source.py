"""What a pipeline reads: files, how to parse each feature, image and label keys, sizes.

The files, their splits and compression are resolved as ``inspect`` and ``verify`` resolve
them (:func:`tfopt.records.format.layout.resolve_dataset`: a manifest's splits, or, for
TFRecord files written elsewhere, splits told from the file names or subfolders); the split
is chosen here. From a tfopt dataset folder (or a list or glob of its shards) everything comes
from the manifest; from other TFRecord files the schema is inferred from a bounded sample of
the first records of every file (``SAMPLE_RECORDS``, ``SAMPLE_BYTES``, ``SAMPLE_FILES``; see
``docs/data.md``). A few images are always sampled for their sizes.

Raises:
    tfopt.DatasetError: No files, an incomplete dataset, or an unknown split.
    tfopt.InvalidArgumentError: A key that is not a feature, or not images.

Example:
    >>> source = resolve_source("shards/", training=True)
    >>> source.num_records, source.image_key
    (2700, 'image')
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from tfopt.errors import DatasetError, InvalidArgumentError, MissingSplitError
from tfopt.records.format.framing import gzip_expansion
from tfopt.records.format.layout import Layout, manifest_listing, resolve_dataset
from tfopt.records.format.schema_sample import (
    FeatureInfo,
    SchemaSample,
    pick_image_key,
    pick_label_key,
    sample_schema,
)
from tfopt.records.manifest import MANIFEST_NAME, Manifest
from tfopt.records.schema import Encoding, FeatureKind

logger = logging.getLogger("tfopt")

# The build-time sample of files without a manifest: the first records of every file. 1024
# small records are read in a fraction of a second; 64 MiB caps it for large ones (600
# ImageNet JPEGs), and 256 files (spread evenly, first and last included) cap the file opens
# of a many-shard dataset.
SAMPLE_RECORDS = 1024
SAMPLE_BYTES = 64 << 20
SAMPLE_FILES = 256
# With a manifest the schema is known: the sample only measures images (one per shard, of
# up to 64 shards spread over the split).
MANIFEST_SAMPLE_RECORDS = 64
# The splits convert writes (tfopt.records.convert.plan): a training pipeline given no split
# reads the first, an evaluation pipeline the second
TRAIN_SPLIT, VALIDATION_SPLIT = "train", "validation"


@dataclasses.dataclass(frozen=True)
class ParsedFeature:
    """How one feature is parsed from a batch of serialized examples.

    Attributes:
        name: The feature key.
        kind: The stored list type (bytes, int64 or float).
        shape: Per-example shape in the record; None for variable length (ragged).
        raw_dtype: For raw-bytes arrays, the NumPy dtype to decode into, else None.
        raw_shape: For raw-bytes arrays, the per-example array shape; None for a
            variable-length list stored as its bytes (decoded into a ragged batch).
        value_dtype: For numbers stored in an int64 or float list, the source's narrower
            NumPy dtype (int8-uint32, float16, bool) to cast back to, else None.
    """

    name: str
    kind: FeatureKind
    shape: list[int] | None
    raw_dtype: str | None = None
    raw_shape: list[int] | None = None
    value_dtype: str | None = None


@dataclasses.dataclass(frozen=True)
class PipelineSource:
    """A resolved pipeline input.

    Attributes:
        files: The TFRecord files, in a stable order.
        compression: ``"gzip"`` or None.
        features: How each kept feature is parsed.
        image_key: The encoded-image feature, if any.
        label_key: The label feature, if any.
        image_encoding: ``"jpeg"``, ``"png"``, ... or ``"image"`` for mixed formats.
        num_records: Records in ``files``: exact from a manifest or the builder's header walk
            (:func:`with_walked_counts`), else None.
        num_bytes: Bytes in ``files``.
        expected_counts: File -> record count, from a manifest or the header walk (None
            without either: GZIP shards another tool wrote).
        mean_image_pixels: Mean height*width of the sampled images.
        min_image_side: The smallest shorter side among the sampled images.
        class_names: From the manifest, when labels are classes.
    """

    files: list[str]
    compression: str | None
    features: list[ParsedFeature]
    image_key: str | None
    label_key: str | None
    image_encoding: str | None
    num_records: int | None
    num_bytes: int
    expected_counts: dict[str, int] | None
    mean_image_pixels: float | None
    min_image_side: int | None
    class_names: list[str] | None

    sampled_record_bytes: float | None = None  # mean size of the sampled records
    image_sizes: tuple[tuple[int, int], ...] = ()  # (height, width) of each sampled image
    # sampled values of the image feature that are not images: (count, values, where the first is)
    not_images: tuple[int, int, str] | None = None
    # GZIP files without a manifest: decompressed bytes per file byte, over the first file's start
    gzip_expansion: float | None = None
    # the split read: a manifest's, or one told from foreign files' names or subfolders; None
    # for files named by a list or a glob, or an unsplit folder
    split: str | None = None
    # the counts are the header walk's (shards without a manifest), not a manifest's
    counts_walked: bool = False

    @property
    def mean_record_bytes(self) -> float:
        if self.num_records:
            return self.num_bytes / self.num_records
        return self.sampled_record_bytes or 4096.0


def with_walked_counts(source: PipelineSource, counts: list[int]) -> PipelineSource:
    """``source`` without a manifest, given the record counts the header walk found
    (:func:`tfopt.data.shard_check.read_limits`, one per file): an epoch's length is exact
    (steps, a cache's size); the records themselves are TensorFlow's reader's to check."""
    counted = dict(zip(source.files, counts, strict=True))
    return dataclasses.replace(source, expected_counts=counted, num_records=sum(counts),
                               counts_walked=True)


def resolve_source(source, *, split: str | None = None, image_key: str | None = None,
                   label_key: str | None = None, training: bool = False) -> PipelineSource:
    """Resolve a dataset folder, a list of shard files or a glob into a :class:`PipelineSource`.

    Args:
        source: A dataset folder (a tfopt dataset, or TFRecord files written elsewhere), a
            list of TFRecord files, or a glob.
        split: The split to read: a manifest's, or one a folder's file names or subfolders
            tell. Defaults to "train" when training, else "validation" (never the training
            split in its place: pass ``split="train"`` to evaluate on it). A folder whose file
            names tell no split, a list and a glob are read whole.
        image_key: The encoded-image feature. Defaults to the manifest's or the inferred one.
        label_key: The label feature. Defaults to the manifest's or the inferred one.
        training: Whether the pipeline is for training (only picks the default split).

    Raises:
        tfopt.errors.MissingSplitError: The dataset has no such split (a DatasetError): the
            one given, or "validation" for an evaluation pipeline given no split.
        tfopt.DatasetError: No files, an incomplete dataset, or a folder no reader can
            split (the same error ``inspect`` and ``verify`` give).
        tfopt.InvalidArgumentError: ``image_key`` or ``label_key`` is not a feature.
    """
    try:
        return _resolve(source, split, image_key, label_key, training)
    except OSError as error:  # a shard that cannot be opened or read (permissions, I/O)
        raise DatasetError(f"{error.filename or source}: cannot be read "
                           f"({error.strerror or error}); make it readable, or leave it out of "
                           "the dataset") from None


def _resolve(source, split, image_key, label_key, training) -> PipelineSource:
    manifest, files, folder, compression, split = _files_of(source, split, training)
    # a corrupted record is the pipeline's to report (naming its shard), not the sampler's
    if manifest is not None:
        sample = sample_schema(files, compression, records=MANIFEST_SAMPLE_RECORDS,
                               max_files=MANIFEST_SAMPLE_RECORDS, stop_at_corruption=True)
    else:
        sample = sample_schema(files, compression, records=SAMPLE_RECORDS,
                               max_bytes=SAMPLE_BYTES, max_files=SAMPLE_FILES,
                               stop_at_corruption=True)
    sampled = sample.features
    by_name = {info.name: info for info in sampled}
    image_key = image_key or (manifest.image_key if manifest else pick_image_key(sampled))
    label_key = label_key or (manifest.label_key if manifest else pick_label_key(sampled))
    for argument, key in (("image_key", image_key), ("label_key", label_key)):
        if key is not None and key not in by_name:
            raise InvalidArgumentError(
                f"{argument}={key!r} is not a feature of {source}; it has: {', '.join(by_name)}")
    if manifest is not None:
        features = _features_from_manifest(manifest)
        encoding = manifest.feature(image_key).encoding.value if image_key else None
        listed = {_same_file(folder / s.file): s.num_records for s in manifest.shards}
        counts = {f: listed[_same_file(f)] for f in files}
        num_records = sum(counts.values())
        class_names = manifest.class_names
    else:
        features = _features_from_sample(sampled, sample, keys=(image_key, label_key))
        encoding = by_name[image_key].image_format if image_key else None
        counts, num_records, class_names = None, None, None
        if encoding == "mixed":
            encoding = Encoding.IMAGE.value
    image_info: FeatureInfo | None = by_name.get(image_key) if image_key else None
    if image_key and (image_info is None or not image_info.image_format):
        raise InvalidArgumentError(f"image_key={image_key!r}: its values are not JPEG, PNG, GIF or "
                                   "BMP images in the sampled records")
    return PipelineSource(
        files=files,
        compression=compression,
        features=features,
        image_key=image_key,
        label_key=label_key,
        image_encoding=encoding,
        num_records=num_records,
        num_bytes=sum(Path(f).stat().st_size for f in files),
        expected_counts=counts,
        mean_image_pixels=image_info.mean_pixels if image_info else None,
        min_image_side=min(image_info.min_size) if image_info and image_info.min_size else None,
        class_names=class_names,
        split=split,
        # only needed without a manifest, whose counts give the mean exactly
        sampled_record_bytes=None if manifest else sample.mean_record_bytes,
        image_sizes=image_info.sizes if image_info else (),
        not_images=((image_info.not_images, image_info.present_in, image_info.first_not_image)
                    if image_info and image_info.not_images else None),
        gzip_expansion=(gzip_expansion(files[0]) if manifest is None and compression == "gzip"
                        else None),
    )


def _same_file(path) -> Path:
    """A key under which two spellings of one file's path meet (relative, absolute, ./)."""
    return Path(path).resolve()


def _files_of(source, split, training) -> tuple[Manifest | None, list[str], Path | None,
                                               str | None, str | None]:
    """The files to read, their manifest and its folder (None without), compression, split.

    The files are those ``inspect`` and ``verify`` resolve
    (:func:`~tfopt.records.format.layout.resolve_dataset`); the split is chosen here.
    """
    dataset = resolve_dataset(list(source) if isinstance(source, (list, tuple)) else source)
    files = [str(file) for file in dataset.files]
    if isinstance(source, (list, tuple)):
        files = [str(file) for file in source]  # as spelled: the user's names in every message
    if dataset.layout is Layout.FILES:  # a list, a glob or one file: read whole
        manifest, folder = manifest_listing(files)
        return manifest, files, folder, dataset.compression, None
    if dataset.layout is Layout.INCOMPLETE:
        raise DatasetError(dataset.incomplete)
    path = Path(str(source))
    if path.name == MANIFEST_NAME and path.is_file():
        path = path.parent
    if dataset.layout is Layout.UNSPLIT:
        if split is not None:  # asked for by name: the whole folder would be a guess
            raise MissingSplitError(
                path, split, [],
                f"{path}: no split {split!r}: no file name says a split (as "
                "train-00000-of-00004 does), so the folder is one unsplit dataset; leave "
                "split out to read all of it, or name the files with a glob")
        return None, files, None, dataset.compression, None
    splits = dataset.splits
    told = ("" if dataset.manifest is not None
            else f" (no {MANIFEST_NAME}: splits told from {dataset.layout.told_from})")
    if split is None:
        split = TRAIN_SPLIT if training else VALIDATION_SPLIT
        if split not in splits:  # never the training split in its place, unasked
            if training:
                remedy = f"pass split= one of {', '.join(map(repr, splits))}"
            else:
                remedy = ("pass split='train' (--split train) to evaluate on the training "
                          "data, or " + ("convert again with val_fraction= (--val-fraction "
                                         "0.1) to hold out a validation split"
                                         if dataset.manifest is not None else
                                         f"split= another of {', '.join(map(repr, splits))}"))
            reader = ("a training pipeline (training=True)" if training
                      else "an evaluation pipeline (training=False)")
            raise MissingSplitError(
                path, split, splits,
                f"{path}: has no {split!r} split (it has: {', '.join(splits)}){told}, which "
                f"{reader} reads when no split is given: {remedy}")
    if split not in splits:
        raise MissingSplitError(path, split, splits,
                                f"{path}: no split {split!r}; it has: {', '.join(splits)}{told}")
    manifest = dataset.manifest
    if manifest is None:
        return None, [str(file) for file in splits[split]], None, dataset.compression, split
    shards = manifest.splits[split].shards
    if not any(shard.num_records for shard in shards):  # no batch, no schema sample, no steps
        what = (f"has no shards in its {MANIFEST_NAME}" if not shards
                else f"holds no records in its {len(shards)} shard(s)")
        others = [f"{name!r} ({info.num_records:,} records)"
                  for name, info in manifest.splits.items() if info.num_records]
        raise DatasetError(f"{path}: split {split!r} {what}: nothing to read; "
                           + (f"choose another split: {', '.join(others)}" if others
                              else "the dataset holds no records"))
    return (manifest, [str(path / shard.file) for shard in shards], path, manifest.compression,
            split)


def _features_from_manifest(manifest: Manifest) -> list[ParsedFeature]:
    parsed = []
    for spec in manifest.features:
        if spec.encoding is Encoding.RAW:
            parsed.append(ParsedFeature(spec.name, FeatureKind.BYTES, [], spec.dtype, spec.shape))
        elif spec.encoding.is_image:
            parsed.append(ParsedFeature(spec.name, FeatureKind.BYTES, []))
        else:
            shape = spec.shape if spec.shape is not None else None
            narrower = spec.dtype if spec.dtype in _NARROWER_THAN_LISTS else None
            parsed.append(ParsedFeature(spec.name, spec.kind, shape, value_dtype=narrower))
    return parsed


# dtypes that int64/float lists widen on the way in: the pipeline casts them back, so that
# a uint8 or float16 array comes out as it went in
_NARROWER_THAN_LISTS = {"int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "bool"}


def _features_from_sample(sampled: list[FeatureInfo], sample: SchemaSample,
                          keys=()) -> list[ParsedFeature]:
    """Parse specs for the sampled features: dense when one length in every sampled record.

    A feature whose records hold different list types (float in some, int64 in others) or no
    values at all has no spec ``tf.io.parse_example`` accepts for every record. It is left out
    with a warning naming it, as parse_example leaves out every feature not in its spec, so
    the rest of the data stays usable; as the image or label key it is an error.

    Raises:
        tfopt.InvalidArgumentError: The image or label key is such a feature.
    """
    parsed = []
    for info in sampled:
        if info.kind in ("bytes", "int64", "float"):
            # variable length, or missing in some records: ragged
            shape = ([] if info.max_length == 1 else [info.max_length]) if info.fixed_length else None
            parsed.append(ParsedFeature(info.name, FeatureKind(info.kind), shape))
            continue
        if info.kind == "mixed":
            why = (f"its records hold {' lists in some and '.join(info.kinds)} lists in others, "
                   "and tf.io.parse_example takes one type per feature")
        else:
            why = "it holds no values in any sampled record, so its type is unknown"
        seen = f"(seen in {sample.records:,} records of {sample.files} file(s))"
        if info.name in keys:
            raise InvalidArgumentError(f"feature {info.name!r} cannot be the image or label key: "
                                       f"{why} {seen}")
        logger.warning("feature %r is left out of the pipeline: %s %s; write it with one "
                       "type (tfopt convert does), or parse it yourself", info.name, why, seen)
    return parsed
