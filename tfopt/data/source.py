"""What a pipeline reads: files, how to parse each feature, image and label keys, sizes.

From a tfopt dataset folder everything comes from the manifest (schema, exact counts per
shard, class names); from shard lists and globs the schema is inferred from the first records
as ``tfopt inspect`` does. A small sample of images is always read for their sizes, which
decide the decoding strategy and the cache estimate.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tfopt.errors import DatasetError, InvalidArgumentError
from tfopt.records._files_of import resolve_files, tf_compression_type
from tfopt.records.inspect import (
    FeatureInfo,
    detect_compression,
    infer_schema,
    pick_image_key,
    pick_label_key,
)
from tfopt.records.manifest import Manifest, read_manifest
from tfopt.records.schema import Encoding, FeatureKind

SAMPLE_RECORDS = 64  # records read for schema inference and image sizes


@dataclasses.dataclass(frozen=True)
class ParsedFeature:
    """How one feature is parsed from a batch of serialized examples.

    Attributes:
        name: The feature key.
        kind: The stored list type (bytes, int64 or float).
        shape: Per-example shape in the record; None for variable length (ragged).
        raw_dtype: For raw-bytes arrays, the NumPy dtype to decode into, else None.
        raw_shape: For raw-bytes arrays, the per-example array shape.
    """

    name: str
    kind: FeatureKind
    shape: list[int] | None
    raw_dtype: str | None = None
    raw_shape: list[int] | None = None


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
        num_records: Records in ``files`` (exact from a manifest, else None).
        num_bytes: Bytes in ``files``.
        expected_counts: File -> record count, from a manifest (None without one).
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

    @property
    def mean_record_bytes(self) -> float:
        if self.num_records:
            return self.num_bytes / self.num_records
        return self.sampled_record_bytes or 4096.0


def resolve_source(source, *, split: str | None = None, image_key: str | None = None,
                   label_key: str | None = None, training: bool = False) -> PipelineSource:
    """Resolve a dataset folder, a list of shard files or a glob into a :class:`PipelineSource`.

    Args:
        source: A tfopt dataset folder (manifest), a list of TFRecord files, or a glob.
        split: The manifest split to read. Defaults to "train" when training, else
            "validation" if the dataset has one, else "train".
        image_key: The encoded-image feature. Defaults to the manifest's or the inferred one.
        label_key: The label feature. Defaults to the manifest's or the inferred one.
        training: Whether the pipeline is for training (only picks the default split).

    Raises:
        tfopt.DatasetError: No files, an incomplete dataset, or an unknown split.
        tfopt.InvalidArgumentError: ``image_key`` or ``label_key`` is not a feature.
    """
    manifest, files = _files_of(source, split, training)
    compression = detect_compression([Path(f) for f in files], manifest)
    # a corrupted record is the pipeline's to report (naming its shard), not the sampler's
    sampled, _ = infer_schema([Path(f) for f in files], compression, SAMPLE_RECORDS,
                              stop_at_corruption=True)
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
        counts = {str(Path(source) / s.file): s.num_records for s in manifest.shards
                  if str(Path(source) / s.file) in set(files)}
        num_records = sum(counts.values())
        class_names = manifest.class_names
    else:
        features = _features_from_sample(sampled)
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
        # only needed without a manifest, whose counts give the mean exactly
        sampled_record_bytes=None if manifest else _mean_record_bytes(files[0], compression),
    )


def _mean_record_bytes(file: str, compression: str | None) -> float | None:
    """Mean serialized size of the first records: sizes buffers when there is no manifest."""
    import tensorflow as tf

    reader = tf.data.TFRecordDataset(file, tf_compression_type(compression))
    try:
        sizes = [len(record) for record in reader.take(SAMPLE_RECORDS).as_numpy_iterator()]
    except tf.errors.OpError:
        return None
    return sum(sizes) / len(sizes) if sizes else None


def _files_of(source, split, training) -> tuple[Manifest | None, list[str]]:
    if isinstance(source, (list, tuple)):
        files = [str(f) for f in source]
        missing = [f for f in files if not Path(f).is_file()]
        if not files or missing:
            raise DatasetError(f"shard files not found: {missing[:3] or 'empty list'}")
        return None, files
    path = Path(str(source))
    if not path.is_dir():  # a glob or one file: as inspect and verify read them
        files, _, _ = resolve_files(source)
        return None, [str(file) for file in files]
    manifest = read_manifest(path)  # a folder must be a complete tfopt dataset
    if split is None:
        split = "train" if training or "validation" not in manifest.splits else "validation"
    if split not in manifest.splits:
        raise DatasetError(f"{path}: no split {split!r}; it has: {', '.join(manifest.splits)}")
    return manifest, [str(path / shard.file) for shard in manifest.splits[split].shards]


def _features_from_manifest(manifest: Manifest) -> list[ParsedFeature]:
    parsed = []
    for spec in manifest.features:
        if spec.encoding is Encoding.RAW:
            parsed.append(ParsedFeature(spec.name, FeatureKind.BYTES, [], spec.dtype, spec.shape))
        elif spec.encoding.is_image:
            parsed.append(ParsedFeature(spec.name, FeatureKind.BYTES, []))
        else:
            shape = spec.shape if spec.shape is not None else None
            parsed.append(ParsedFeature(spec.name, spec.kind, shape))
    return parsed


def _features_from_sample(sampled: list[FeatureInfo]) -> list[ParsedFeature]:
    parsed = []
    for info in sampled:
        if info.kind not in ("bytes", "int64", "float"):
            continue  # empty or mixed-type features cannot be parsed with one spec
        kind = FeatureKind(info.kind)
        present_everywhere = info.present_in == max(i.present_in for i in sampled)
        if info.fixed_length and present_everywhere:
            shape = [] if info.max_length == 1 else [info.max_length]
        else:
            shape = None  # variable length, or missing in some records: ragged
        parsed.append(ParsedFeature(info.name, kind, shape))
    return parsed
