"""``convert``: raw data (image folders, NumPy arrays, CSV) into verified, sharded TFRecords.

The work, in order:
1. Check the output folder (never overwrite without ``overwrite``; ``resume`` picks up a journal).
2. Scan the source: list items, infer the schema, report bad input that needs no decoding.
3. Plan: shuffle with the seed, split off validation (stratified by class; a plain seeded
   random split for float labels, regression targets, which have no classes), cut into shards.
4. Write shards in parallel worker processes; each finished shard is journaled (fsynced), so a
   killed run can resume and keep every shard whose checksum still matches.
5. Write the manifest last, atomically, and drop the journal.

On a bad item (default ``on_error="raise"``) everything this run wrote is removed: no partial
dataset is left behind. Ctrl-C, or a shard-writing process that dies (OOM killer), keeps finished
shards and the journal for ``--resume``. With ``overwrite`` all of this happens in a staging
folder beside the output folder, whose old dataset stays whole until the new one is complete.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import enum
import hashlib
import json
import logging
import math
import multiprocessing
import os
import re
import signal
import threading
import time
from pathlib import Path

import numpy as np

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from tfopt._files import fsync_dir, is_temp_file, sha256_file
from tfopt._progress import Progress
from tfopt._system import usable_cores
from tfopt._validate import choice, require
from tfopt._version import __version__
from tfopt.errors import (
    DatasetError,
    DiskFullError,
    InvalidArgumentError,
    OutputExistsError,
    TfoptError,
)
from tfopt.records.disk_space import is_disk_full, require_space_for_images
from tfopt.records.manifest import (
    JOURNAL_NAME,
    MANIFEST_NAME,
    OLD_SUFFIX,
    STAGING_SUFFIX,
    Manifest,
    ShardInfo,
    SplitInfo,
    swap_folder,
    write_manifest,
)
from tfopt.records.schema import Encoding
from tfopt.records.sources import ScannedSource, SourceKind, detect_kind, scan_source
from tfopt.records.writer import Cancelled, ShardResult, ShardTask, write_shard

logger = logging.getLogger("tfopt")

TARGET_SHARD_BYTES = 128 << 20  # 100-200 MB per shard reads well on local and remote disks
# Parallel readers (interleave cycle_length) and multi-worker FILE sharding need several files:
# small datasets get up to MIN_SHARDS shards as long as each keeps at least MIN_SHARD_BYTES.
MIN_SHARDS = 16
MIN_SHARD_BYTES = 4 << 20
TRAIN, VALIDATION = "train", "validation"
SHARD_NAME = re.compile(r"^(train|validation)-\d{5}-of-\d{5}\.tfrecord(\.gz)?$")
_JOURNAL_VERSION = 1


class OnError(str, enum.Enum):
    """What to do with an item that cannot be converted."""

    RAISE = "raise"  # stop, exit 1, remove everything this run wrote
    SKIP = "skip"  # leave it out, record path and reason in the manifest


class ImageCheck(str, enum.Enum):
    """How each JPEG is proven whole before it is stored (PNG, GIF and BMP are decoded)."""

    STRUCTURE = "structure"  # every marker and segment to the end-of-image marker: ~0.1 ms
    DECODE = "decode"  # a decode at 1/8 scale (all entropy-coded data): ~0.7 ms on 400 px


class Compression(str, enum.Enum):
    NONE = "none"
    GZIP = "gzip"


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    """How ``convert`` turns a source into shards.

    Attributes:
        source_format: ``"images"``, ``"numpy"`` or ``"csv"``. Defaults to detecting it from
            the source path.
        label: The CSV column or NumPy array holding the label: integers (class indices),
            text (class names) or floats (regression targets). Defaults to a column or array
            named label, labels, class, target or y, if there is one.
        shard_size: Target shard size in bytes. Defaults to 128 MiB.
        shards: Number of training shards, overriding ``shard_size``. Defaults to None.
        seed: Seed of the shuffle before sharding and of the validation split. Defaults to 0.
        val_fraction: Fraction of records for a ``validation`` split, stratified by class;
            with float labels (no classes) a plain random split drawn with ``seed``.
            Defaults to 0 (no validation split).
        compression: ``"gzip"`` or ``"none"``. Defaults to "none": GZIP saves disk but costs
            CPU on every read, the scarcer resource in training.
        workers: Processes writing shards. Defaults to the number of usable cores.
        max_size: Downscale images whose longer side exceeds this (aspect kept, JPEG
            re-encoded at ``quality``). Defaults to None (bytes stored as they are).
        quality: JPEG quality of downscaled images, 1-100. Defaults to 90.
        check: How JPEGs are checked: ``"structure"`` walks every marker and segment to the
            end-of-image marker, rejecting what TensorFlow's decoder rejects (truncation,
            unknown markers, broken tables; see :func:`jpeg_structure`) in ~0.1 ms; progressive
            JPEGs are decoded;
            ``"decode"`` decodes at 1/8 scale (~0.7 ms at 400 px). Defaults to "structure".
        on_error: ``"raise"`` or ``"skip"`` (see :class:`OnError`). Defaults to "raise".
        overwrite: Replace a tfopt dataset already in the output folder (never a file tfopt
            did not write). The new dataset is written into a hidden folder beside it,
            ``.NAME.tfopt-new``, and replaces the old one only once complete: a failed or
            interrupted run leaves the old dataset whole (the disk holds both meanwhile).
            Defaults to False.
        resume: Finish an interrupted conversion into the same folder, an interrupted
            ``overwrite`` included. Defaults to False.
    """

    source_format: str | None = None
    label: str | None = None
    shard_size: int = TARGET_SHARD_BYTES
    shards: int | None = None
    seed: int = 0
    val_fraction: float = 0.0
    compression: str = Compression.NONE.value
    workers: int | None = None
    max_size: int | None = None
    quality: int = 90
    check: str = ImageCheck.STRUCTURE.value
    on_error: str = OnError.RAISE.value
    overwrite: bool = False
    resume: bool = False

    def __post_init__(self):
        set_field = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if self.source_format is not None:
            set_field("source_format", choice(SourceKind, self.source_format, "source_format").value)
        set_field("compression", choice(Compression, self.compression or "none", "compression").value)
        set_field("on_error", choice(OnError, self.on_error, "on_error").value)
        set_field("check", choice(ImageCheck, self.check, "check").value)
        if self.workers is None:
            set_field("workers", usable_cores())
        # NumPy's generators take no negative seeds (a ValueError deep in the shuffle otherwise)
        require(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        require(self.shard_size >= 1, "shard_size", self.shard_size, "a positive number of bytes")
        require(self.shards is None or self.shards >= 1, "shards", self.shards, "at least 1")
        require(0.0 <= self.val_fraction < 1.0, "val_fraction", self.val_fraction,
                 "a fraction in [0, 1), e.g. 0.1")
        require(self.workers >= 1, "workers", self.workers, "at least 1")
        require(self.max_size is None or self.max_size >= 8, "max_size", self.max_size,
                 "at least 8 pixels, e.g. 320 for 224-px training crops")
        require(1 <= self.quality <= 100, "quality", self.quality, "1 to 100")
        if self.overwrite and self.resume:
            raise InvalidArgumentError("overwrite and resume exclude each other: choose one")

    def replace(self, **changes) -> ConvertOptions:
        return dataclasses.replace(self, **changes)

    def plan_fields(self) -> dict:
        """The options that shape the output (recorded in the manifest, checked on resume)."""
        data = dataclasses.asdict(self)
        for run_only in ("workers", "overwrite", "resume"):
            data.pop(run_only)
        return data


@dataclasses.dataclass(frozen=True)
class ConvertResult:
    """What ``convert`` wrote.

    Attributes:
        path: The dataset folder.
        manifest: Its manifest.
        seconds: Wall time of the run.
        resumed_shards: Shards kept from an interrupted run.
    """

    path: Path
    manifest: Manifest
    seconds: float
    resumed_shards: int = 0

    @property
    def num_records(self) -> int:
        return self.manifest.num_records

    @property
    def records_per_second(self) -> float:
        return self.num_records / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {
            "path": str(self.path),
            "splits": {
                name: {"records": split.num_records, "shards": len(split.shards),
                       "bytes": split.num_bytes}
                for name, split in self.manifest.splits.items()
            },
            "records": self.num_records,
            "bytes": self.manifest.num_bytes,
            "skipped": len(self.manifest.skipped),
            "resumed_shards": self.resumed_shards,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
        }


def convert(src, dst, options: ConvertOptions | None = None, *, progress: bool | None = False,
            **option_values) -> ConvertResult:
    """Convert an image folder, NumPy arrays or a CSV file into a sharded TFRecord dataset.

    Args:
        src: An image folder ``SRC/<class>/<image>``, a ``.npz``/``.npy`` file or a folder of
            ``.npy`` files, or a ``.csv`` file with a header row.
        dst: The dataset folder to write (created if missing).
        options: A :class:`ConvertOptions`; or pass its fields as keyword arguments.
        progress: Draw a progress bar on stderr: True, False, or None for "when stderr is a
            terminal". Defaults to False.

    Returns:
        A :class:`ConvertResult` with the manifest written.

    Raises:
        tfopt.SourceError: Bad input, named with its file and row or key (nothing is left
            written unless ``on_error="skip"``).
        tfopt.OutputExistsError: ``dst`` holds data and neither overwrite nor resume was given,
            or another conversion is writing there now.
        tfopt.DiskFullError: The images cannot fit on ``dst``'s disk (checked before writing),
            or the disk filled up (the finished shards are kept for ``resume``).
        tfopt.InvalidArgumentError: An option is out of range, or ``dst`` is ``src``, inside
            it or around it.

    Example:
        >>> result = convert("photos/", "shards/", val_fraction=0.1, seed=1)
        >>> result.manifest.class_names[:2]
        ['cat', 'dog']
    """
    if options is None:
        options = ConvertOptions(**option_values)
    elif option_values:
        options = options.replace(**option_values)
    started = time.perf_counter()
    src, dst = Path(src), Path(dst)
    _refuse_nested(src, dst)
    kind = SourceKind(options.source_format) if options.source_format else detect_kind(src)
    skip_bad = options.on_error == OnError.SKIP.value
    scanned = scan_source(src, kind, label=options.label, skip_bad=skip_bad,
                          max_size=options.max_size, quality=options.quality, check=options.check)
    tasks = plan_shards(scanned, options)
    fingerprint = _fingerprint(scanned, options, tasks)
    output = _prepare_output(dst, options)
    try:
        work = output.folder  # dst, or the staging folder beside it while an --overwrite runs
        journal = _Journal(work / JOURNAL_NAME)
        # outside the try: a refused resume (other options, changed input) must leave the
        # interrupted run's shards and journal alone, for a rerun with the right options
        done = _resumable_results(journal, fingerprint, tasks, work) if options.resume else {}
        todo = [task for task in tasks if task.file not in done]
        try:
            _check_space(scanned, options, tasks, todo, work)
        except DiskFullError:
            if output.created and not any(work.iterdir()):
                work.rmdir()
            raise
        try:
            journal.start(fingerprint, keep=bool(done))
            if done:
                logger.info("resuming: %d of %d shards already complete", len(done), len(tasks))
            total_items = sum(len(task.items) for task in todo)
            with Progress(total_items, "convert", unit="rec",
                          enabled=progress) as bar:
                _run_tasks(todo, work, options.workers, journal, done, bar)
        except _WorkerDied:
            raise  # an interruption too; its message says that finished shards are kept
        except (Cancelled, KeyboardInterrupt) as error:
            kept = f"; {dst} keeps its dataset until then" if output.staged else ""
            logger.warning("interrupted: finished shards are kept; run again with --resume%s", kept)
            error.tfopt_reported = True  # the CLI prints nothing more
            raise
        except BaseException as error:
            if is_disk_full(error):
                raise _disk_full(work, done, tasks) from None
            _discard_output(work, tasks, output.created)
            raise
        manifest = _build_manifest(scanned, options, tasks, done, src)
        try:
            if output.staged:
                _swap_in(work, dst, manifest)
            else:
                write_manifest(dst, manifest)
                journal.remove()
                fsync_dir(dst)
        except OSError as error:
            if is_disk_full(error):
                raise _disk_full(work, done, tasks) from None
            raise
        resumed = len(tasks) - len(todo)
        return ConvertResult(dst, manifest, time.perf_counter() - started, resumed)
    finally:
        output.release()  # the output or staging folder's lock


def _check_space(scanned: ScannedSource, options: ConvertOptions, tasks, todo, work) -> None:
    """Refuse an image conversion that cannot fit, before its first shard (see disk_space)."""
    if scanned.kind is not SourceKind.IMAGES or options.max_size is not None or not todo:
        return  # records of arrays, CSV rows or downscaled images may be smaller than the source
    share = sum(len(task.items) for task in todo) / sum(len(task.items) for task in tasks)
    what = f"the {'rest of the ' if len(todo) < len(tasks) else ''}dataset"
    require_space_for_images(work, int(sum(scanned.item_bytes) * share), what)


def _disk_full(work: Path, done: dict, tasks) -> DiskFullError:
    """The disk filled up mid-run: drop the half-written shards (they hold the space), keep the
    finished ones and the journal for --resume, as after an interruption."""
    _remove_temp_files(work)
    return DiskFullError(f"{work}: no space left on device after {len(done)} of {len(tasks)} "
                         "shards; the finished ones are kept: free space, then run again with "
                         "--resume")


def _remove_temp_files(folder: Path) -> None:
    """Remove the half-written files (temporary names) that a stopped writer left in folder."""
    for entry in folder.iterdir():
        if is_temp_file(entry):
            entry.unlink(missing_ok=True)


def _refuse_nested(src: Path, dst: Path) -> None:
    """Refuse a destination inside the source or the other way round (symlinks resolved): the
    next scan of the source would read the dataset, or the dataset folder hold the source."""
    real_src, real_dst = src.resolve(), dst.resolve()

    def shown(path: Path, real: Path) -> str:
        return str(path) if path.absolute() == real else f"{path} (= {real})"

    if real_dst == real_src or real_src in real_dst.parents:
        where = "is the source" if real_dst == real_src else "is inside the source"
        raise InvalidArgumentError(
            f"destination {shown(dst, real_dst)} {where} {shown(src, real_src)}; "
            "choose a destination outside it")
    if real_dst in real_src.parents:
        raise InvalidArgumentError(
            f"source {shown(src, real_src)} is inside the destination {shown(dst, real_dst)}; "
            "choose a destination outside it")


# ---------------------------------------------------------------------------------------------
# Planning


def plan_shards(scanned: ScannedSource, options: ConvertOptions) -> list[ShardTask]:
    """Shuffle, split and cut the items into shard tasks; deterministic for a given seed."""
    count = len(scanned.items)
    rng = np.random.default_rng(options.seed)
    order = rng.permutation(count)
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
}


def _fingerprint(scanned: ScannedSource, options: ConvertOptions, tasks) -> str:
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


# ---------------------------------------------------------------------------------------------
# The output folder and the journal


def _is_ours(path: Path) -> bool:
    return (path.name in (MANIFEST_NAME, JOURNAL_NAME) or bool(SHARD_NAME.match(path.name))
            or is_temp_file(path))


# While an --overwrite runs, the new dataset grows in a hidden staging folder beside DST (inside
# it where DST is a mount point: on the same file system, moving a shard is a rename) and the
# old one stays whole in DST; the swap at the end moves the old files into a second hidden
# folder, the new ones in, writes the manifest last and only then removes the old files.
_OLD_MOVED = ".tfopt-all-moved"  # in the old folder: every old file left DST, new ones may follow


def staging_folder(dst) -> Path:
    """The hidden folder beside ``dst`` where ``convert(..., overwrite=True)`` writes."""
    return swap_folder(dst, STAGING_SUFFIX)


@dataclasses.dataclass(frozen=True)
class _Output:
    folder: Path  # where the shards and the journal go
    created: bool  # made by this run: removed again if the run fails on bad input
    staged: bool  # the staging folder of an --overwrite, swapped into dst at the end
    lock: int | None = None  # a descriptor of the folder written, locked for this run

    def release(self) -> None:
        if self.lock is not None:
            os.close(self.lock)  # and with it the lock


def _lock_staging(staging: Path) -> int | None:
    """Lock the staging folder for this run, or refuse when another run holds it: a second
    --overwrite would remove the first one's shards, or undo its swap."""
    return _lock_folder(staging, "another 'tfopt convert --overwrite' is writing there now")


