"""Training that survives a crash: atomic, checksummed, multi-worker-safe backups and a
best-model checkpoint.

Keras 3.15's ``BackupAndRestore`` writes its files in place (a kill mid-write leaves a backup
that fails the restart), loads whatever they hold unchecked, lets every worker write, and
``ModelCheckpoint`` forgets its best value on a restart. :func:`backup_callbacks` returns
:class:`AtomicBackupAndRestore` and :class:`BestModelCheckpoint`, which write every file under a
temporary name and rename it, check the weights against the SHA-256 recorded in
``backup/latest.json`` before a restore (falling back to the previous backup), write from the
chief alone, and keep the best value across restarts. The layout, what each guarantee covers
and what a resumed run equals: ``docs/train.md`` ("Backups").
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path

import keras

from tfopt._files import atomic_path, sha256_file
from tfopt._validate import whole_number
from tfopt.errors import InvalidArgumentError, TfoptError
from tfopt.train.backup_records import (
    BACKUP_INFO_FILE,
    KERAS_INFO_FILE,
    TEMP_PREFIX,
    WEIGHTS_SUFFIX,
    BackupFolder,
    BackupRecord,
    latest_json,
    read_backup_folder,
    start_afresh_hint,
    temporary_files,
    weights_file_name,
    weights_problem,
)

logger = logging.getLogger("tfopt")

__all__ = ["AtomicBackupAndRestore", "BestModelCheckpoint", "backup_callbacks"]

BACKUP_FOLDER = "backup"
BEST_MODEL_FILE = "best.keras"
BEST_INFO_FILE = "best.json"


def _write_json_atomically(path: Path, data: dict) -> None:
    # complete file or none: a crash mid-write must not leave a half file
    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as file:
            json.dump(data, file)

    _save_atomically(write, path)


def _save_atomically(save, path: Path) -> None:
    """``save(temporary path)``, then fsync and rename it to ``path``; on failure no trace.

    The temporary name keeps the suffix Keras checks (``.keras``, ``.weights.h5``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, path.with_name(f"{TEMP_PREFIX}{path.name}")) as tmp:
        save(str(tmp))


