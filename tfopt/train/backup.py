"""Training that survives a crash: atomic, checksummed, multi-worker-safe backups, kept in
several versions and copied to a second location, and a best-model checkpoint.

Keras's ``BackupAndRestore`` writes its files in place (a kill mid-write leaves a backup that
fails the restart), loads whatever they hold unchecked, lets every worker write, and
``ModelCheckpoint`` forgets its best value on a restart. Both callbacks here derive from
``keras.callbacks.Callback`` and own their state, resuming as Keras's do (the epoch a restore
sets goes through ``tfopt._internals``). :func:`backup_callbacks` returns
:class:`AtomicBackupAndRestore` and :class:`BestModelCheckpoint`, which write every file under a
temporary name and rename it (a full disk is one error, :mod:`tfopt.train.backup_io`), keep the
``keep`` newest backups with their SHA-256 in ``backup/latest.json`` and restore the newest that
verifies, copy each backup to ``copy_to`` in a background thread (:mod:`tfopt.train.backup_store`)
and restore from there when the local folder is gone or damaged, write from the chief alone,
and keep the best value across restarts. The layout, what each guarantee covers and what a
resumed run equals: ``docs/train.md`` ("Backups").
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import keras

from tfopt._files import sha256_file
from tfopt._internals.keras_model import seed_states, set_initial_epoch
from tfopt._lock import FolderBusyError, lock_folder
from tfopt._validate import flag, optional_whole_number, whole_number
from tfopt.errors import InvalidArgumentError, TfoptError
from tfopt.train.backup_io import (
    BackupWriteError,
    is_chief,
    weights_bytes,
    write_bytes_atomically,
    write_json_atomically,
)
from tfopt.train.backup_records import (
    BACKUP_FOLDER,
    BACKUP_INFO_FILE,
    COPY_PREFIX,
    KERAS_INFO_FILE,
    LONG_TERM_FOLDER,
    BackupFolder,
    BackupRecord,
    copy_links,
    latest_json,
    new_run_id,
    read_backup_folder,
    start_afresh_hint,
    temp_name,
    temporary_files,
    weights_file_name,
    weights_problem,
)
from tfopt.train.backup_store import (
    BackupCopier,
    BackupStore,
    StoreError,
    Version,
    origin_of,
)
from tfopt.train.best_model import BestModelCheckpoint
from tfopt.train.preemption import SignalWatch, TrainingPreempted, WorkerAgreement

logger = logging.getLogger("tfopt")

__all__ = ["AtomicBackupAndRestore", "BestModelCheckpoint", "backup_callbacks"]

BEST_MODEL_FILE = "best.keras"
BEST_INFO_FILE = "best.json"
DEFAULT_KEEP = 3


@dataclass(frozen=True)
class _Candidate:
    """A backup a restore may load: one of the local folder's, or a version in the copy."""

    record: BackupRecord
    version: Version | None = None  # None: in the local folder

    @property
    def shown(self) -> str:
        return self.version.where if self.version is not None else self.record.weights


