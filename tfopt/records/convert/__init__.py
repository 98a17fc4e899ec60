"""``convert``: raw data (image folders, NumPy arrays, CSV, Parquet, HDF5) into verified,
sharded TFRecords.

The steps, one module each: check and lock the output folder (:mod:`.output`), scan the source
(:mod:`tfopt.records.sources`), plan the shards (:mod:`.plan`), write them in parallel
(:mod:`.pool`), each journaled as it finishes (:mod:`.journal`), and write the manifest last.
How bad items, interruptions and ``overwrite`` are handled: ``docs/records.md``.

Example:
    >>> result = convert("photos/", "shards/", val_fraction=0.1, seed=1)
    >>> sorted(result.manifest.splits)
    ['train', 'validation']
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from pathlib import Path

from tfopt._files import fsync_dir
from tfopt._progress import Progress
from tfopt._system import usable_cores
from tfopt._validate import known_options, require
from tfopt._version import __version__
from tfopt.errors import DatasetError, DiskFullError, SourceError, WorkerStartError
from tfopt.records.convert.journal import Journal, resumable_results
from tfopt.records.convert.options import ConvertOptions, ConvertResult, OnError
from tfopt.records.convert.output import (
    discard_output,
    prepare_output,
    refuse_nested,
    remove_temp_files,
    swap_in,
)
from tfopt.records.convert.plan import plan_fingerprint, plan_shards
from tfopt.records.convert.pool import (
    Terminated,
    WorkerDied,
    interruptions_answered_once,
    run_tasks,
)
from tfopt.records.convert.source_watch import SourceSnapshot
from tfopt.records.disk_space import is_disk_full, require_space_for_images
from tfopt.records.manifest import JOURNAL_NAME, Manifest, ShardInfo, SplitInfo, write_manifest
from tfopt.records.schema import Encoding
from tfopt.records.sources import ScannedSource, SourceKind, detect_kind, scan_source
from tfopt.records.sources.images import sampled_image_sides
from tfopt.records.writer import Cancelled
from tfopt.rules import store_smaller

__all__ = ["convert", "ConvertOptions", "ConvertResult"]

logger = logging.getLogger("tfopt")


def convert(src, dst, options: ConvertOptions | None = None, *, progress: bool | None = False,
            **option_values) -> ConvertResult:
    """Convert an image folder, NumPy arrays, a CSV, Parquet or HDF5 file into a sharded
    TFRecord dataset.

    Args:
        src: An image folder ``SRC/<class>/<image>``, a ``.npz``/``.npy`` file or a folder of
            ``.npy`` files, a ``.csv`` file with a header row, a ``.parquet`` file or a folder
            of Parquet part files, or an ``.h5`` file (``group`` picks its group).
        dst: The dataset folder to write (created if missing).
        options: A :class:`ConvertOptions`; or pass its fields as keyword arguments.
        progress: Draw a progress bar on stderr: True, False, or None for "when stderr is a
            terminal". Defaults to False.

    Returns:
        A :class:`ConvertResult` with the manifest written.

    Raises:
        tfopt.errors.SourceError: Bad input, named with its file and row or key (nothing is left
            written unless ``on_error="skip"``).
        tfopt.errors.OutputExistsError: ``dst`` holds data and neither overwrite nor resume was given,
            or another conversion is writing there now.
        tfopt.errors.DiskFullError: The images cannot fit on ``dst``'s disk (checked before writing),
            or the disk filled up (the finished shards are kept for ``resume``).
        tfopt.errors.InvalidArgumentError: An unknown option, one of the wrong type or out of range,
            or ``dst`` is ``src``, inside it or around it.
        tfopt.TfoptError: ``dst`` cannot be written (permissions, a read-only file system),
            or worker processes cannot start here (``workers=1`` writes in this process).
        KeyboardInterrupt: Ctrl-C, or SIGTERM (in the main thread, where nothing else handles
            it) as its subclass ``Terminated``; the finished shards are kept for ``resume``.
            Only the first raises: another while the workers stop is ignored.

    Example:
        >>> result = convert("photos/", "shards/", val_fraction=0.1, seed=1)
        >>> result.manifest.class_names[:2]
        ['cat', 'dog']
    """
    known_options(option_values, [field.name for field in dataclasses.fields(ConvertOptions)],
                  "convert")
    require(options is None or isinstance(options, ConvertOptions), "options", options,
            "a ConvertOptions, or None (then pass its fields as keyword arguments)")
    if options is None:
        options = ConvertOptions(**option_values)
    elif option_values:
        options = options.replace(**option_values)
    # SIGTERM as Ctrl-C (finished shards kept for --resume), and the first of them alone
    with interruptions_answered_once():
        return _convert(Path(src), Path(dst), options, progress)


def _convert(src: Path, dst: Path, options: ConvertOptions, progress) -> ConvertResult:
    started = time.perf_counter()
    refuse_nested(src, dst)
    kind = SourceKind(options.source_format) if options.source_format else detect_kind(src)
    skip_bad = options.on_error == OnError.SKIP.value
    workers = options.workers if options.workers is not None else usable_cores()
    # before the first read: a change after it is caught
    watched = SourceSnapshot(src, sampled=kind is not SourceKind.IMAGES)
    scanned = scan_source(src, kind, label=options.label, skip_bad=skip_bad,
                          max_size=options.max_size, quality=options.quality, check=options.check,
                          max_pixels=options.max_pixels, group=options.group)
    _advise_max_size(scanned, options)
    tasks = plan_shards(scanned, options)
    fingerprint = plan_fingerprint(scanned, options, tasks)
    output = prepare_output(dst, options)
    try:
        work = output.folder  # dst, or the staging folder beside it while an --overwrite runs
        journal = Journal(work / JOURNAL_NAME)
        # outside the try: a refused resume (other options, changed input) must leave the
        # interrupted run's shards and journal alone, for a rerun with the right options
        done = resumable_results(journal, fingerprint, tasks, work) if options.resume else {}
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
                run_tasks(todo, work, workers, journal, done, bar)
        except (WorkerDied, WorkerStartError):
            remove_temp_files(work)  # every writer is stopped: what is left is half-written
            raise  # an interruption too; its message says that finished shards are kept
        except (Cancelled, KeyboardInterrupt) as error:
            # every writer is stopped (a worker killed after the grace leaves its temporary
            # file): leave the finished shards and the journal only
            remove_temp_files(work)
            kept = f"; {dst} keeps its dataset until then" if output.staged else ""
            what = "stopped by SIGTERM" if isinstance(error, Terminated) else "interrupted"
            logger.warning("%s: finished shards are kept; run again with --resume%s", what, kept)
            error.tfopt_reported = True  # the CLI prints nothing more
            raise
        except BaseException as error:
            if is_disk_full(error):
                raise _disk_full(work, done, tasks) from None
            discard_output(work, tasks, output.created)
            watched.check()  # a source file deleted or rewritten under a worker: said so
            raise
        try:
            watched.check()
        except SourceError:
            discard_output(work, tasks, output.created)
            raise
        manifest = _build_manifest(scanned, options, tasks, done, src)
        try:
            if output.staged:
                swap_in(work, dst, manifest)
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


def _advise_max_size(scanned: ScannedSource, options: ConvertOptions) -> None:
    """Warn when images are stored as they are and are far larger than training sizes."""
    if scanned.kind is not SourceKind.IMAGES or options.max_size is not None:
        return
    sides = sampled_image_sides(scanned)
    if not sides:
        return
    shorter = statistics.median(side for side, _ in sides)
    longer = statistics.median(side for _, side in sides)
    # the rule the pipeline builder and tfopt.analyze advise by, for a model of typical size
    verdict = store_smaller(shorter, None, longer)
    if verdict is None:
        return
    logger.warning(
        "%s: the images are stored as they are, %d x %d px (median of %d sampled); a model "
        "trained at 224-384 px decodes each of them whole every epoch (or at 1/8 scale at "
        "best). Converting with --max-size %d stores every side at most %d px: about %.0fx "
        "fewer pixels per image to decode, and fewer bytes to read",
        scanned.path, longer, shorter, len(sides), verdict.max_size, verdict.max_size,
        verdict.pixel_ratio)


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
    remove_temp_files(work)
    return DiskFullError(f"{work}: no space left on device after {len(done)} of {len(tasks)} "
                         "shards; the finished ones are kept: free space, then run again with "
                         "--resume")


# What the manifest says beside the names it lists that were not UTF-8 on disk.
ESCAPED_NAMES_NOTE = ("these names are not valid UTF-8 on disk: each byte that is not UTF-8 is "
                      "written \\xNN in class_names and here; image/filename holds the "
                      "name's bytes as they are")


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
    if scanned.kind is SourceKind.IMAGES:  # the formats met decide the encoding
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
                **({"image_formats": formats} if formats else {}),
                **({"names_not_utf8": {"note": ESCAPED_NAMES_NOTE,
                                       "names": scanned.escaped_names}}
                   if scanned.escaped_names else {})},
        options=options.plan_fields(),
        skipped=skipped,
        tfopt_version=__version__,
    )