def _lock_output(dst: Path) -> int | None:
    """Lock the output folder of a plain or --resume run, or refuse when another run writes
    there: the two would write the same shard names, and a --resume started beside a running
    conversion would delete its half-written shards as leftovers of a killed worker."""
    return _lock_folder(dst, "another 'tfopt convert' is writing there now")


def _lock_folder(folder: Path, busy: str) -> int | None:
    """Hold an exclusive flock on ``folder`` (None: folder gone, or no flock on this system).
    The lock goes with the process, kill -9 included, so a killed run never leaves it held."""
    if fcntl is None:  # no flock (Windows): unguarded
        return None
    try:
        fd = os.open(folder, os.O_RDONLY)
    except FileNotFoundError:
        return None  # removed meanwhile: its run has finished
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise OutputExistsError(f"{folder}: {busy}; wait for it to finish, or stop it") from None
    return fd


def _prepare_output(dst: Path, options: ConvertOptions) -> _Output:
    """Check and clean the output folder; say where this run writes."""
    if dst.exists() and not dst.is_dir():
        raise OutputExistsError(f"{dst}: exists and is not a folder")
    staging = staging_folder(dst)
    lock = _lock_staging(staging) if staging.is_dir() else None
    try:
        output = _prepare_locked(dst, options, staging, lock)
    except BaseException:
        if lock is not None:
            os.close(lock)
        raise
    if lock is not None and output.lock != lock:
        os.close(lock)  # the staging folder it locked was removed (and maybe made anew)
    return output