def _save_and_discard(save, name: str) -> None:
    """``save(path)`` into a private temporary folder, deleted at once: a non-chief worker's
    part in a save whose variable reads may be collective ops (see the module docstring)."""
    scratch = tempfile.mkdtemp(prefix="tfopt-backup-")
    try:
        save(os.path.join(scratch, name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _is_chief(model) -> bool:
    """Whether this process writes checkpoints: True on one machine; under
    ``MultiWorkerMirroredStrategy`` only for task "chief", or worker 0 when there is none."""
    try:
        strategy = model.distribute_strategy
    except AttributeError:  # not the TensorFlow backend: no strategy, one process
        return True
    return bool(strategy.extended.should_checkpoint)


class AtomicBackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras ``BackupAndRestore`` with atomic, checksummed backups, written by the chief alone.

    Same arguments and resumption as Keras's callback (the module docstring lists the
    differences); ``double_checkpoint`` is not offered: a backup is never half-written, and the
    previous one is kept as a fallback until a newer one is complete.

    Args:
        backup_dir: The folder of the backup (created when missing). Under several workers, on
            a file system they all share.
        save_freq: "epoch", or a number of batches between backups. Defaults to "epoch".
        delete_checkpoint: Delete the backup when fit() ends normally (the folder too, unless
            it holds files that are not the backup's). Defaults to True.

    Raises:
        TfoptError: (at the start of fit) a record file is unreadable or malformed; no backup
            in the folder can be restored (every weights file is missing, damaged or does not
            load); or the backup is of more epochs than this fit runs.

    Example:
        >>> model.fit(ds, epochs=10, callbacks=[AtomicBackupAndRestore("run1/backup")])
    """

    def __init__(self, backup_dir, save_freq="epoch", delete_checkpoint: bool = True):
        super().__init__(str(backup_dir), save_freq=save_freq,
                         delete_checkpoint=delete_checkpoint)
        self.folder = Path(backup_dir)
        self._next_generation = 1  # each backup's weights get a new name, above every file's
        self._kept: BackupRecord | None = None  # the backup a new one falls back to
        self._backup_files: set[str] = set()  # what this callback may delete when superseded

    def on_train_begin(self, logs=None):
        # Keras's version falls back to ".bkp" copies; here the fallback is the previous backup
        self._load_model()

    def on_epoch_begin(self, epoch, logs=None):
        # Keras's callback counts epochs from 0 in each process, so a backup in batches
        # during a resumed fit's first epoch would record epoch 0 with later weights
        self._current_epoch = epoch

    def has_backup(self) -> bool:
        """Whether the folder holds a backup to resume (this layout's or plain Keras's)."""
        return bool(read_backup_folder(self.folder).candidates)

    def _load_model(self):
        if not self.model.built:
            raise ValueError(
                "To use the BackupAndRestore callback, your model must be built before you "
                f"call fit(). Model {self.model} is unbuilt. Hint: call it on a batch of "
                "data, or give it an Input.")
        state = read_backup_folder(self.folder)
        self._next_generation = state.next_generation
        self._backup_files = state.backup_files
        self._kept = None
        if state.orphans:
            logger.warning(
                "%s: %s: no backup record names %s (its record was lost, or a deletion was "
                "cut short): not restored, and left in place", self.folder,
                ", ".join(state.orphans), "it" if len(state.orphans) == 1 else "them")
        if state.candidates:
            self._restore(state)

    def _restore(self, state: BackupFolder) -> None:
        """Load the newest backup whose weights pass their check, else stop with one line."""
        planned = (self.params or {}).get("epochs")
        problems = []
        for record in state.candidates:
            if planned is not None and record.epoch > planned:
                # another training's backup: restoring it would run no epoch and delete it
                raise TfoptError(
                    f"{state.info_file}: the backup was taken after {record.epoch} epochs, "
                    f"more than the {planned} this fit runs. Hint: fit with "
                    f"epochs={record.epoch} or more to continue that training, or delete "
                    f"{self.folder} to start from scratch.")
            problem = weights_problem(self.folder, record) or self._load_weights(record)
            if problem is None:
                self._restored(state, record, problems, planned)
                return
            problems.append(f"{record.weights} {problem}")
            logger.warning("%s: %s", self.folder / record.weights, problem)
        raise TfoptError(
            f"{self.folder}: no backup in it can be restored: {'; '.join(problems)}. "
            f"{start_afresh_hint(self.folder)}")

    def _load_weights(self, record: BackupRecord) -> str | None:
        if self.model.optimizer is not None and not self.model.optimizer.built:
            # the optimizer's variables must exist to receive their saved values
            self.model.optimizer.build(self.model.trainable_variables)
        try:
            self.model.load_weights(str(self.folder / record.weights))
        except (OSError, ValueError) as error:  # h5py's truncated file, a different model
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            return f"cannot be loaded ({type(error).__name__}: {first_line})"
        return None

    def _restored(self, state: BackupFolder, record: BackupRecord, problems: list[str],
                  planned: int | None) -> None:
        if problems:
            logger.warning("%s: restored the previous backup (%s, after %d epochs) instead",
                           self.folder, record.weights, record.epoch)
        if not record.verified:
            logger.warning(
                "%s: restored unverified: %s records no checksum (written by %s)",
                self.folder / record.weights, state.info_file.name,
                "keras.callbacks.BackupAndRestore" if state.keras
                else "a tfopt from before backups carried checksums")
        # a plain Keras backup is replaced, not kept, by the first backup written here
        self._kept = None if state.keras else record
        self.model._initial_epoch = record.epoch  # what Keras's own callback sets
        if planned is not None and record.epoch == planned:
            logger.warning(
                "%s: the backup was taken after the last of the %d epochs: that training "
                "had finished, so this fit runs no epoch and the model holds its final "
                "weights%s", self.folder, planned,
                "; the backup is deleted at the end, as after any finished fit"
                if self.delete_checkpoint else "")
        else:
            logger.info("restored the backup in %s: training resumes at epoch %d",
                        self.folder, record.epoch + 1)

    def _save_model(self):
        if not _is_chief(self.model):
            _save_and_discard(self.model.save_weights, f"backup{WEIGHTS_SUFFIX}")
            return
        generation = self._next_generation
        name = weights_file_name(generation)
        path = self.folder / name
        # the new weights under a new name: latest.json still names the previous ones
        _save_atomically(self.model.save_weights, path)
        record = BackupRecord(name, self._current_epoch, self._last_batch_seen, generation,
                              sha256_file(path), path.stat().st_size)
        # the commit point: from here the backup is the new one, the last one its fallback
        previous = self._kept
        _write_json_atomically(self.folder / BACKUP_INFO_FILE, latest_json(record, previous))
        self._kept, self._next_generation = record, generation + 1
        keep = {name} if previous is None else {name, previous.weights}
        self._delete(self._backup_files - keep)
        self._backup_files = keep

    def _delete(self, names) -> None:
        """Delete these files of the backup's and its half-written ones; nothing else."""
        paths = [self.folder / name for name in names] + temporary_files(self.folder)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def on_train_end(self, logs=None):
        if not (self.delete_checkpoint and _is_chief(self.model) and self.folder.exists()):
            return
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


def _previous(path: Path, number: int) -> Path:
    """``best.keras`` -> ``best-previous-1.keras``: the name keeps the suffix Keras checks."""
    return path.with_name(f"{path.stem}-previous-{number}{path.suffix}")


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """``ModelCheckpoint(save_best_only=True)`` that remembers its best value across restarts.

    Saves the whole model to ``filepath`` when ``monitor`` improves and records the value and
    epoch in ``info_path`` (JSON); both are written atomically, and under several workers by
    the chief alone (the others save into a temporary folder, see the module docstring). On
    creation it reads ``info_path`` back, when its monitor matches, so a restarted run only
    replaces the file with a better model.

    With ``backup`` (as :func:`backup_callbacks` pairs them) the value read back is kept only
    when that backup has something to resume, decided at the start of the first ``fit``: a new
    run (no backup) starts its best afresh and the chief renames the previous run's files to
    ``<stem>-previous-N<suffix>`` (the first free N) so that nothing is lost.

    Args:
        filepath: Where the best model goes (``.keras``).
        info_path: Where its value goes (``.json``).
        monitor: The logs key to watch. Defaults to "val_loss".
        mode: "min", "max" or "auto" (Keras's rule: max for accuracy-like names).
            Defaults to "auto".
        backup: The :class:`AtomicBackupAndRestore` of the same run, or None (the best value
            in ``info_path`` always counts). Defaults to None.

    Example:
        >>> BestModelCheckpoint("run/best.keras", "run/best.json", monitor="val_accuracy")
    """

    def __init__(self, filepath, info_path, monitor: str = "val_loss", mode: str = "auto",
                 backup: AtomicBackupAndRestore | None = None):
        super().__init__(str(filepath), monitor=monitor, mode=mode, save_best_only=True)
        self.info_path = Path(info_path)
        self.backup = backup
        self._initial_best = self.best
        self._first_fit = True
        self._restore_best()

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        if self._first_fit and self.backup is not None and not self.backup.has_backup():
            self._start_afresh()
        # later fit() calls with this callback continue its best, as Keras's checkpoint does
        self._first_fit = False

    def _start_afresh(self) -> None:
        """A new run: forget the best value read back and move the old run's files aside.

        Every worker forgets (they must decide alike); the chief alone renames.
        """
        self.best = self._initial_best
        model_path = Path(self.filepath)
        old = [path for path in (model_path, self.info_path) if path.exists()]
        if not old or not _is_chief(self.model):
            return
        number = 1
        while any(_previous(path, number).exists() for path in (model_path, self.info_path)):
            number += 1
        # the model first: best.json left alone never names a model that is not there
        for path in old:
            os.replace(path, _previous(path, number))
        logger.warning(
            "%s holds a finished run's best model and no backup to resume: this run tracks "
            "its own best; the previous files are now %s", model_path.parent,
            ", ".join(_previous(path, number).name for path in old))

    def _restore_best(self) -> None:
        if not (self.info_path.exists() and Path(self.filepath).exists()):
            return
        try:
            info = json.loads(self.info_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            logger.warning("%s unreadable (%s); the best value starts afresh", self.info_path,
                           error)
            return
        value = info.get("value")
        if info.get("monitor") == self.monitor and isinstance(value, (int, float)):
            self.best = float(value)
            logger.info("best model so far: %s = %g at epoch %s", self.monitor, self.best,
                        info.get("epoch"))

    def _save_model(self, epoch, batch, logs):
        # Keras's version, minus the in-place write: every worker decides alike (the logs
        # are reduced over workers, best.json is shared), the chief alone keeps the file
        filepath = self._get_file_path(epoch, batch, logs)
        if not self._should_save_model(epoch, batch, logs, filepath):
            return
        save = self.model.save_weights if self.save_weights_only else self.model.save
        if _is_chief(self.model):
            _save_atomically(lambda path: save(path, overwrite=True), Path(filepath))
        else:
            _save_and_discard(save, Path(filepath).name)

    def on_epoch_end(self, epoch, logs=None):
        before = self.best
        super().on_epoch_end(epoch, logs)
        best = self.best
        if (best is not None and best != before and not math.isnan(float(best))
                and _is_chief(self.model)):
            _write_json_atomically(
                self.info_path,
                {"monitor": self.monitor, "value": float(best), "epoch": epoch + 1},
            )


def backup_callbacks(
    directory,
    monitor: str = "val_loss",
    save_freq="epoch",
    mode: str = "auto",
    delete_backup: bool = True,
) -> list:
    """Atomic backups plus a best-model checkpoint, laid out under one folder.

    Call ``fit`` with the same ``directory`` after a crash and training resumes from the last
    backup (see the module docstring for what is exact), its best value included. A run that
    finds no backup starts afresh, best model included; a finished run's ``best.keras`` and
    ``best.json`` there are renamed to ``best-previous-N.keras``/``.json``. Under ``MultiWorkerMirroredStrategy``
    give every worker the same ``directory`` on a shared file system: the chief writes, all
    restore from it. The model must be built (called on a batch, or given an ``Input``) before
    ``fit``, as ``BackupAndRestore`` requires.

    Args:
        directory: The folder (created when missing).
        monitor: The logs key that defines the best model. Defaults to "val_loss" (needs
            validation data; use "loss" without).
        save_freq: "epoch", or a number of batches between backups. Defaults to "epoch".
        mode: "min", "max" or "auto". Defaults to "auto".
        delete_backup: Delete ``backup/`` when fit() ends normally. Defaults to True.

    Returns:
        [AtomicBackupAndRestore, BestModelCheckpoint]: put them in ``fit(callbacks=...)``.

    Raises:
        InvalidArgumentError: save_freq is neither "epoch" nor a positive integer, or mode is
            not one of "min", "max", "auto".

    Example:
        >>> model.fit(ds, validation_data=val, epochs=10, callbacks=backup_callbacks("run1"))
    """
    if save_freq != "epoch":
        whole_number(save_freq, "save_freq", 1, "'epoch' or a positive number of batches")
    if mode not in ("min", "max", "auto"):
        raise InvalidArgumentError(f"mode must be 'min', 'max' or 'auto', got {mode!r}")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    restore = AtomicBackupAndRestore(root / BACKUP_FOLDER, save_freq=save_freq,
                                     delete_checkpoint=delete_backup)
    return [
        restore,
        BestModelCheckpoint(root / BEST_MODEL_FILE, root / BEST_INFO_FILE, monitor, mode,
                            backup=restore),
    ]
