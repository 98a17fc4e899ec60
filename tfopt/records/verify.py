"""``verify``: re-read a dataset and prove it is whole.

With a manifest, every shard's size, SHA-256 and record count are compared with it, every record
is read (TFRecord CRCs checked) and parsed as a ``tf.train.Example`` by the decoder ``inspect``
and the pipelines' schema sample use (:mod:`tfopt.records.format.example_wire`: malformed wire
data, groups and misplaced fields fail, which TensorFlow's parser refuses, and so do top-level
fields an Example does not have, which it skips), its label checked against the class names, files
the manifest does not list are reported, and so is every place where the manifest contradicts itself (split
totals, shards listed twice, keys, class names). Without one (bare shards from anywhere), record
CRCs, counts and the Examples are checked, and the report says that this is all that could be checked; a folder
that a killed ``convert --overwrite`` left half-replaced is a problem, not bare shards. Where the
manifest names an image feature, each record's image is judged by its header as ``convert``
judges it today (:mod:`tfopt.records.image_limits`): one that TensorFlow refuses to decode, or
over the pixel limit the dataset was converted with, in a dataset written before those checks
existed. Each problem names the shard and, for a bad record, its index. A file whose records
hold no features, :data:`~tfopt.records.format.schema_sample.FEATURELESS_RECORDS_CAP` of them
in a row (a GZIP bomb of empty records: 2e7 of them in 606 KB), is given up there, said so.
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
from tfopt.errors import DatasetError
from tfopt.records.format.example_wire import ExampleReader
from tfopt.records.format.framing import RecordError, read_records
from tfopt.records.format.layout import Layout, resolve_dataset
from tfopt.records.format.schema_sample import (
    FEATURELESS_RECORDS_CAP,
    pick_image_key,
    sample_schema,
)
from tfopt.records.image_limits import (
    DEFAULT_MAX_PIXELS,
    record_image_check,
    recorded_max_pixels,
)
from tfopt.records.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    OLD_SUFFIX,
    STAGING_SUFFIX,
    Manifest,
    ManifestIssue,
    ShardInfo,
    interrupted_swap,
)
from tfopt.records.schema import FeatureKind


class ProblemKind(str, enum.Enum):
    MISSING = "missing"  # a shard in the manifest is not on disk
    SIZE = "size"  # byte size differs from the manifest
    CHECKSUM = "checksum"  # SHA-256 differs from the manifest
    COUNT = "count"  # record count differs from the manifest
    CORRUPT = "corrupt"  # a record fails its CRC or is cut short
    EXTRA = "extra"  # a file in the folder that the manifest does not list
    DUPLICATE = "duplicate"  # a shard the manifest lists twice: readers would read it twice
    INCOMPLETE = "incomplete"  # an interrupted conversion (journal, no manifest) or swap
    UNREADABLE = "unreadable"  # a file that cannot be opened or read (permissions, I/O error)
    MANIFEST = "manifest"  # the manifest contradicts itself (totals, keys, class names)
    LABEL = "label"  # a record whose label is no index into the manifest's class names
    IMAGE = "image"  # a record's image that TensorFlow refuses, or over the pixel limit
    EXAMPLE = "example"  # a record TensorFlow's parser or tfopt's readers refuse, or no features


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
        layout: How the files were found (a manifest, split names, split folders...).
        compression: ``"gzip"`` or None, the dataset's.
        split_files: Split -> its files, as every reader resolves them; empty without splits.
    """

    path: str
    has_manifest: bool
    checked: list[ShardCheck]
    problems: list[Problem]
    notes: list[str]
    layout: Layout | None = None  # None: nothing resolved (a half-replaced folder)
    compression: str | None = None
    split_files: dict[str, list[str]] = dataclasses.field(default_factory=dict)

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
            "layout": self.layout.value if self.layout else None,
            "compression": self.compression,
            "split_files": self.split_files,
            "notes": self.notes,
        }

    def describe(self) -> str:
        what = ("sizes, SHA-256, record counts, record CRCs and Examples" if self.has_manifest
                else "record CRCs and counts, and Examples")
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
        tfopt.errors.DatasetError: Nothing to verify at ``path``.
        tfopt.errors.InvalidArgumentError: ``workers`` is not an int >= 1 or None.

    Example:
        >>> result = verify("shards/")
        >>> result.ok, [str(p) for p in result.problems]
        (True, [])
    """
    workers = optional_whole_number(workers, "workers", 1,
                                    "an int >= 1, or None for all usable cores")
    folder = Path(path)
    if folder.name == MANIFEST_NAME and folder.is_file():
        folder = folder.parent  # 'tfopt verify shards/manifest.json' checks the dataset beside it
    swap = interrupted_swap(folder) if folder.is_dir() else None
    if swap is not None:
        # its shards are part of one dataset or of the other: checked as bare shards they
        # would pass, so nothing is read until a convert has finished or undone the swap
        return VerifyResult(str(path), False, [], [Problem(str(folder), ProblemKind.INCOMPLETE,
                                                           swap)],
                            ["no shard read: the folder holds part of one dataset or of the "
                             "other until a convert finishes or undoes the swap"])
    # the files, splits and compression that inspect and the pipelines resolve; the
    # manifest's issues are problems here, not an error
    dataset = resolve_dataset(path, keep_manifest_issues=True)
    manifest, notes = dataset.manifest, list(dataset.notes)
    problems = _manifest_problems(folder, list(dataset.manifest_issues))
    files = list(dataset.files) if manifest is None else []  # bare shards: no manifest
    if manifest is None and folder.is_dir() and (folder / JOURNAL_NAME).exists():
        problems.append(Problem(str(folder), ProblemKind.INCOMPLETE,
                                f"no {MANIFEST_NAME}: the conversion was interrupted; finish it "
                                "with 'tfopt convert ... --resume'"))
    if manifest is None:
        jobs = [(file, None, dataset.compression, None) for file in files]
        # TFRecords written by another tool: their image feature, if the sample finds one, is
        # judged record by record as a tfopt dataset's is; a value that is not an image (a
        # damaged record whose CRC is intact) passed before, and stopped a pipeline's epoch
        image_key = _sampled_image_key(files, dataset.compression)
        checked_images = f", and each record's {image_key!r} by its image header" if image_key else ""
        notes.append(f"no manifest: checked record CRCs and counts{checked_images} (no "
                     "checksums, sizes or expected counts to compare with)")
        image_check = record_image_check(image_key, DEFAULT_MAX_PIXELS) if image_key else None
    else:
        jobs = _manifest_jobs(folder, manifest, problems, notes)
        # each record's image, judged by its header: what convert refuses today, in a dataset
        # written before it did (a JPEG too large to decode, 12-bit, lossless...)
        image_check = (record_image_check(manifest.image_key,
                                          recorded_max_pixels(manifest.options))
                       if manifest.image_key else None)
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
    return VerifyResult(str(path), manifest is not None, checked, problems, notes,
                        dataset.layout, dataset.compression,
                        {name: [str(file) for file in split]
                         for name, split in dataset.splits.items()})


def _sampled_image_key(files: list[Path], compression: str | None) -> str | None:
    """The image feature of bare TFRecord files, as a pipeline's sample infers it; None when
    there is none or the sample cannot be read (the file checks report why)."""
    if not files:
        return None
    try:
        sample = sample_schema(files, compression, stop_at_corruption=True)
    except DatasetError:
        return None
    return pick_image_key(sample.features)


def _manifest_problems(folder: Path, issues: list[ManifestIssue]) -> list[Problem]:
    """The manifest's own contradictions, each named by its key (and shard)."""
    manifest_path = str(folder / MANIFEST_NAME)
    problems = []
    for issue in issues:
        if issue.duplicate:
            problems.append(Problem(str(folder / issue.file), ProblemKind.DUPLICATE,
                                    f"listed twice in the manifest ({issue}); every epoch "
                                    "would read its records twice"))
        else:
            problems.append(Problem(manifest_path, ProblemKind.MANIFEST, str(issue)))
    return problems