def _prepare_locked(dst: Path, options: ConvertOptions, staging: Path, lock) -> _Output:
    _finish_or_undo_swap(dst)
    if staging.is_dir() and options.resume:
        logger.warning("resuming the interrupted --overwrite in %s; %s keeps the old dataset "
                       "until the new one is complete", staging, dst)
        _refuse_foreign(staging)
        _remove_temp_files(staging)  # left by a killed worker
        return _Output(staging, created=True, staged=True, lock=lock)
    if staging.exists():
        if not options.overwrite:
            raise OutputExistsError(
                f"{dst}: an interrupted --overwrite left its new shards in {staging}; finish "
                "it with --resume, or start again with --overwrite")
        _remove_ours(staging)
        logger.warning("removed %s, left by an interrupted --overwrite", staging)
    if not dst.exists():
        try:
            dst.mkdir(parents=True)
        except OSError as error:  # a parent is a file, or not writable
            raise TfoptError(f"{dst}: cannot create the output folder ({error.strerror}); "
                             "choose a folder that can be created") from None
        return _Output(dst, created=True, staged=False, lock=_lock_output(dst))
    # locked before its entries are judged: a running conversion's journal and half-written
    # shards would otherwise pass for an interrupted one's
    dst_lock = _lock_output(dst)
    try:
        return _prepare_existing(dst, options, staging, dst_lock)
    except BaseException:
        if dst_lock is not None:
            os.close(dst_lock)
        raise


