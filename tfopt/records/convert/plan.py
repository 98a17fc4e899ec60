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
import logging
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

logger = logging.getLogger("tfopt")


def plan_shards(scanned: ScannedSource, options: ConvertOptions) -> list[ShardTask]:
    """Shuffle, split and cut the items into shard tasks; deterministic for a given seed."""
    count = len(scanned.items)
    rng = np.random.default_rng(options.seed)
    order = _shuffled(scanned, rng)
    in_validation = np.zeros(count, dtype=bool)
    if options.val_fraction > 0 and count < 2:
        raise InvalidArgumentError(
            f"val_fraction={options.val_fraction}: the source holds {count} record"
            f"{'' if count == 1 else 's'}, and a validation split needs at least 2 (one for "
            "training, one for validation); convert without val_fraction")
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
                f"val_fraction={fraction} of {count} records leaves no validation records "
                f"({count} x {fraction} < 1); use at least {1 / count:.3g}"
            )
    splits = {TRAIN: [i for i in order if not in_validation[i]],
              VALIDATION: [i for i in order if in_validation[i]]}
    if not splits[TRAIN]:
        raise InvalidArgumentError(
            f"val_fraction={options.val_fraction} of {count} records leaves no training "
            f"records; use at most {(count - 1) / count:.3g}")
    if options.val_fraction > 0 and scanned.labels is not None:
        _warn_unsplit_classes(scanned, in_validation, options.val_fraction)
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


# Classes named in the warning about classes left out of a split; the count covers the rest.
_CLASSES_SHOWN = 5


def _warn_unsplit_classes(scanned: ScannedSource, in_validation, fraction: float) -> None:
    """Warn about classes that the stratified split left wholly on one side: too small for the
    fraction (a class of one record cannot be on both), so that the model never trains on them
    or validation never measures them."""
    classes, of_item, sizes = np.unique(np.asarray(scanned.labels), return_inverse=True,
                                        return_counts=True)
    in_validation_count = np.bincount(of_item, weights=in_validation, minlength=len(classes))
    one_side = (in_validation_count == 0) | (in_validation_count == sizes)
    if not one_side.any():
        return
    only_train = classes[in_validation_count == 0].tolist()
    only_validation = classes[in_validation_count == sizes].tolist()

    def named(group: list[int]) -> str:
        names = [_class_name(scanned, label) for label in group[:_CLASSES_SHOWN]]
        more = f" and {len(group) - _CLASSES_SHOWN} more" if len(group) > _CLASSES_SHOWN else ""
        return ", ".join(names) + more

    sides = []
    if only_validation:
        sides.append(f"{len(only_validation)} only in validation, so never trained on "
                     f"({named(only_validation)})")
    if only_train:
        sides.append(f"{len(only_train)} only in training, so validation does not measure "
                     f"them ({named(only_train)})")
    smallest = int(sizes[one_side].min())
    logger.warning(
        "val_fraction=%s leaves %d of the %d classes in one split only: %s. Those classes hold "
        "too few records for this fraction (the smallest: %d); add records to them, or choose "
        "another val_fraction", fraction, len(only_train) + len(only_validation), len(classes),
        "; ".join(sides), smallest)


def _class_name(scanned: ScannedSource, label: int) -> str:
    names = scanned.class_names
    return repr(names[label]) if names is not None and 0 <= label < len(names) else f"label {label}"


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