@dataclasses.dataclass(frozen=True)
class _Labels:
    """The label feature and how many classes the manifest names."""

    key: str
    classes: int


def _manifest_jobs(folder: Path, manifest: Manifest, problems: list[Problem],
                   notes: list[str]) -> list[tuple]:
    """Each listed shard to check once; missing shards and unlisted files as problems."""
    labels = None
    label_kinds = {spec.name: spec.kind for spec in manifest.features}
    # where the key or the names are wrong already (a manifest problem), every record would
    # repeat it
    if (label_kinds.get(manifest.label_key) is FeatureKind.INT64
            and isinstance(manifest.class_names, list) and manifest.class_names):
        labels = _Labels(manifest.label_key, len(manifest.class_names))
    jobs, listed_before = [], set()
    for shard in manifest.shards:
        file = folder / shard.file
        if shard.file in listed_before:
            continue  # a duplicate: a problem already (_manifest_problems)
        listed_before.add(shard.file)
        if file.is_file():  # not exists(): a folder under a shard's name is missing too
            jobs.append((file, shard, manifest.compression, labels))
        else:
            problems.append(Problem(str(file), ProblemKind.MISSING, "listed in the manifest, "
                                    "not on disk" + (" (a folder is there)" if file.exists()
                                                     else "")))
    listed = listed_before | {MANIFEST_NAME}
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
    return jobs


