"""``verify``: re-read a dataset and prove it is whole.

With a manifest, every shard's size, SHA-256 and record count are compared with it, every record
is read (TFRecord CRCs checked), and files the manifest does not list are reported. Without one
(bare shards from anywhere), record CRCs and counts are checked, and the report says that this is
all that could be checked. Each problem names the shard and, for a bad record, its index.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import gzip
import zlib
from pathlib import Path

from tfopt._files import is_temp_file, sha256_file
from tfopt._progress import Progress
from tfopt._system import usable_cores
from tfopt._tf_messages import short_tf_message
from tfopt._validate import optional_whole_number
from tfopt.records.format.tfrecord import is_gzip, resolve_files, tf_compression_type
from tfopt.records.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    OLD_SUFFIX,
    STAGING_SUFFIX,
    ShardInfo,
)


class ProblemKind(str, enum.Enum):
    MISSING = "missing"  # a shard in the manifest is not on disk
    SIZE = "size"  # byte size differs from the manifest
    CHECKSUM = "checksum"  # SHA-256 differs from the manifest
    COUNT = "count"  # record count differs from the manifest
    CORRUPT = "corrupt"  # a record fails its CRC or is cut short
    EXTRA = "extra"  # a file in the folder that the manifest does not list
    DUPLICATE = "duplicate"  # a shard the manifest lists twice: readers would read it twice
    INCOMPLETE = "incomplete"  # an interrupted conversion: journal, no manifest


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset."""

    file: str
    kind: ProblemKind
    detail: str
    record: int | None = None

    def __str__(self) -> str:
        where = self.file if self.record is None else f"{self.file} record {self.record}"
        return f"{where}: {self.kind.value}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class ShardCheck:
    """What was read from one file."""

    file: str
    num_bytes: int
    num_records: int  # records read before the end or the first bad record


@dataclasses.dataclass(frozen=True)
class VerifyResult:
    """What ``verify`` found.

    Attributes:
        path: What was verified.
        has_manifest: Whether checksums, sizes and counts could be compared with a manifest.
        checked: Each file read.
        problems: Everything wrong; empty when the dataset is whole.
        notes: What could not be checked, and why.
    """

    path: str
    has_manifest: bool
    checked: list[ShardCheck]
    problems: list[Problem]
    notes: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def num_records(self) -> int:
        return sum(check.num_records for check in self.checked)

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "ok": self.ok,
            "has_manifest": self.has_manifest,
            "files_checked": len(self.checked),
            "records_checked": self.num_records,
            "problems": [{**dataclasses.asdict(p), "kind": p.kind.value} for p in self.problems],
            "notes": self.notes,
        }

    def describe(self) -> str:
        what = ("sizes, SHA-256, record counts and record CRCs" if self.has_manifest
                else "record CRCs and counts")
        lines = [f"{self.path}: checked {what} of {len(self.checked)} file(s), "
                 f"{self.num_records:,} records"]
        lines.extend(f"PROBLEM {problem}" for problem in self.problems)
        lines.extend(f"note: {note}" for note in self.notes)
        lines.append("OK: every check passed" if self.ok
                     else f"FAILED: {len(self.problems)} problem(s)")
        return "\n".join(lines)


def verify(path, *, workers: int | None = None, progress: bool | None = False) -> VerifyResult:
    """Check a dataset against its manifest, or bare TFRecord files on their own.

    Args:
        path: A dataset folder, one TFRecord file, or a glob.
        workers: Files checked at once (threads: hashing and TensorFlow's reader release the
            GIL). Defaults to the number of usable cores.
        progress: Progress bar on stderr (None: when stderr is a terminal). Defaults to False.

    Returns:
        A :class:`VerifyResult`; ``ok`` is True only when every check passed.

    Raises:
        tfopt.DatasetError: Nothing to verify at ``path``.
        tfopt.InvalidArgumentError: ``workers`` is not an int >= 1 or None.

    Example:
        >>> result = verify("shards/")
        >>> result.ok, [str(p) for p in result.problems]
        (True, [])
    """
    workers = optional_whole_number(workers, "workers", 1,
                                    "an int >= 1, or None for all usable cores")
    files, manifest, notes = resolve_files(path)
    problems: list[Problem] = []
    folder = Path(path)
    if folder.name == MANIFEST_NAME and folder.is_file():
        folder = folder.parent  # 'tfopt verify shards/manifest.json' checks the dataset beside it
    if manifest is None and folder.is_dir() and (folder / JOURNAL_NAME).exists():
        problems.append(Problem(str(folder), ProblemKind.INCOMPLETE,
                                f"no {MANIFEST_NAME}: the conversion was interrupted; finish it "
                                "with 'tfopt convert ... --resume'"))
    if manifest is None:
        notes.append("no manifest: checked record CRCs and counts only (no checksums, sizes or "
                     "expected counts to compare with)")
        jobs = [(file, None, "gzip" if is_gzip(file) else None) for file in files]
    else:
        jobs = []
        listed_before = set()
        for shard in manifest.shards:
            file = folder / shard.file
            if shard.file in listed_before:
                problems.append(Problem(str(file), ProblemKind.DUPLICATE, "listed twice in the "
                                        "manifest: every epoch would read its records twice"))
            elif file.is_file():  # not exists(): a folder under a shard's name is missing too
                jobs.append((file, shard, manifest.compression))
            else:
                problems.append(Problem(str(file), ProblemKind.MISSING, "listed in the manifest, "
                                        "not on disk" + (" (a folder is there)" if file.exists()
                                                         else "")))
            listed_before.add(shard.file)
        listed = {shard.file for shard in manifest.shards} | {MANIFEST_NAME}
        for entry in sorted(folder.iterdir()):
            if entry.name == JOURNAL_NAME:
                # the manifest is written first, then the journal removed: a kill (or power cut)
                # between the two leaves a complete dataset with a stale journal
                notes.append(f"{entry}: journal of a conversion stopped right after it wrote "
                             f"{MANIFEST_NAME}; the dataset is complete and the journal can go")
            elif entry.name in (STAGING_SUFFIX, OLD_SUFFIX) and entry.is_dir():
                # a mount point's dataset keeps convert --overwrite's swap folders inside it
                notes.append(f"{entry}: folder of a 'tfopt convert --overwrite' into this mount "
                             "point (its new shards, or the old ones it replaces); not part of "
                             "the dataset")
            elif entry.name not in listed:
                what = ("a leftover temporary file of an interrupted write" if is_temp_file(entry)
                        else "not listed in the manifest")
                problems.append(Problem(str(entry), ProblemKind.EXTRA, what))
    workers = workers or usable_cores()
    checked = []
    with Progress(len(jobs), "verify", unit="file",
                  enabled=progress) as bar, \
            concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        futures = [pool.submit(_check_file, *job) for job in jobs]
        for future in futures:  # in order, so reports are stable
            check, file_problems = future.result()
            checked.append(check)
            problems.extend(file_problems)
            bar.update()
    return VerifyResult(str(path), manifest is not None, checked, problems, notes)


