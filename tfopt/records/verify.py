"""``verify``: re-read a dataset and prove it is whole.

With a manifest, every shard's size, SHA-256 and record count are compared with it, every record
is read (TFRecord CRCs checked), and files the manifest does not list are reported. Without one
(bare shards from anywhere), record CRCs and counts are checked, and the report says that this is
all that could be checked. Where the manifest names an image feature, each record's image is
judged by its header as ``convert`` judges it today (:mod:`tfopt.records.image_limits`): one
that TensorFlow refuses to decode, or over the pixel limit the dataset was converted with, in a
dataset written before those checks existed. Each problem names the shard and, for a bad
record, its index.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
from pathlib import Path

from tfopt._files import is_temp_file, sha256_file
from tfopt._progress import Progress
from tfopt._system import usable_cores
from tfopt._validate import optional_whole_number
from tfopt.records.format.framing import RecordError, read_records
from tfopt.records.format.tfrecord import is_gzip, resolve_files
from tfopt.records.image_limits import record_image_check, recorded_max_pixels
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
    IMAGE = "image"  # a record's image that TensorFlow refuses, or over the pixel limit


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
        workers: Files checked at once (threads: hashing, reading and decompressing release
            the GIL). Defaults to the number of usable cores.
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
    # each record's image, judged by its header: what convert refuses today, in a dataset
    # written before it did (a JPEG too large to decode, 12-bit, lossless...)
    image_check = (record_image_check(manifest.image_key, recorded_max_pixels(manifest.options))
                   if manifest is not None and manifest.image_key else None)
    workers = workers or usable_cores()
    checked = []
    with Progress(len(jobs), "verify", unit="file",
                  enabled=progress) as bar, \
            concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        futures = [pool.submit(_check_file, *job, image_check) for job in jobs]
        for future in futures:  # in order, so reports are stable
            check, file_problems = future.result()
            checked.append(check)
            problems.extend(file_problems)
            bar.update()
    return VerifyResult(str(path), manifest is not None, checked, problems, notes)


def _check_file(file: Path, expected: ShardInfo | None, compression: str | None,
                image_check=None):
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

    def check_image(index: int, record: bytes) -> None:
        problem = image_check(record)
        if problem:
            problems.append(Problem(str(file), ProblemKind.IMAGE, problem, record=index))

    count, error = _read_all(file, compression, check_image if image_check else None)
    if error is not None:
        problems.append(Problem(str(file), ProblemKind.CORRUPT, error, record=count))
    elif expected is not None and count != expected.num_records:
        problems.append(Problem(str(file), ProblemKind.COUNT,
                                f"{count} records, the manifest says {expected.num_records}"))
    return ShardCheck(str(file), size, count), problems


def _read_all(file: Path, compression: str | None, on_record=None) -> tuple[int, str | None]:
    """Read every record, both CRCs of each checked; return the count of whole records and, at
    the first bad one, the reason.

    A stream cut inside a header, a few bytes of anything after the records, a length beyond
    the end of the file, a GZIP stream cut short or with a wrong trailer (CRC-32, length): each
    is a bad record at the index where it starts (:func:`tfopt.records.format.framing
    .read_records`).
    """
    count = 0
    try:
        for record in read_records(file, compression):
            if on_record is not None:
                on_record(count, record)
            count += 1
    except RecordError as error:
        return error.index, f"{error.reason}{_LOST if error.kind not in ('gzip', 'trailing') else ''}"
    except OSError as error:
        return count, f"unreadable ({error.strerror or error}); records after it are lost"
    return count, None


_LOST = "; records after it are lost"