def _prepare_existing(dst: Path, options: ConvertOptions, staging: Path, dst_lock) -> _Output:
    entries = sorted(dst.iterdir())
    if not entries:
        return _Output(dst, created=False, staged=False, lock=dst_lock)
    foreign = [entry.name for entry in entries if not _is_ours(entry)]
    has_manifest = (dst / MANIFEST_NAME).exists()
    has_journal = (dst / JOURNAL_NAME).exists()
    if foreign and (options.overwrite or options.resume or has_manifest or has_journal):
        raise OutputExistsError(
            f"{dst}: holds files tfopt did not write ({', '.join(foreign[:3])}"
            f"{', ...' if len(foreign) > 3 else ''}); refusing to mix a dataset with them: "
            "choose an empty or new folder"
        )
    if foreign:
        raise OutputExistsError(f"{dst}: is not empty ({len(entries)} entries, e.g. "
                                f"{foreign[0]}); choose an empty or new folder")
    if options.overwrite:
        # the old dataset stays whole in dst until the new one is complete (see _swap_in)
        try:
            staging.mkdir()
        except OSError as error:
            raise TfoptError(f"{staging}: cannot create the staging folder for --overwrite "
                             f"({error.strerror}); the folder holding {dst} must be "
                             "writable") from None
        fsync_dir(staging.parent)
        staging_lock = _lock_staging(staging)
        if dst_lock is not None:
            # the staging lock guards the rest of the run; a plain run that starts in dst
            # from now on finds the old dataset there and is refused
            os.close(dst_lock)
        return _Output(staging, created=True, staged=True, lock=staging_lock)
    if options.resume:
        if has_manifest:
            raise OutputExistsError(f"{dst}: already holds a complete dataset ({MANIFEST_NAME}); "
                                    "nothing to resume. Use --overwrite to convert again")
        _remove_temp_files(dst)  # left by a killed worker
        return _Output(dst, created=False, staged=False, lock=dst_lock)
    # a journal beside a manifest is stale (killed between the two writes): nothing to resume
    hint = ("finish the interrupted conversion with --resume, or start again with --overwrite"
            if has_journal and not has_manifest else "pass --overwrite to replace the dataset there")
    raise OutputExistsError(f"{dst}: is not empty ({len(entries)} entries); {hint}")


