"""The output folder of ``convert``: checks, locks, the ``--overwrite`` staging folder and swap.

A plain run writes into the output folder, locked for the run. ``--overwrite`` writes the new
dataset into a hidden staging folder beside it and swaps it in once complete; a swap that a kill
interrupted is finished or undone by the next run. Only files tfopt wrote are ever removed.

Example:
    >>> staging_folder("/data/shards")
    PosixPath('/data/.shards.tfopt-new')
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from pathlib import Path

from tfopt._files import fsync_dir, is_temp_file
from tfopt._lock import FolderBusyError, FolderLock, lock_folder
from tfopt.errors import InvalidArgumentError, OutputExistsError, SourceError, TfoptError
from tfopt.records.convert.options import ConvertOptions
from tfopt.records.manifest import (
    ALL_MOVED_MARKER,
    JOURNAL_NAME,
    MANIFEST_NAME,
    OLD_SUFFIX,
    STAGING_SUFFIX,
    Manifest,
    swap_folder,
    write_manifest,
)
from tfopt.records.sources.paths import LOOPING_LINK

logger = logging.getLogger("tfopt")


SHARD_NAME = re.compile(r"^(train|validation)-\d{5}-of-\d{5}\.tfrecord(\.gz)?$")


def remove_temp_files(folder: Path) -> None:
    """Remove the half-written files (temporary names) that a stopped writer left in folder."""
    for entry in folder.iterdir():
        if is_temp_file(entry):
            entry.unlink(missing_ok=True)


def refuse_nested(src: Path, dst: Path) -> None:
    """Refuse a destination inside the source or the other way round (symlinks resolved): the
    next scan of the source would read the dataset, or the dataset folder hold the source."""
    real_src, real_dst = _resolved(src, source=True), _resolved(dst, source=False)

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


def _resolved(path: Path, *, source: bool) -> Path:
    """``path.resolve()``, a link that loops as one line naming it (``resolve`` raises a bare
    RuntimeError for it, or an OSError on newer Pythons)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        if source:
            raise SourceError(path, f"{LOOPING_LINK}; point it at a real file or folder") from None
        raise TfoptError(f"{path}: {LOOPING_LINK}; choose another destination") from None


def _is_ours(path: Path) -> bool:
    return (path.name in (MANIFEST_NAME, JOURNAL_NAME) or bool(SHARD_NAME.match(path.name))
            or is_temp_file(path))


# While an --overwrite runs, the new dataset grows in a hidden staging folder beside DST (inside
# it where DST is a mount point: on the same file system, moving a shard is a rename) and the
# old one stays whole in DST; the swap at the end moves the old files into a second hidden
# folder (ALL_MOVED_MARKER there once all are out), the new ones in, writes the manifest last
# and only then removes the old files. manifest.interrupted_swap tells the readers of DST.


def staging_folder(dst) -> Path:
    """The hidden folder beside ``dst`` where ``convert(..., overwrite=True)`` writes."""
    return swap_folder(dst, STAGING_SUFFIX)


@dataclasses.dataclass(frozen=True)
class _Output:
    folder: Path  # where the shards and the journal go
    created: bool  # made by this run: removed again if the run fails on bad input
    staged: bool  # the staging folder of an --overwrite, swapped into dst at the end
    lock: FolderLock | None = None  # the folder written, locked for this run

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def _lock_staging(staging: Path) -> FolderLock | None:
    """Lock the staging folder for this run, or refuse when another run holds it: a second
    --overwrite would remove the first one's shards, or undo its swap."""
    return _lock_folder(staging, "another 'tfopt convert --overwrite' is writing there now")


def _lock_output(dst: Path) -> FolderLock | None:
    """Lock the output folder of a plain or --resume run, or refuse when another run writes
    there: the two would write the same shard names, and a --resume started beside a running
    conversion would delete its half-written shards as leftovers of a killed worker."""
    return _lock_folder(dst, "another 'tfopt convert' is writing there now")


def _lock_folder(folder: Path, busy: str) -> FolderLock | None:
    """Hold an exclusive lock on ``folder`` (:func:`tfopt._lock.lock_folder`; None: the folder
    is gone). The lock goes with the process, kill -9 included, so a killed run never leaves
    it held; a second run in this process is refused as another process's is."""
    try:
        return lock_folder(folder, take_over=False, required=True)
    except FileNotFoundError:
        return None  # removed meanwhile: its run has finished
    except FolderBusyError:
        raise OutputExistsError(f"{folder}: {busy}; wait for it to finish, or stop it") from None


