"""Shard planning: shuffle with the seed, split off validation, cut into shard tasks.

The validation split is stratified by class; with float labels (regression targets, no
classes) it is a plain seeded random split. Sources stored in blocks (Parquet row groups, HDF5
chunks) are shuffled by block and within each block, so that a shard draws on few blocks.
:func:`plan_fingerprint` hashes everything that decides the output, so that ``--resume``
refuses a different job.

Example:
    >>> tasks = plan_shards(scan_source(src, SourceKind.IMAGES, label=None, skip_bad=False),
    ...                     ConvertOptions(shards=4))
    >>> [task.file for task in tasks][:1]
    ['train-00000-of-00004.tfrecord']
"""

from __future__ import annotations

import hashlib
import json
import math
import os

import numpy as np

from tfopt.errors import InvalidArgumentError
from tfopt.records.convert.options import Compression, ConvertOptions, OnError
from tfopt.records.sources import ScannedSource, SourceKind
from tfopt.records.writer import ShardTask

# Parallel readers (interleave cycle_length) and multi-worker FILE sharding need several files:
# small datasets get up to MIN_SHARDS shards as long as each keeps at least MIN_SHARD_BYTES.
MIN_SHARDS = 16
MIN_SHARD_BYTES = 4 << 20
TRAIN, VALIDATION = "train", "validation"


def plan_shards(scanned: ScannedSource, options: ConvertOptions) -> list[ShardTask]:
    """Shuffle, split and cut the items into shard tasks; deterministic for a given seed."""
    count = len(scanned.items)
    rng = np.random.default_rng(options.seed)
    order = _shuffled(scanned, rng)
    in_validation = np.zeros(count, dtype=bool)
    if options.val_fraction > 0:
        # Systematic sampling over items sorted by class (stable, so shuffled within a class):
        # each class gives the same fraction, and the total is floor(count * fraction). Without
        # class labels (none, or float regression targets) it samples the shuffled order: a
        # plain seeded random split.
        by_class = order if scanned.labels is None else sorted(order, key=lambda i: scanned.labels[i])
        fraction = options.val_fraction
        for position, index in enumerate(by_class):
            if math.floor((position + 1) * fraction) > math.floor(position * fraction):
                in_validation[index] = True
        if not in_validation.any():
            raise InvalidArgumentError(
                f"val_fraction={fraction} of {count} records leaves no validation records; "
                f"use at least {1 / count:.3g}"
            )
    splits = {TRAIN: [i for i in order if not in_validation[i]],
              VALIDATION: [i for i in order if in_validation[i]]}
    if not splits[TRAIN]:
        raise InvalidArgumentError(f"val_fraction={options.val_fraction} leaves no training records")
    suffix = ".tfrecord.gz" if options.compression == Compression.GZIP.value else ".tfrecord"
    tasks = []
    for split, indices in splits.items():
        if not indices:
            continue
        shard_count = _shard_count(split, indices, splits, scanned.item_bytes, options)
        for shard_index, chunk in enumerate(np.array_split(np.asarray(indices), shard_count)):
            tasks.append(ShardTask(
                file=f"{split}-{shard_index:05d}-of-{shard_count:05d}{suffix}",
                split=split,
                items=[scanned.items[i] for i in chunk],
                source_kind=scanned.kind,
                reader_config=scanned.reader_config,
                features=scanned.features,
                compression=None if options.compression == "none" else options.compression,
                skip_bad=options.on_error == OnError.SKIP.value,
            ))
    return tasks


def _shuffled(scanned: ScannedSource, rng: np.random.Generator) -> np.ndarray:
    """Item positions in shuffled order.

    Where reading one row means reading its block (``scanned.blocks``), the blocks come in a
    random order and the rows of each block in a random order after one another: a shard then
    holds the rows of a few neighbouring blocks in this order, so each block is read by one
    or two shards instead of by every shard, and a shard's reader holds one block's rows at
    a time. The pipeline's interleave of shards and shuffle buffer mix across blocks.
    """
    count = len(scanned.items)
    if scanned.blocks is None:
        return rng.permutation(count)
    block_of = np.searchsorted(scanned.blocks, scanned.items, side="right") - 1
    block_rank = np.empty(len(scanned.blocks), dtype=np.int64)
    block_rank[rng.permutation(len(scanned.blocks))] = np.arange(len(scanned.blocks))
    return np.lexsort((rng.random(count), block_rank[block_of]))


def _shard_count(split, indices, splits, item_bytes, options) -> int:
    if options.shards is not None:
        wanted = options.shards if split == TRAIN else max(
            1, round(options.shards * len(indices) / len(splits[TRAIN])))
        return min(wanted, len(indices))
    estimated = sum(item_bytes[i] for i in indices)
    by_size = math.ceil(estimated / options.shard_size)
    enough_files = min(MIN_SHARDS, estimated // MIN_SHARD_BYTES)
    return max(1, min(len(indices), max(by_size, enough_files)))


# The files whose size and modification time the fingerprint holds, by source kind. Image
# folders: none here; the scan's content_stamp covers each image's size and modification time.
_STAMPED_FILES = {
    SourceKind.IMAGES: lambda config: [],
    SourceKind.NUMPY: lambda config: sorted({ref["file"] for ref in config["refs"]}),
    SourceKind.CSV: lambda config: [config["path"]],
    SourceKind.PARQUET: lambda config: config["files"],
    SourceKind.HDF5: lambda config: [config["path"]],
}


def plan_fingerprint(scanned: ScannedSource, options: ConvertOptions, tasks) -> str:
    """A hash of everything that decides the output, to refuse resuming a different job.

    Besides the options and the plan: the schema and reader settings (an array added to a folder
    of .npy files keeps every row index), every item's size, every image's modification time
    (an image replaced under its name, even by one of the same size), and the size and
    modification time of array and CSV files (a value edited in place changes nothing else
    that the scan sees).
    """
    stamps = []
    for file in _STAMPED_FILES[scanned.kind](scanned.reader_config):
        status = os.stat(file)
        stamps.append((file, status.st_size, status.st_mtime_ns))
    digest = hashlib.sha256()
    digest.update(json.dumps({"source": scanned.path, "kind": scanned.kind.value,
                              "options": options.plan_fields(),
                              "features": [spec.to_json() for spec in scanned.features],
                              "class_names": scanned.class_names,
                              "reader_config": scanned.reader_config,
                              "item_bytes": scanned.item_bytes, "files": stamps,
                              "content_stamp": scanned.content_stamp},
                             sort_keys=True).encode())
    for task in tasks:
        digest.update(json.dumps([task.file, task.items]).encode())
    return digest.hexdigest()