def _refuse_foreign(folder: Path) -> None:
    foreign = [entry.name for entry in folder.iterdir()
               if not _is_ours(entry) and entry.name != _OLD_MOVED]
    if foreign:
        raise OutputExistsError(f"{folder}: holds files tfopt did not write "
                                f"({', '.join(sorted(foreign)[:3])}); move them out first")


def _remove_ours(folder: Path) -> None:
    """Remove the files tfopt wrote in ``folder``, then the folder; never anything else."""
    _refuse_foreign(folder)
    for entry in folder.iterdir():
        entry.unlink(missing_ok=True)
    folder.rmdir()
    fsync_dir(folder.parent)


def _move_all(source: Path, target: Path, names) -> None:
    for name in names:
        os.replace(source / name, target / name)


def _ours_in(folder: Path) -> list[str]:
    """Names of tfopt's files in ``folder``, the manifest first (a folder without it is
    incomplete, so moving it first marks the folder so for the rest of the move)."""
    names = sorted(entry.name for entry in folder.iterdir() if _is_ours(entry))
    return sorted(names, key=lambda name: name != MANIFEST_NAME)


def _swap_in(staging: Path, dst: Path, manifest: Manifest) -> None:
    """Replace the dataset in ``dst`` by the complete one in ``staging``.

    A kill in the middle leaves ``dst`` without a manifest and the old files in the old folder;
    the next run into ``dst`` puts everything back as it was before the swap
    (:func:`_finish_or_undo_swap`), so ``--resume`` then finishes the new dataset.
    """
    old = swap_folder(dst, OLD_SUFFIX)
    dst.mkdir(parents=True, exist_ok=True)
    old.mkdir()
    _move_all(dst, old, _ours_in(dst))
    fsync_dir(dst)
    (old / _OLD_MOVED).touch()
    fsync_dir(old)
    _move_all(staging, dst, [shard.file for shard in manifest.shards])
    fsync_dir(dst)
    write_manifest(dst, manifest)  # from here on dst is the new dataset
    _remove_ours(old)
    _remove_ours(staging)  # its journal and nothing else