def _check_file(file: Path, expected: ShardInfo | None, compression: str | None,
                labels: _Labels | None, image_check=None):
    problems = []
    size = file.stat().st_size
    if expected is not None:
        if size != expected.num_bytes:
            problems.append(Problem(str(file), ProblemKind.SIZE,
                                    f"{size} bytes, the manifest says {expected.num_bytes}"))
        try:
            digest = sha256_file(file)
        except OSError as error:
            # every later check would fail the same way: one line for the file
            problems.append(Problem(str(file), ProblemKind.UNREADABLE, _unreadable(error)))
            return ShardCheck(str(file), size, 0), problems
        if digest != expected.sha256:
            problems.append(Problem(str(file), ProblemKind.CHECKSUM,
                                    f"SHA-256 {digest[:16]}..., the manifest says "
                                    f"{expected.sha256[:16]}..."))
    records = _RecordCheck(labels)
    observers = [records.observe]
    if image_check is not None:
        def check_image(index: int, record: bytes) -> None:
            if records.malformed_at == index:
                return  # a problem already, which an image problem would only repeat
            problem = image_check(record)
            if problem:
                problems.append(Problem(str(file), ProblemKind.IMAGE, problem, record=index))
        observers.append(check_image)
    count, error = _read_all(file, compression, observers)
    if isinstance(error, _GaveUp):
        problems.append(Problem(str(file), ProblemKind.EXAMPLE, error.detail, record=error.index))
    elif error is not None:
        problems.append(error if isinstance(error, Problem) else
                        Problem(str(file), ProblemKind.CORRUPT, error, record=count))
    elif expected is not None and count != expected.num_records:
        problems.append(Problem(str(file), ProblemKind.COUNT,
                                f"{count} records, the manifest says {expected.num_records}"))
    problems.extend(records.problems(file))
    return ShardCheck(str(file), size, count), problems


def _unreadable(error: OSError) -> str:
    return (f"cannot be read ({error.strerror or error}); make it readable and verify again"
            if isinstance(error, PermissionError) else
            f"cannot be read ({error.strerror or error})")


class _GaveUp(Exception):
    """Raised by an observer to stop reading a file: ``detail`` says why, at record ``index``."""

    def __init__(self, index: int, detail: str):
        super().__init__(detail)
        self.index, self.detail = index, detail


class _Firsts:
    """Counts the records of one shard with one kind of problem; keeps the first."""

    def __init__(self):
        self.bad = 0
        self.first: tuple[int, str] | None = None

    def add(self, index: int, what: str) -> None:
        self.bad += 1
        if self.first is None:
            self.first = (index, what)

    def more(self) -> str:
        return f"; {self.bad - 1} more record(s) of this shard too" if self.bad > 1 else ""


