"""Every shard's record headers checked before TensorFlow reads it.

TensorFlow's reader of a plain TFRecord file allocates each record's length before it reads the
record: a header with a valid CRC and a huge length (2**36 in a 1 KB file) kills the process
with a segmentation fault, ``skip_corrupt`` or not. So before a pipeline is built, every plain
shard's headers are walked (12 bytes read per record, little beside reading the records
themselves) and each length is checked against the file's size.
A GZIP shard is not walked: TensorFlow inflates a record's data piece by piece, so an
over-long length ends in its "truncated record" error, which the pipeline reports.

The walk also counts each shard's records, so a shard that holds more or fewer records than
its manifest says is named before the first batch instead of at the end of its read, and
shards another tool wrote (no manifest) get exact counts: an epoch's length, steps and cache
size known, not estimated from the file sizes.

Example:
    >>> walked = read_limits(source, skip_corrupt=False)
    >>> walked.limits, walked.counts
    ([-1, -1, -1], [1000, 1000, 998])
"""

from __future__ import annotations

import dataclasses
import logging

from tfopt.errors import DatasetError
from tfopt.records.format.framing import RecordError, count_framed_records

logger = logging.getLogger("tfopt")

READ_ALL = -1  # as ``tf.data.Dataset.take`` reads every element


@dataclasses.dataclass(frozen=True)
class ShardWalk:
    """What the header walk found: records to read from each shard (:data:`READ_ALL`, or
    with ``skip_corrupt`` the whole records before a damaged header), and each shard's
    record count where every shard was walked whole (None: GZIP shards, or a damaged
    header skipped)."""

    limits: list[int]
    counts: list[int] | None


def read_limits(source, *, skip_corrupt: bool) -> ShardWalk:
    """Walk the headers of each of ``source.files``: the records to read from each, and
    their counts (:class:`ShardWalk`). A damaged header under ``skip_corrupt`` limits its
    shard to the whole records before it (the rest is skipped, with a warning).

    Args:
        source: A :class:`tfopt.data.source.PipelineSource`.
        skip_corrupt: Skip a shard's records from a damaged header on, instead of refusing.

    Raises:
        tfopt.errors.DatasetError: A shard that cannot be read, a damaged header or a length beyond
            the end of its file (without ``skip_corrupt``), or a shard that holds another
            number of records than its manifest says (more: always; fewer: without
            ``skip_corrupt``), each naming the shard (and the record index).
    """
    if source.compression is not None:
        return ShardWalk([READ_ALL] * len(source.files), None)
    walked = [_limit(file, (source.expected_counts or {}).get(file), skip_corrupt)
              for file in source.files]
    limits = [limit for limit, _ in walked]
    counts = [count for _, count in walked]
    return ShardWalk(limits, None if None in counts else counts)


_FIX = "run 'tfopt verify' on the dataset, or build the pipeline with skip_corrupt=True"


def _limit(file: str, expected: int | None, skip_corrupt: bool) -> tuple[int, int | None]:
    """The shard's read limit and its record count (None past a damaged header)."""
    try:
        count = count_framed_records(file)
    except OSError as error:
        raise DatasetError(f"{file}: cannot be read ({error.strerror or error}); make it "
                           "readable, or leave it out of the dataset") from None
    except RecordError as error:
        if not skip_corrupt:
            raise DatasetError(f"shard {file}: record {error.index} at offset {error.offset}: "
                               f"{error.reason}; {_FIX}") from None
        said = f" of the {expected:,} its manifest lists" if expected is not None else ""
        logger.warning("shard %s: record %d: %s; skipping the shard from there (%s%s "
                       "read)", file, error.index, error.reason, f"{error.index:,} records",
                       said)
        return error.index, None
    if expected is None or count == expected:
        return READ_ALL, count
    if count > expected:
        # no corruption adds whole records: the file is not the shard the manifest lists
        raise DatasetError(f"shard {file}: holds {count:,} records, its manifest says "
                           f"{expected:,}: not the shard the manifest describes; run 'tfopt "
                           "verify' on the dataset, and convert it again")
    if not skip_corrupt:
        raise DatasetError(f"shard {file}: holds {count:,} records, its manifest says "
                           f"{expected:,}: the shard was cut short; {_FIX}")
    logger.warning("shard %s: holds %s records, its manifest says %s: the shard was cut "
                   "short; the rest are counted as lost", file, f"{count:,}", f"{expected:,}")
    return READ_ALL, count