def _finish_or_undo_swap(dst: Path) -> None:
    """Complete or roll back a swap that a kill interrupted (see :func:`_swap_in`)."""
    old = swap_folder(dst, OLD_SUFFIX)
    if not old.is_dir():
        return
    staging = staging_folder(dst)
    all_moved = (old / _OLD_MOVED).exists()
    if all_moved and (dst / MANIFEST_NAME).exists():
        # the new dataset was complete: only the cleanup was left
        _remove_ours(old)
        if staging.is_dir():
            _remove_ours(staging)
        logger.info("%s: finished replacing the dataset (a run was killed while cleaning up)",
                    dst)
        return
    if all_moved:  # new shards may have arrived in dst: back to the staging folder
        staging.mkdir(exist_ok=True)
        _move_all(dst, staging, _ours_in(dst))
        fsync_dir(staging)
        (old / _OLD_MOVED).unlink()
    # the manifest last: the folder is a complete dataset only once every shard is back
    _move_all(old, dst, list(reversed(_ours_in(old))))
    fsync_dir(dst)
    old.rmdir()
    logger.warning("%s: a run was killed while replacing the dataset there; the old dataset is "
                   "back in place, and --resume finishes the new one", dst)


class _Journal:
    """An append-only, fsynced record of finished shards, for ``--resume``."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> tuple[str | None, dict[str, ShardResult]]:
        if not self.path.exists():
            return None, {}
        fingerprint, results = None, {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line torn by a kill; its shard is simply redone
            if "fingerprint" in entry:
                fingerprint = entry["fingerprint"]
            elif "file" in entry:
                results[entry["file"]] = ShardResult.from_json(entry)
        return fingerprint, results

    def start(self, fingerprint: str, keep: bool) -> None:
        if keep:
            if not self.path.read_bytes().endswith(b"\n"):
                # a kill tore the last line: without a line break the next entry would join
                # it and be lost too
                with open(self.path, "ab") as handle:
                    handle.write(b"\n")
            return
        self.path.write_text(json.dumps({"journal": _JOURNAL_VERSION,
                                         "fingerprint": fingerprint}) + "\n", encoding="utf-8")
        self._sync()

    def append(self, result: ShardResult) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(result.to_json()) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _sync(self) -> None:
        with open(self.path, "rb") as handle:
            os.fsync(handle.fileno())
        fsync_dir(self.path.parent)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def _resumable_results(journal: _Journal, fingerprint: str, tasks, dst: Path) -> dict:
    """Journaled shards whose files still match their size and SHA-256."""
    old_fingerprint, results = journal.read()
    if old_fingerprint is None:
        return {}
    if old_fingerprint != fingerprint:
        raise DatasetError(
            f"{dst}: the interrupted conversion had another source or other options (seed, "
            "shards, split, compression...), or the input changed since (files added, removed "
            "or edited, modification times included); resume with the same source, input and "
            "options, or use --overwrite"
        )
    kept = {}
    planned = {task.file for task in tasks}
    for file, result in results.items():
        path = dst / file
        if file not in planned or not path.exists():
            continue
        if path.stat().st_size == result.num_bytes and sha256_file(path) == result.sha256:
            kept[file] = result
        else:
            logger.warning("%s: checksum differs from the journal; writing it again", path)
    return kept


def _discard_output(dst: Path, tasks, created: bool) -> None:
    """Remove everything this conversion wrote, so that no partial dataset is left."""
    for task in tasks:
        (dst / task.file).unlink(missing_ok=True)
    for entry in dst.iterdir() if dst.exists() else ():
        if is_temp_file(entry) or entry.name == JOURNAL_NAME:
            entry.unlink(missing_ok=True)
    if created:
        try:
            dst.rmdir()
        except OSError:
            pass  # something else appeared in it; leave it


# ---------------------------------------------------------------------------------------------
# Running the shard writers

_worker_state: dict = {}


def _init_worker(queue, stop_event, parent_pid: int) -> None:
    # the process was started with SIGINT blocked (see _sigint_blocked): a Ctrl-C reaches the
    # whole process group, and the main process, not each worker, answers it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tfopt._tf import import_tensorflow

    tf = import_tensorflow()  # without one set of C++ banners per worker

    # one shard per process and eager per-image ops: thread pools would only contend
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    _worker_state.update(queue=queue, stop=stop_event, parent=parent_pid)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True,
                     name="tfopt-parent-watch").start()


def _exit_with_parent(parent_pid: int) -> None:
    """End this worker when its parent is gone (kill -9): an idle worker waits on a queue
    whose pipe it also holds open, so it would never see the parent go and would linger,
    holding TensorFlow's ~500 MB, forever."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