class _RecordCheck:
    """Each record of one shard parsed once, as TensorFlow's parser and tfopt's readers would
    take it (:class:`~tfopt.records.format.example_wire.ExampleReader`), its label checked when the
    manifest names classes, and runs of records without features counted: reading stops
    (:class:`_GaveUp`) after ``FEATURELESS_RECORDS_CAP`` of them in a row."""

    def __init__(self, labels: _Labels | None):
        self.labels = labels
        self.read = ExampleReader().read
        self.malformed = _Firsts()
        self.bad_labels = _Firsts()
        self.featureless_from: int | None = None  # the first of the current run
        self.malformed_at: int | None = None  # the last malformed record's index

    def observe(self, index: int, data) -> None:
        example, problem = self.read(data)
        if problem is not None:
            self.malformed.add(index, str(problem))
            self.malformed_at = index
        # a malformed record's features are none a pipeline reads: it extends a run too
        features = example.features.feature if example is not None and problem is None else None
        if features:
            self.featureless_from = None
        else:
            if self.featureless_from is None:
                self.featureless_from = index
            if index - self.featureless_from + 1 >= FEATURELESS_RECORDS_CAP:
                raise _GaveUp(self.featureless_from, _featureless(FEATURELESS_RECORDS_CAP))
        if self.labels is not None and features is not None:  # a malformed one is said already
            self._check_label(index, features.get(self.labels.key))

    def _check_label(self, index: int, feature) -> None:
        values = feature.int64_list.value if feature is not None else ()
        if len(values) != 1:
            what = "no" if feature is None else f"{len(values)} int64 value(s) for its"
            self.bad_labels.add(index, f"{what} label {self.labels.key!r}")
        elif not 0 <= values[0] < self.labels.classes:
            self.bad_labels.add(index, f"label {values[0]}")

    def problems(self, file: Path) -> list[Problem]:
        found = []
        if self.malformed.first is not None:
            index, what = self.malformed.first
            found.append(Problem(str(file), ProblemKind.EXAMPLE,
                                 f"{what}{self.malformed.more()}", record=index))
        if self.bad_labels.first is not None:
            index, what = self.bad_labels.first
            classes = self.labels.classes
            found.append(Problem(str(file), ProblemKind.LABEL,
                                 f"{what}: expected one class index 0..{classes - 1} "
                                 f"(class_names has {classes}){self.bad_labels.more()}",
                                 record=index))
        return found


def _featureless(count: int) -> str:
    return (f"{count:,} records in a row from here hold no features (empty or malformed "
            "Examples): not tf.train.Example "
            "data, or a decompression bomb (a GZIP of empty records); verify gives up on the "
            f"file after {count:,} such records")


def _read_all(file: Path, compression: str | None,
              observers=()) -> tuple[int, str | Problem | _GaveUp | None]:
    """Read every record, both CRCs of each checked, each handed with its index to every one of
    ``observers`` (the Example, label and image checks);
    return the count of whole records and, at the first bad one, the reason (a problem of its
    own where the file cannot be read at all, :class:`_GaveUp` where an observer stopped it).

    A stream cut inside a header, a few bytes of anything after the records, a length beyond
    the end of the file, a GZIP stream cut short or with a wrong trailer (CRC-32, length): each
    is a bad record at the index where it starts (:func:`tfopt.records.format.framing
    .read_records`).
    """
    count = 0
    try:
        for data in read_records(file, compression):
            for observe in observers:
                observe(count, data)
            count += 1
    except _GaveUp as gave_up:  # at a record read whole: counted
        return count + 1, gave_up
    except RecordError as error:
        return error.index, f"{error.reason}{_LOST if error.kind not in ('gzip', 'trailing') else ''}"
    except OSError as error:
        if count == 0:
            return 0, Problem(str(file), ProblemKind.UNREADABLE, _unreadable(error))
        return count, f"unreadable ({error.strerror or error}); records after it are lost"
    return count, None


_LOST = "; records after it are lost"