def _require_writable(folder: Path) -> None:
    """Refuse an output folder this process cannot write in, before anything is written (the
    journal's first line would otherwise fail with a PermissionError)."""
    if os.access(folder, os.W_OK | os.X_OK):
        return
    read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY) if hasattr(os, "statvfs") else False
    why = "a read-only file system" if read_only else "no write permission for this user"
    raise TfoptError(f"{folder}: cannot write the dataset there ({why}); choose a folder you "
                     "can write to, or change its permissions")


def prepare_output(dst: Path, options: ConvertOptions) -> _Output:
    """Check and clean the output folder; say where this run writes."""
    if dst.exists() and not dst.is_dir():
        raise OutputExistsError(f"{dst}: exists and is not a folder")
    if dst.is_dir():
        _require_writable(dst)
    staging = staging_folder(dst)
    lock = _lock_staging(staging) if staging.is_dir() else None
    try:
        output = _prepare_locked(dst, options, staging, lock)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    if lock is not None and output.lock is not lock:
        lock.release()  # the staging folder it locked was removed (and maybe made anew)
    return output


def _prepare_locked(dst: Path, options: ConvertOptions, staging: Path, lock) -> _Output:
    _finish_or_undo_swap(dst)
    if staging.is_dir() and options.resume:
        logger.warning("resuming the interrupted --overwrite in %s; %s keeps the old dataset "
                       "until the new one is complete", staging, dst)
        _refuse_foreign(staging)
        remove_temp_files(staging)  # left by a killed worker
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
            dst_lock.release()
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
        # the old dataset stays whole in dst until the new one is complete (see swap_in)
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
            dst_lock.release()
        return _Output(staging, created=True, staged=True, lock=staging_lock)
    if options.resume:
        if has_manifest:
            raise OutputExistsError(f"{dst}: already holds a complete dataset ({MANIFEST_NAME}); "
                                    "nothing to resume. Use --overwrite to convert again")
        remove_temp_files(dst)  # left by a killed worker
        return _Output(dst, created=False, staged=False, lock=dst_lock)
    # a journal beside a manifest is stale (killed between the two writes): nothing to resume
    hint = ("finish the interrupted conversion with --resume, or start again with --overwrite"
            if has_journal and not has_manifest else "pass --overwrite to replace the dataset there")
    raise OutputExistsError(f"{dst}: is not empty ({len(entries)} entries); {hint}")


def _refuse_foreign(folder: Path) -> None:
    foreign = [entry.name for entry in folder.iterdir()
               if not _is_ours(entry) and entry.name != ALL_MOVED_MARKER]
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


def swap_in(staging: Path, dst: Path, manifest: Manifest) -> None:
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
    (old / ALL_MOVED_MARKER).touch()
    fsync_dir(old)
    _move_all(staging, dst, [shard.file for shard in manifest.shards])
    fsync_dir(dst)
    write_manifest(dst, manifest)  # from here on dst is the new dataset
    _remove_ours(old)
    _remove_ours(staging)  # its journal and nothing else


def _finish_or_undo_swap(dst: Path) -> None:
    """Complete or roll back a swap that a kill interrupted (see :func:`swap_in`)."""
    old = swap_folder(dst, OLD_SUFFIX)
    if not old.is_dir():
        return
    staging = staging_folder(dst)
    all_moved = (old / ALL_MOVED_MARKER).exists()
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
        (old / ALL_MOVED_MARKER).unlink()
    # the manifest last: the folder is a complete dataset only once every shard is back
    _move_all(old, dst, list(reversed(_ours_in(old))))
    fsync_dir(dst)
    old.rmdir()
    logger.warning("%s: a run was killed while replacing the dataset there; the old dataset is "
                   "back in place, and --resume finishes the new one", dst)


def discard_output(dst: Path, tasks, created: bool) -> None:
    """Remove everything this conversion wrote, so that no partial dataset is left.

    Temporary files first: a writer left behind (convert's local thread, stopped at its next
    record) renames its file into place only while that file exists, so no shard can appear
    once the shards have been removed.
    """
    for entry in dst.iterdir() if dst.exists() else ():
        if is_temp_file(entry) or entry.name == JOURNAL_NAME:
            entry.unlink(missing_ok=True)
    for task in tasks:
        (dst / task.file).unlink(missing_ok=True)
    if created:
        try:
            dst.rmdir()
        except OSError:
            pass  # something else appeared in it; leave it
