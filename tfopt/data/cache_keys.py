"""Where a pipeline's file cache lives: a path keyed to what the cache holds.

tf.data reuses a finished cache file whatever wrote it, so a second pipeline on the same path
would silently serve the first one's data (another split, another image size) or fail on its
shapes. :func:`cache_location` appends a key of the shards (names, sizes, modification times),
this worker's share of them, the stage cached and everything that shapes its elements, so
another dataset or setting writes a file of its own; :func:`other_cache_files` notes the
others found at the same path (never deleted: another pipeline may use them).

Example:
    >>> cache_location("/tmp/cache", source, plan, batch_size=64, pad_ragged=False)
    '/tmp/cache-3f2a9c81d0e4'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

import tensorflow as tf

from tfopt.data.plan import PipelinePlan
from tfopt.data.source import PipelineSource

MEMORY = "memory"  # the location of an in-memory cache
KEY_CHARS = 12  # hex digits of the SHA-256 key in the file name


def cache_location(path, source: PipelineSource, plan: PipelinePlan, *,
                   batch_size: int, pad_ragged: bool) -> str:
    """``"memory"`` unless the plan caches to a file; then ``path`` plus the key of its data.

    Args:
        path: The ``cache`` argument: a file path (str or path object).
        source: The resolved source (its files are stat'ed for the key).
        plan: The pipeline's plan (stage cached, decoding, this worker's share).
        batch_size: Examples per batch (non-image data is cached in batches).
        pad_ragged: Whether variable-length features are padded.
    """
    if not plan.cache_to_file:
        return MEMORY
    what = {
        "files": [file_stamp(file) for file in source.files],
        "share": plan.file_share, "stage": plan.cache.value,
        "decode": dataclasses.asdict(plan.decode) if plan.decode is not None else None,
        "keys": [source.image_key, source.label_key],
        "features": [dataclasses.asdict(feature) for feature in source.features],
        "batch": batch_size, "pad_ragged": pad_ragged,
        "skip_corrupt": plan.skip_corrupt, "compression": source.compression,
    }
    key = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    return f"{os.fspath(path)}-{key[:KEY_CHARS]}"


def file_stamp(file: str) -> list:
    """Name, size and modification time of a shard (what tells a rewritten shard apart)."""
    try:
        stat = tf.io.gfile.stat(file)
        return [file, stat.length, stat.mtime_nsec]
    except tf.errors.OpError:
        return [file, None, None]


def other_cache_files(location: str) -> list[str]:
    """A note on cache files at the same path under other keys (other data or settings, or
    shards since rewritten): tfopt never deletes them, since another pipeline may use them."""
    prefix, _, key = location.rpartition("-")
    others = {}
    for name in tf.io.gfile.glob(f"{prefix}-*"):
        other_key = name[len(prefix) + 1:].split(".", 1)[0].split("_", 1)[0]
        if other_key != key and len(other_key) == len(key):
            size = tf.io.gfile.stat(name).length if not tf.io.gfile.isdir(name) else 0
            others[other_key] = others.get(other_key, 0) + size
    if not others:
        return []
    return [f"{len(others)} other cache file set(s) at {prefix}-* ({sum(others.values()) >> 20} "
            "MiB) hold other data or settings; remove them when no pipeline uses them"]