def _worker_should_stop() -> bool:
    # a killed parent (kill -9) leaves workers orphaned: they notice and stop
    return _worker_state["stop"].is_set() or os.getppid() != _worker_state["parent"]


def _worker_write_shard(task: ShardTask, folder: str) -> ShardResult:
    return write_shard(task, Path(folder), report=_worker_state["queue"].put,
                       should_stop=_worker_should_stop)


def _run_tasks(tasks, dst: Path, workers: int, journal: _Journal, done: dict, bar) -> None:
    """Write ``tasks``; journal each result and add it to ``done``.

    With several workers, ``workers - 1`` spawned processes and a thread of this process share
    the shards. Spawning costs each process a TensorFlow import (about 3 s here), so this
    process, idle otherwise, starts writing at once instead of waiting for a process of its
    own: on 2 cores that is most of the start-up cost back.
    """
    def finished(result: ShardResult) -> None:
        journal.append(result)
        done[result.file] = result

    workers = min(workers, len(tasks))
    if workers <= 1:
        for task in tasks:
            finished(write_shard(task, dst, report=bar.update))
        return
    # larger shards first: the last shard to finish is then a small one
    todo = collections.deque(sorted(tasks, key=lambda task: -len(task.items)))
    lock = threading.Lock()

    def next_task():
        with lock:
            return todo.popleft() if todo else None

    context = multiprocessing.get_context("spawn")  # fork after TensorFlow started is unsafe
    queue, stop = context.Queue(), context.Event()
    local = _LocalWriter(next_task, dst, queue.put, stop.is_set)
    executor = concurrent.futures.ProcessPoolExecutor(
        workers - 1, mp_context=context, initializer=_init_worker,
        initargs=(queue, stop, os.getpid()))
    in_flight: set = set()
    try:
        local.start()
        while True:
            # one running and one queued task per process: no process waits between shards
            while len(in_flight) < 2 * (workers - 1) and (task := next_task()) is not None:
                with _sigint_blocked():  # submit starts the worker processes
                    in_flight.add(executor.submit(_worker_write_shard, task, str(dst)))
            if not in_flight and local.finished:
                break
            completed, in_flight = concurrent.futures.wait(
                in_flight, timeout=0.1, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in completed:
                finished(future.result())  # re-raises a worker's SourceError here
            for result in local.take_results():  # re-raises the thread's errors here
                finished(result)
            _drain(queue, bar)
        _drain(queue, bar)
    except concurrent.futures.process.BrokenProcessPool as error:
        _stop_all(stop, local, executor)
        raise _WorkerDied(
            "a shard-writing process died (killed, or out of memory?); the shards finished so "
            "far are kept: run again with --resume. When calling tfopt.convert from a script, "
            "put the call under  if __name__ == '__main__':  (worker processes are spawned and "
            "re-import the script)") from error
    except BaseException:
        _stop_all(stop, local, executor)
        raise
    # every shard is in: let the idle workers exit on their own (their TensorFlow teardown
    # takes ~0.5 s) instead of making the caller wait for it
    executor.shutdown(wait=False)


class _WorkerDied(TfoptError):
    """A shard-writing process died (OOM killer, kill -9): an interruption, like Ctrl-C, so the
    finished shards and the journal stay for ``--resume`` instead of being discarded."""


# Seconds the worker processes get to stop at a shard's next record once told to, before they
# are terminated: one still importing TensorFlow (about 3 s, more on busy cores) would otherwise
# hold a Ctrl-C up until its import is done (measured: 4.2 s to exit without this, 1.4 s with
# 0.5 s here, on 2 busy cores). A terminated worker leaves at most a temporary file, which
# --resume removes; the shard it was writing is not journaled, so it is redone anyway.
_STOP_GRACE_S = 0.5


@contextlib.contextmanager
def _sigint_blocked():
    """Hold a Ctrl-C back while worker processes start, and answer it after.

    The processes inherit the blocked SIGINT, so a Ctrl-C during their start-up (the TensorFlow
    import) prints no traceback from each of them. Blocking it in this thread is not enough
    here: another thread of this process may take the signal, and Python then raises
    KeyboardInterrupt in the main thread all the same, which could cut a start-up short (the
    child, left without its start-up data, prints an EOFError). So the handler is swapped for
    one that notes the signal, and the noted Ctrl-C is handed to the real handler afterwards.
    """
    can_mask = hasattr(signal, "pthread_sigmask")
    in_main = threading.current_thread() is threading.main_thread()
    noted = []
    handler = signal.signal(signal.SIGINT, lambda *_: noted.append(True)) if in_main else None
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if can_mask else None
    try:
        yield
    finally:
        if can_mask:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if in_main:
            signal.signal(signal.SIGINT, signal.SIG_DFL if handler is None else handler)
    if noted and callable(handler):
        handler(signal.SIGINT, None)  # Python's default one raises KeyboardInterrupt
    elif noted and handler == signal.SIG_DFL:
        signal.raise_signal(signal.SIGINT)


def _stop_all(stop, local: _LocalWriter, executor) -> None:
    stop.set()
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    local.join()
    deadline = time.monotonic() + _STOP_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join()


class _LocalWriter(threading.Thread):
    """Writes shards in this process, beside the worker processes, from the same task list."""

    def __init__(self, next_task, dst: Path, report, should_stop):
        super().__init__(name="tfopt-convert-local", daemon=True)
        self._next_task, self._dst = next_task, dst
        self._report, self._should_stop = report, should_stop
        self._results: list = []
        self._lock = threading.Lock()
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._should_stop() and (task := self._next_task()) is not None:
                result = write_shard(task, self._dst, report=self._report,
                                     should_stop=self._should_stop)
                with self._lock:
                    self._results.append(result)
        except BaseException as error:  # handed to the main thread by take_results
            self._error = error

    @property
    def finished(self) -> bool:
        with self._lock:
            return not self.is_alive() and not self._results and self._error is None

    def take_results(self) -> list[ShardResult]:
        with self._lock:
            results, self._results = self._results, []
        if self._error is not None and not results:
            error, self._error = self._error, None
            raise error
        return results


def _drain(queue, bar) -> None:
    while True:
        try:
            bar.update(queue.get_nowait())
        except Exception:  # queue.Empty, or a queue closed under us
            return


# ---------------------------------------------------------------------------------------------
# The manifest


def _build_manifest(scanned: ScannedSource, options, tasks, results: dict, src: Path) -> Manifest:
    splits: dict[str, list[ShardInfo]] = {}
    skipped = list(scanned.skipped)
    formats: dict[str, int] = {}
    for task in tasks:
        result = results[task.file]
        splits.setdefault(task.split, []).append(
            ShardInfo(result.file, result.num_records, result.num_bytes, result.sha256))
        skipped.extend(result.skipped)
        for name, count in result.formats.items():
            formats[name] = formats.get(name, 0) + count
    if sum(result.num_records for result in results.values()) == 0:
        raise DatasetError(f"{src}: every item was skipped; nothing to write")
    features = scanned.features
    if scanned.image_key is not None:
        encoding = Encoding(next(iter(formats))) if len(formats) == 1 else Encoding.IMAGE
        features = [spec.replace(encoding=encoding) if spec.name == scanned.image_key else spec
                    for spec in features]
    return Manifest(
        features=features,
        splits={name: SplitInfo(shards) for name, shards in splits.items()},
        compression=None if options.compression == "none" else options.compression,
        image_key=scanned.image_key,
        label_key=scanned.label_key,
        class_names=scanned.class_names,
        source={"kind": scanned.kind.value, "path": scanned.path,
                **({"image_formats": formats} if formats else {})},
        options=options.plan_fields(),
        skipped=skipped,
        tfopt_version=__version__,
    )