def _check_file(file: Path, expected: ShardInfo | None, compression: str | None):
    problems = []
    size = file.stat().st_size
    if expected is not None:
        if size != expected.num_bytes:
            problems.append(Problem(str(file), ProblemKind.SIZE,
                                    f"{size} bytes, the manifest says {expected.num_bytes}"))
        digest = sha256_file(file)
        if digest != expected.sha256:
            problems.append(Problem(str(file), ProblemKind.CHECKSUM,
                                    f"SHA-256 {digest[:16]}..., the manifest says "
                                    f"{expected.sha256[:16]}..."))
    count, data_bytes, error = _read_all(file, compression)
    if error is None:
        error = _after_last_record(file, size, compression, count * _RECORD_FRAMING + data_bytes)
    if error is not None:
        problems.append(Problem(str(file), ProblemKind.CORRUPT, error, record=count))
    elif expected is not None and count != expected.num_records:
        problems.append(Problem(str(file), ProblemKind.COUNT,
                                f"{count} records, the manifest says {expected.num_records}"))
    return ShardCheck(str(file), size, count), problems


_RECORD_FRAMING = 16  # bytes around each record's data: length (8), its CRC (4), data CRC (4)
_READ_BYTES = 1 << 20  # decompressed bytes per read when a GZIP stream is walked: 1 MiB


def _after_last_record(file: Path, size: int, compression: str | None,
                       records_end: int) -> str | None:
    """Why a file that TensorFlow read without an error is not whole, or None when it is.

    TensorFlow's reader ends a (decompressed) stream without an error where fewer bytes than a
    record header (12) are left, so a stream cut inside a header, or a few bytes of anything
    after the records, reads as whole. ``records_end`` (the framing and data of the records
    read) must then be the stream's length. For GZIP, that length mod 2**32 is in the stream's
    last 4 bytes (ISIZE), which zlib checks when TensorFlow reads the stream to its end: one
    4-byte read. A stream that does not match (cut, several GZIP members, a missing trailer,
    which TensorFlow lets pass) is decompressed once more, streaming, to tell which.
    """
    if compression is None:
        length = size
    else:
        with open(file, "rb") as handle:
            handle.seek(max(0, size - 4))
            if int.from_bytes(handle.read(4), "little") == records_end % (1 << 32):
                return None
        length = 0
        try:
            with gzip.open(file, "rb") as stream:
                while chunk := stream.read(_READ_BYTES):
                    length += len(chunk)
        except (EOFError, OSError, zlib.error) as error:  # BadGzipFile is an OSError
            return (f"the GZIP stream is cut short or damaged ({type(error).__name__}: {error}) "
                    f"after {length} bytes; records after it are lost")
    trailing = length - records_end
    if trailing <= 0:
        return None
    return (f"{trailing} byte(s) after the last whole record"
            f"{' (decompressed)' if compression else ''}: a record cut short, or not a "
            "TFRecord file")


def _read_all(file: Path, compression: str | None) -> tuple[int, int, str | None]:
    """Read every record; return the count, the records' data bytes and, at the first bad
    record, the reason (the data bytes are then 0).

    A fast graph-mode count first; only a file that fails it is walked record by record to find
    the index of the bad one (TensorFlow's reader cannot go past a bad record).
    """
    import numpy as np
    import tensorflow as tf

    def dataset():
        return tf.data.TFRecordDataset(str(file), tf_compression_type(compression))

    def add(totals, record):
        return totals[0] + 1, totals[1] + tf.cast(tf.strings.length(record), tf.int64)

    try:
        count, data_bytes = dataset().reduce((np.int64(0), np.int64(0)), add)
        return int(count), int(data_bytes), None
    except tf.errors.OpError:
        pass
    index = data_bytes = 0
    try:
        for record in dataset():
            index += 1
            data_bytes += len(record.numpy())
    except tf.errors.OpError as error:
        reason = short_tf_message(error)
        return index, 0, (f"unreadable ({type(error).__name__}: {reason}); records after it "
                          "are lost")
    return index, data_bytes, None  # read whole at the second try: the file changed meanwhile