class AtomicBackupAndRestore(keras.callbacks.Callback):
    """Keras's ``BackupAndRestore`` done with atomic, checksummed backups, written by the chief
    alone, ``keep`` of them kept and each copied to a second location.

    Same arguments, backup moments and resumption as Keras's callback (the module docstring
    lists the differences); ``double_checkpoint`` is not offered: a backup is never
    half-written, and older ones are kept as fallbacks until newer ones are complete.

    Args:
        backup_dir: The folder of the backup (created when missing). Under several workers, on
            a file system they all share.
        save_freq: "epoch", or a number of batches between backups. Defaults to "epoch".
        delete_checkpoint: Delete the backup when fit() ends normally (the folder too, unless
            it holds files that are not the backup's). Defaults to True.
        keep: The newest backups kept in ``backup_dir``. Defaults to 3.
        keep_every: Also keep, for good, the first backup of every ``keep_every`` epochs in
            ``long_term_dir`` (and flag its copy so the copy's retention keeps it). Defaults
            to None (none kept).
        copy_to: A second location (a path or an fsspec URL) that each backup is copied to in
            a background thread. Defaults to None.
        copy_keep: The newest versions the copy keeps (its long-term ones aside), or None
            to delete nothing there. Defaults to None.
        long_term_dir: Where ``keep_every``'s backups go. Defaults to a ``long-term`` folder
            beside ``backup_dir``.
        preemption: On SIGTERM (or a first Ctrl-C) during fit, back up at the next step
            boundary and raise :class:`~tfopt.train.preemption.TrainingPreempted` (exit status
            75; :mod:`tfopt.train.preemption`). Under several workers, a signal to any of
            them stops every one at the same step (the chief writes the backup). Defaults to
            True.

    Raises:
        TfoptError: (at the start of fit) a record file is unreadable or malformed; no backup
            in the folder or the copy can be restored (every weights file is missing, damaged
            or does not load); or the backup is of more epochs than this fit runs.
        BackupWriteError: (at a backup) the disk is full or the folder cannot be written; the
            previous backups are kept.

    Example:
        >>> model.fit(ds, epochs=10, callbacks=[AtomicBackupAndRestore("run1/backup")])
    """

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint: bool = True,
                 keep: int = DEFAULT_KEEP, keep_every: int | None = None, copy_to=None,
                 copy_keep: int | None = None, long_term_dir=None, preemption: bool = True):
        super().__init__()
        if backup_dir is None or not os.fspath(backup_dir):
            raise InvalidArgumentError(f"backup_dir={backup_dir!r}: expected a folder path")
        if save_freq != "epoch":
            whole_number(save_freq, "save_freq", 1, "'epoch' or a positive number of batches")
        self.backup_dir = os.fspath(backup_dir)
        self.save_freq = save_freq
        self.delete_checkpoint = delete_checkpoint
        self.folder = Path(backup_dir)
        self.keep = whole_number(keep, "keep", 1, "a positive number of backups to keep")
        self.keep_every = optional_whole_number(
            keep_every, "keep_every", 1, "a positive number of epochs or None")
        copy_keep = optional_whole_number(copy_keep, "copy_keep", 1,
                                          "a positive number of versions or None")
        self.store = _open_copy_store(copy_to)
        if copy_keep is not None and self.store is None:
            raise InvalidArgumentError(f"copy_keep={copy_keep}: expected None without copy_to")
        self._origin = origin_of(self.folder)  # what the copy's versions record of this folder
        self.copier = (BackupCopier(self.store, copy_keep, self._origin)
                       if self.store is not None else None)
        self.long_term = (None if self.keep_every is None else BackupStore(
            Path(long_term_dir) if long_term_dir is not None
            else self.folder.parent / LONG_TERM_FOLDER))
        self._next_generation = 1  # each backup's weights get a new name, above every file's
        self._kept: list[BackupRecord] = []  # the backups a new one falls back to, newest first
        self._backup_files: set[str] = set()  # what this callback may delete when superseded
        self._run: str = new_run_id()
        self._last_long_term: int | None = None
        self.restored_from: str | None = None  # the backup the last fit resumed from
        # where training is, as Keras's callback counts it: the epochs finished (the epoch a
        # backup resumes at) and the last batch seen in this one
        self._current_epoch = 0
        self._last_batch_seen = 0
        self._batches_since_backup = 0
        self._steps_in_epoch = 0  # steps of the current epoch trained so far
        self.preemption = bool(preemption)
        self._watch = SignalWatch()
        self._agreement: WorkerAgreement | None = None  # under several workers
        self._stopped_by: str | None = None  # the signal the workers agreed to stop at
        self._lock = None  # the backup folder's, held by the chief while it fits

    def on_train_begin(self, logs=None):
        self._hold_folder()
        # Keras's version falls back to ".bkp" copies; here the fallback is an older backup
        self._restore_newest()
        self._stopped_by = None
        if self.preemption:
            self._watch.start(self.model)
            if self._agreement is None and _several_workers(self.model):
                self._agreement = WorkerAgreement(self.model.distribute_strategy)

    def _stop_requested(self) -> bool:
        """Whether the fit stops at this step boundary: a signal noted here or, under several
        workers, at any of them (a collective every worker makes at every boundary)."""
        if not self.preemption:
            return False
        if self._stopped_by is not None:
            return True
        requested = self._watch.requested
        if self._agreement is not None:
            if self._agreement(requested is not None) and requested is None:
                requested = "SIGTERM to another worker"
        self._stopped_by = requested
        return requested is not None

    def on_epoch_begin(self, epoch, logs=None):
        # Keras's callback counts epochs from 0 in each process, so a backup in batches
        # during a resumed fit's first epoch would record epoch 0 with later weights
        self._current_epoch = epoch
        self._steps_in_epoch = 0
        if self._stop_requested():  # came during the last epoch's validation or its end
            if self.save_freq != "epoch":
                self._back_up()
            self._preempted()

    def on_epoch_end(self, epoch, logs=None):
        self._current_epoch = epoch + 1
        self._last_batch_seen = 0
        self._steps_in_epoch = 0
        if self.save_freq == "epoch":
            self._back_up()

    def on_train_batch_end(self, batch, logs=None):
        # as Keras counts: ``batch`` is the last of the steps run since the previous call
        # (steps_per_execution), and a batch index that goes back starts a new epoch
        added = batch + 1 if batch <= self._last_batch_seen else batch - self._last_batch_seen
        self._last_batch_seen = batch
        self._steps_in_epoch = batch + 1
        epoch_steps = (self.params or {}).get("steps")
        stop = self._stop_requested()  # on every worker at every boundary: a collective
        if stop and (epoch_steps is None or batch + 1 < epoch_steps):
            # the epoch's last step: its end (validation, logs, best model) comes first, and
            # the next epoch's start stops the fit
            self._back_up(steps=self._steps_in_epoch)
            self._preempted()
        if self.save_freq == "epoch":
            return
        self._batches_since_backup += added
        if self._batches_since_backup >= self.save_freq:
            self._batches_since_backup = 0
            self._back_up()

    def _hold_folder(self) -> None:
        """One training writes a backup folder at a time: two would prune each other's
        backups. The chief locks it for the fit (a dead process's lock goes with it)."""
        if self._lock is not None or not is_chief(self.model):
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock = lock_folder(self.folder)
        except FolderBusyError as busy:
            raise TfoptError(f"{self.folder}: the backup of another training, in use by "
                             f"{busy.holder}; wait for it to end, or give this one another "
                             "folder") from None
        except OSError as error:
            raise BackupWriteError(f"{self.folder}: cannot be used ({error.strerror or error})"
                                   ) from None

    def _release_folder(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def stop_watching(self) -> None:
        """Give SIGTERM and SIGINT their default handlers back (done at the end of every fit;
        for a fit that ended by an exception, its caller's to do)."""
        self._watch.stop()

    def _preempted(self) -> None:
        """The backup is written: wait for its copy, then end the fit and the process."""
        if self.copier is not None:
            self.copier.close()
        self._watch.stop()
        self._release_folder()
        stopped = TrainingPreempted(self._stopped_by or self._watch.requested or "SIGTERM",
                                    self._current_epoch,
                                    self._steps_in_epoch)
        logger.warning("%s", stopped)
        raise stopped

    def has_backup(self) -> bool:
        """Whether there is a backup to resume (this layout's or plain Keras's), or the last
        fit resumed one (from the copy, say)."""
        return self.restored_from is not None or bool(read_backup_folder(self.folder).candidates)

    def _restore_newest(self):
        if not self.model.built:
            raise ValueError(
                "To use the BackupAndRestore callback, your model must be built before you "
                f"call fit(). Model {self.model} is unbuilt. Hint: call it on a batch of "
                "data, or give it an Input.")
        for link in copy_links(self.folder):  # a copy cut short by the death of a process
            with contextlib.suppress(FileNotFoundError):
                link.unlink()
        try:
            state = read_backup_folder(self.folder)
        except TfoptError as error:
            if self.store is None:
                raise
            # a damaged record: the copy may still hold the backup; the files stay as orphans
            logger.warning("%s; looking for a backup in %s", error, self.store.location)
            state = read_backup_folder(self.folder, ignore_records=True)
        self._next_generation = state.next_generation
        self._backup_files = state.backup_files
        self._kept = []
        self._run = state.run or new_run_id()
        self.restored_from = None
        if state.orphans:
            logger.warning(
                "%s: %s: no backup record names %s (its record was lost, or a deletion was "
                "cut short): not restored, and left in place", self.folder,
                ", ".join(state.orphans), "it" if len(state.orphans) == 1 else "them")
        candidates = [_Candidate(record) for record in state.candidates]
        candidates = _merge(candidates, self._copy_candidates(state.run))
        if candidates:
            self._restore(state, candidates)
        self._last_long_term = self._long_term_epoch()

    def _copy_candidates(self, run: str | None) -> list[_Candidate]:
        """The copy's versions of training ``run`` (the local backup's), or where the local
        folder names none, of the one unfinished training copied from this folder."""
        if self.store is None:
            return []
        try:
            versions, passed_over = self.store.resumable(run, self._origin)
        except StoreError as error:
            logger.warning("%s; restoring from the local folder alone", error)
            return []
        if run is None:
            for other in passed_over:
                logger.warning(
                    "%s: not restored: the backup of another training (copied from %s, "
                    "after %d epochs); a restore never takes another training's weights. "
                    "Hint: to resume that one, run it with that folder", other.where,
                    other.origin, other.record.epoch)
        found = []
        for version in versions:
            if version.problem:
                logger.warning("%s %s: not restored", version.where, version.problem)
                continue
            found.append(_Candidate(version.record, version))
        return found

    def _long_term_epoch(self) -> int | None:
        if self.long_term is None:
            return None
        try:
            epochs = [v.record.epoch for v in self.long_term.versions()
                      if v.record is not None and v.run == self._run]
        except StoreError as error:
            logger.warning("%s", error)
            epochs = []
        return max(epochs, default=None)

    def _restore(self, state: BackupFolder, candidates: list[_Candidate]) -> None:
        """Load the newest backup whose weights pass their check, else stop with one line."""
        planned = (self.params or {}).get("epochs")
        problems, failed, damaged = [], [], []
        for index, candidate in enumerate(candidates):
            record = candidate.record
            if planned is not None and record.epoch > planned:
                # another training's backup: restoring it would run no epoch and delete it
                source = state.info_file if candidate.version is None else candidate.shown
                raise TfoptError(
                    f"{source}: the backup was taken after {record.epoch} epochs, "
                    f"more than the {planned} this fit runs. Hint: fit with "
                    f"epochs={record.epoch} or more to continue that training, or delete "
                    f"{self.folder}{self._and_copy()} to start from scratch.")
            problem = self._try(candidate)
            if problem is None:
                kept = [c.record for c in candidates[index:] if c.version is None
                        and c.record.weights not in damaged]
                self._restored(state, candidate, kept, failed, planned)
                return
            problems.append(f"{candidate.shown} {problem}")
            failed.append(candidate.shown)
            if candidate.version is None:
                damaged.append(record.weights)
            logger.warning("%s: %s", self.folder / record.weights if candidate.version is None
                           else candidate.shown, problem)
        raise TfoptError(
            f"{self.folder}{self._and_copy()}: no backup in it can be restored: "
            f"{'; '.join(problems)}. {start_afresh_hint(self.folder)}")

    def _and_copy(self) -> str:
        return "" if self.store is None else f" and {self.store.location}"

    def _try(self, candidate: _Candidate) -> str | None:
        record = candidate.record
        if candidate.version is None:
            return weights_problem(self.folder, record) or self._load_weights(
                self.folder / record.weights)
        scratch = tempfile.mkdtemp(prefix="tfopt-restore-")
        try:
            path = Path(scratch) / record.weights
            return self.store.fetch(candidate.version, path) or self._load_weights(path)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _load_weights(self, path: Path) -> str | None:
        if self.model.optimizer is not None and not self.model.optimizer.built:
            # the optimizer's variables must exist to receive their saved values
            self.model.optimizer.build(self.model.trainable_variables)
        try:
            self.model.load_weights(str(path))
        except (OSError, ValueError) as error:  # h5py's truncated file, a different model
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            return f"cannot be loaded ({type(error).__name__}: {first_line})"
        return None

    def _restored(self, state: BackupFolder, candidate: _Candidate, kept: list[BackupRecord],
                  failed: list[str], planned: int | None) -> None:
        record = candidate.record
        if failed:
            logger.warning("%s: restored %s (%s, after %d epochs) instead of %s, which cannot "
                           "be restored (said above)",
                           self.folder, "an older backup" if candidate.version is None
                           else "the copy", candidate.shown, record.epoch, ", ".join(failed))
        elif candidate.version is not None:
            logger.warning("%s holds no backup newer than the copy: restored %s (after %d "
                           "epochs)", self.folder, candidate.shown, record.epoch)
        if not record.verified:
            logger.warning(
                "%s: restored unverified: %s records no checksum (written by %s)",
                self.folder / record.weights, state.info_file.name,
                "keras.callbacks.BackupAndRestore" if state.keras
                else "a tfopt from before backups carried checksums")
        # a plain Keras backup is replaced, not kept, by the first backup written here
        self._kept = [] if state.keras else kept[:self.keep]
        self.restored_from = candidate.shown
        if candidate.version is not None:
            self._run = candidate.version.run or self._run
            self._next_generation = max(self._next_generation, record.generation + 1)
        set_initial_epoch(self.model, record.epoch)  # what Keras's own callback sets
        self._restore_seed_states(record)
        if planned is not None and record.epoch == planned:
            logger.warning(
                "%s: the backup was taken after the last of the %d epochs: that training "
                "had finished, so this fit runs no epoch and the model holds its final "
                "weights%s", self.folder, planned,
                "; the backup is deleted at the end, as after any finished fit"
                if self.delete_checkpoint else "")
        else:
            logger.info("restored the backup %s: training resumes at epoch %d",
                        candidate.shown, record.epoch + 1)

    def _restore_seed_states(self, record: BackupRecord) -> None:
        """Give the random layers the seed states the backup recorded, so that they draw the
        masks an uninterrupted fit would (a backup without them leaves the fresh ones)."""
        states = seed_states(self.model)
        if not record.rng:
            return
        if len(record.rng) != len(states):
            logger.warning("%s: the backup records %d random layers' seed states and the model "
                           "has %d: left as they are", self.folder, len(record.rng), len(states))
            return
        for state, saved in zip(states, record.rng, strict=True):
            state.assign(saved)

    def _back_up(self, steps: int = 0):
        if not is_chief(self.model):
            weights_bytes(self.model)  # the same variable reads as the chief's, nothing kept
            return
        generation = self._next_generation
        name = weights_file_name(generation)
        path = self.folder / name
        # the new weights under a new name: latest.json still names the previous ones
        write_bytes_atomically(path, weights_bytes(self.model),
                               self.folder / temp_name(name))
        rng = tuple(tuple(int(part) for part in state.numpy())
                    for state in seed_states(self.model))
        record = BackupRecord(name, self._current_epoch, self._last_batch_seen, generation,
                              sha256_file(path), path.stat().st_size, round(time.time(), 3),
                              steps, rng)
        kept = [record, *self._kept][:self.keep]
        # the commit point: from here the backup is the new one, the others its fallbacks
        write_json_atomically(self.folder / BACKUP_INFO_FILE,
                               latest_json(record, kept[1] if len(kept) > 1 else None,
                                           tuple(kept[2:]), self._run))
        self._kept, self._next_generation = kept, generation + 1
        keep = {entry.weights for entry in kept}
        self._delete(self._backup_files - keep)
        self._backup_files = keep
        long_term = self._keep_long_term(path, record)
        if self.copier is not None:
            link = self.folder / f"{COPY_PREFIX}{name}"
            _link_or_copy(path, link)
            self.copier.submit(link, record, self._run, long_term)

    def _keep_long_term(self, path: Path, record: BackupRecord) -> bool:
        """Put ``record`` in the long-term folder when it opens a new ``keep_every`` span."""
        if self.keep_every is None or record.epoch < self.keep_every:
            return False
        last = self._last_long_term
        if last is not None and record.epoch // self.keep_every <= last // self.keep_every:
            return False
        self.long_term.put(path, record, self._run, long_term=True)
        self._last_long_term = record.epoch
        return True

    def _delete(self, names) -> None:
        """Delete these files of the backup's and its half-written ones; nothing else."""
        paths = [self.folder / name for name in names] + temporary_files(self.folder)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def on_train_end(self, logs=None):
        requested = self._watch.requested
        self._watch.stop()
        if (requested or self._stopped_by) and not self.delete_checkpoint:
            self._preempted()  # the signal came in the last epoch; its backup is kept
        try:
            self._end_training()
        finally:
            self._release_folder()
        if requested:
            # the training had ended when the signal's step came: its results are written,
            # and the signal now does what it would have done
            logger.warning("%s came as the training ended: its results are kept", requested)
            os.kill(os.getpid(), getattr(signal, requested))

    def _end_training(self):
        if not is_chief(self.model):
            return
        if self.copier is not None:
            self.copier.close()  # the newest backup's copy is complete (or said to fail)
        if not (self.delete_checkpoint and self.folder.exists()):
            return
        if self.store is not None:
            try:  # its versions stay in the copy, but are not resumed by the next run
                self.store.mark_finished(self._run)
            except StoreError as error:
                logger.warning("%s; a rerun may resume that finished training from there",
                               error)
        # the record files first: a deletion cut short must not leave a backup that names
        # deleted weights, nor one that would restart a finished training
        for name in (BACKUP_INFO_FILE, KERAS_INFO_FILE):
            if name == BACKUP_INFO_FILE or name in self._backup_files:
                with contextlib.suppress(FileNotFoundError):
                    (self.folder / name).unlink()
        self._delete(self._backup_files)
        self._backup_files = set()
        try:
            self.folder.rmdir()
        except OSError:  # files that are not the backup's: never deleted
            left = sorted(path.name for path in self.folder.iterdir())
            logger.warning("%s: kept after the backup was deleted: it holds %s, not the "
                           "backup's", self.folder, ", ".join(left))


def _merge(local: list[_Candidate], copies: list[_Candidate]) -> list[_Candidate]:
    """Newest first by training progress and time written; the local file first on a tie (a
    copy of the same backup is only fetched if the local one fails)."""
    ordered = sorted([(c, 1) for c in local] + [(c, 0) for c in copies],
                     key=lambda pair: (*pair[0].record.order, pair[1]), reverse=True)
    return [candidate for candidate, _ in ordered]


def _link_or_copy(source: Path, link: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        link.unlink()
    try:
        os.link(source, link)
    except OSError:  # a file system without hard links: a copy, on the training step
        try:
            shutil.copyfile(source, link)
        except OSError as error:
            raise BackupWriteError(
                f"{link.parent}: cannot stage {source.name} for its copy: "
                f"{error.strerror or error}. Hint: free space on that disk.") from None


def _several_workers(model) -> bool:
    """Whether this fit is one of several worker processes: they must agree on the step to
    stop at, since each receives a signal at its own moment."""
    from tfopt.distribute.cluster import cluster_info

    try:
        return cluster_info().workers > 1
    except TfoptError:
        return True  # a malformed cluster setting: not one process for sure


def _open_copy_store(copy_to) -> BackupStore | None:
    if copy_to is None:
        return None
    if not isinstance(copy_to, (str, os.PathLike)) or not os.fspath(copy_to):
        raise InvalidArgumentError(
            f"copy_to={copy_to!r}: expected a folder path or a URL (s3://bucket/run, ...)")
    return BackupStore(copy_to)


def backup_callbacks(
    directory,
    monitor: str = "val_loss",
    save_freq="epoch",
    mode: str = "auto",
    delete_backup: bool = True,
    keep: int = DEFAULT_KEEP,
    keep_every: int | None = None,
    copy_to=None,
    copy_keep: int | None = None,
    preemption: bool = True,
) -> list:
    """Atomic backups plus a best-model checkpoint, laid out under one folder.

    Call ``fit`` with the same ``directory`` after a crash and training resumes from the
    newest backup that verifies (see the module docstring for what is exact), its best value
    included. SIGTERM (or a first Ctrl-C) during ``fit`` backs up at the next step and ends
    the process with status 75 (:mod:`tfopt.train.preemption`); a fit resumed by hand starts
    that epoch again from its first step (``tfopt.Run`` resumes after the steps it holds).
    A run that finds no backup starts afresh, best model included; a finished run's
    ``best.keras`` and ``best.json`` there are renamed to ``best-previous-N.keras``/``.json``.
    Under ``MultiWorkerMirroredStrategy`` give every worker the same ``directory`` on a shared
    file system: the chief writes, all restore from it. The model must be built (called on a
    batch, or given an ``Input``) before ``fit``, as ``BackupAndRestore`` requires.

    Args:
        directory: The folder (created when missing).
        monitor: The logs key that defines the best model. Defaults to "val_loss" (needs
            validation data; use "loss" without).
        save_freq: "epoch", or a number of batches between backups. Defaults to "epoch".
        mode: "min", "max" or "auto". Defaults to "auto".
        delete_backup: Delete ``backup/`` when fit() ends normally. Defaults to True.
        keep: The newest backups kept in ``backup/``, each with its SHA-256. Defaults to 3.
        keep_every: Keep for good the first backup of every ``keep_every`` epochs, in
            ``directory/long-term/`` (never deleted by tfopt). Defaults to None.
        copy_to: A second location, a path or an fsspec URL (``s3://bucket/run1``): each
            backup is copied there in a background thread, checked on arrival, under a new
            name; a restore takes the newest good backup of either place. Defaults to None.
        copy_keep: The newest versions kept at ``copy_to`` (long-term ones aside); None
            deletes nothing there. Defaults to None.
        preemption: Answer SIGTERM (and a first Ctrl-C) with a backup at the next step and
            exit status 75; under several workers, all stop at one step. Defaults to True.

    Returns:
        [AtomicBackupAndRestore, BestModelCheckpoint]: put them in ``fit(callbacks=...)``.

    Raises:
        InvalidArgumentError: save_freq is neither "epoch" nor a positive integer, mode is
            not one of "min", "max", "auto", keep, keep_every or copy_keep is not a positive
            integer, or copy_to is a URL that fsspec cannot open here.

    Example:
        >>> model.fit(ds, validation_data=val, epochs=10,
        ...           callbacks=backup_callbacks("run1", copy_to="s3://bucket/run1"))
    """
    if save_freq != "epoch":
        whole_number(save_freq, "save_freq", 1, "'epoch' or a positive number of batches")
    if mode not in ("min", "max", "auto"):
        raise InvalidArgumentError(f"mode must be 'min', 'max' or 'auto', got {mode!r}")
    root = Path(directory)
    restore = AtomicBackupAndRestore(root / BACKUP_FOLDER, save_freq=save_freq,
                                     delete_checkpoint=delete_backup, keep=keep,
                                     keep_every=keep_every, copy_to=copy_to,
                                     copy_keep=copy_keep,
                                     long_term_dir=root / LONG_TERM_FOLDER,
                                     preemption=flag(preemption, "preemption"))
    root.mkdir(parents=True, exist_ok=True)
    return [
        restore,
        BestModelCheckpoint(root / BEST_MODEL_FILE, root / BEST_INFO_FILE, monitor, mode,
                            backup=restore),
    ]
