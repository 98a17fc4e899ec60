"""Writing one shard: read its items, encode ``tf.train.Example`` records, write them durably.

``write_shard`` runs in a worker process (or in the main process with one worker). It writes to
a temporary name, fsyncs, hashes, and renames, so a shard file under its final name is always
complete; a killed worker leaves only a temporary file that the next run removes.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import struct
from pathlib import Path

import numpy as np

from tfopt._files import atomic_path, sha256_file
from tfopt.records.format.example_pb import example_classes
from tfopt.records.format.framing import RecordWriter
from tfopt.records.manifest import SkippedItem
from tfopt.records.schema import IMAGE_FORMAT_KEY, Encoding, FeatureKind, FeatureSpec
from tfopt.records.sources import BadItem, SourceKind, open_reader

PROGRESS_EVERY = 32  # items between progress reports from a worker: ~20 messages/s at most


class Cancelled(Exception):
    """The conversion was stopped (a failed sibling shard, or the parent process died)."""


@dataclasses.dataclass(frozen=True)
class ShardTask:
    """Everything a worker needs to write one shard; picklable."""

    file: str
    split: str
    items: list
    source_kind: SourceKind
    reader_config: dict
    features: list[FeatureSpec]
    compression: str | None
    skip_bad: bool


@dataclasses.dataclass(frozen=True)
class ShardResult:
    """A finished shard, as recorded in the journal and then the manifest."""

    file: str
    split: str
    num_records: int
    num_bytes: int
    sha256: str
    skipped: list[SkippedItem]
    formats: dict[str, int]  # image format -> count, for image sources

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["skipped"] = [dataclasses.asdict(item) for item in self.skipped]
        return data

    @classmethod
    def from_json(cls, data: dict) -> ShardResult:
        return cls(**{**data, "skipped": [SkippedItem(**item) for item in data["skipped"]]})


def _feature_setter(spec: FeatureSpec):
    """A function that stores one value of ``spec`` into a ``tf.train.Feature``."""
    if spec.encoding is Encoding.RAW:
        little_endian = np.dtype(spec.dtype).newbyteorder("<")
        if spec.shape == [] and little_endian == np.dtype("<f8"):
            # a float64 scalar (a CSV float64 column): struct packs it without NumPy's
            # per-call array overhead
            pack = struct.Struct("<d").pack
            return lambda feature, value: feature.bytes_list.value.append(pack(value))

        def set_raw(feature, value):
            array = np.ascontiguousarray(value, dtype=little_endian)
            feature.bytes_list.value.append(array.tobytes())

        return set_raw
    if spec.kind is FeatureKind.BYTES:

        def set_bytes(feature, value):
            if isinstance(value, bytes):
                feature.bytes_list.value.append(value)
            else:  # a NumPy string array or scalar
                array = np.asarray(value).ravel()
                feature.bytes_list.value.extend(
                    item.encode("utf-8") if isinstance(item, str) else bytes(item)
                    for item in array.tolist()
                )

        return set_bytes
    if spec.kind is FeatureKind.INT64:
        return lambda feature, value: feature.int64_list.value.extend(
            np.asarray(value, dtype=np.int64).ravel().tolist()
        )
    return lambda feature, value: feature.float_list.value.extend(
        np.asarray(value, dtype=np.float32).ravel().tolist()
    )


def example_encoder(features: list[FeatureSpec]):
    """A function ``{name: value} -> serialized tf.train.Example`` for this schema.

    The message classes are tfopt's own (:mod:`tfopt.records.format.example_pb`), built from
    TensorFlow's public schema: the bytes are those of ``tf.train.Example`` without TensorFlow.
    """
    example_class = example_classes().Example
    setters = [(spec.name, _feature_setter(spec)) for spec in features]

    def encode(values: dict) -> bytes:
        example = example_class()
        feature_map = example.features.feature
        for name, setter in setters:
            setter(feature_map[name], values[name])
        # deterministic: map keys sorted; otherwise the order follows a per-process hash seed and
        # the same records get different bytes (and checksums) in different worker processes
        return example.SerializeToString(deterministic=True)

    return encode


def write_shard(task: ShardTask, folder: Path, report=None, should_stop=None) -> ShardResult:
    """Write one shard into ``folder`` and return its record count, size and SHA-256.

    Args:
        task: The shard to write.
        folder: The dataset folder.
        report: Called with a count of items done, now and then. Defaults to none.
        should_stop: Called between items; when it returns True the shard is abandoned
            (its temporary file removed) with :class:`Cancelled`. Defaults to never.

    Raises:
        tfopt.errors.SourceError: A bad item, unless ``task.skip_bad``.
        Cancelled: ``should_stop`` asked to stop.
    """
    read = open_reader(task.source_kind, task.reader_config, task.items)
    encode = example_encoder(task.features)
    final = Path(folder) / task.file
    skipped: list[SkippedItem] = []
    formats: collections.Counter = collections.Counter()
    written = 0
    pending_report = 0
    with atomic_path(final) as tmp:
        with RecordWriter(tmp, task.compression) as writer:
            for item in task.items:
                if should_stop is not None and should_stop():
                    raise Cancelled(task.file)
                try:
                    values = read(item)
                except BadItem as bad:
                    if not task.skip_bad:
                        raise bad.as_source_error() from None
                    skipped.append(SkippedItem(bad.where, bad.reason))
                else:
                    writer.write(encode(values))
                    written += 1
                    # an image folder's records carry their format; a table's column may
                    # have that name and hold anything
                    if task.source_kind is SourceKind.IMAGES:
                        formats[values[IMAGE_FORMAT_KEY].decode()] += 1
                pending_report += 1
                if report is not None and pending_report >= PROGRESS_EVERY:
                    report(pending_report)
                    pending_report = 0
        digest = sha256_file(tmp)
        size = os.path.getsize(tmp)
    if report is not None and pending_report:
        report(pending_report)
    return ShardResult(task.file, task.split, written, size, digest, skipped, dict(formats))
