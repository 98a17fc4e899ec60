"""Training that survives a crash: Keras ``BackupAndRestore`` wired with a best-model checkpoint.

Layout under ``directory``::

    backup/latest.weights.h5         model + optimizer state (BackupAndRestore), replaced as
    backup/training_metadata.json    training goes; deleted when fit() ends normally
    best.keras                       the best model so far by ``monitor`` (ModelCheckpoint)
    best.json                        {"monitor", "value", "epoch"} of best.keras

What Keras lacks and this adds: after a restart ``ModelCheckpoint`` forgets its best value
and would overwrite ``best.keras`` with the next epoch's model even if it is worse; the
checkpoint here reads ``best.json`` back so the best model survives the crash too.

Resuming: ``BackupAndRestore`` restores weights, optimizer state and the epoch counter, and
restarts that epoch from its first batch. With ``save_freq="epoch"`` and deterministic training
(seeded, ``tf.config.experimental.enable_op_determinism()``, no or seeded shuffling) the final
weights equal an uninterrupted run's (tested by killing a run with SIGKILL mid-epoch). With
``save_freq`` in batches the weights saved mid-epoch are restored but the epoch still starts
from its first batch, so its early batches are seen twice (Keras 3.15 records the batch but
does not skip to it), and the end of an epoch is not saved, so the metadata can name an epoch
that had finished. Prefer "epoch" unless epochs are long.

``best.keras`` is written by Keras in place (not through a temporary file); ``best.json`` is
written after it, atomically, so it never names a model that was not saved.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from tfopt._tf import import_tensorflow

import_tensorflow()
import keras  # noqa: E402 - after the quiet TensorFlow import

from tfopt.errors import InvalidArgumentError  # noqa: E402

logger = logging.getLogger("tfopt")

__all__ = ["BestModelCheckpoint", "backup_callbacks"]

BACKUP_FOLDER = "backup"
BEST_MODEL_FILE = "best.keras"
BEST_INFO_FILE = "best.json"


def _write_json_atomically(path: Path, data: dict) -> None:
    # complete file or none: a crash mid-write must not leave a half best.json
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as file:
        json.dump(data, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """``ModelCheckpoint(save_best_only=True)`` that remembers its best value across restarts.

    Saves the whole model to ``filepath`` when ``monitor`` improves and records the value and
    epoch in ``info_path`` (JSON, written atomically). On creation it reads ``info_path`` back,
    when its monitor matches, so a restarted run only replaces the file with a better model.

    Args:
        filepath: Where the best model goes (``.keras``).
        info_path: Where its value goes (``.json``).
        monitor: The logs key to watch. Defaults to "val_loss".
        mode: "min", "max" or "auto" (Keras's rule: max for accuracy-like names).
            Defaults to "auto".

    Example:
        >>> BestModelCheckpoint("run/best.keras", "run/best.json", monitor="val_accuracy")
    """

    def __init__(self, filepath, info_path, monitor: str = "val_loss", mode: str = "auto"):
        super().__init__(str(filepath), monitor=monitor, mode=mode, save_best_only=True)
        self.info_path = Path(info_path)
        self._restore_best()

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

    def on_epoch_end(self, epoch, logs=None):
        before = self.best
        super().on_epoch_end(epoch, logs)
        best = self.best
        if best is not None and best != before and not math.isnan(float(best)):
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
    """BackupAndRestore plus a best-model checkpoint, laid out under one folder.

    Call ``fit`` with the same ``directory`` after a crash and training resumes from the last
    backup (see the module docstring for what is exact). The model must be built (called on a
    batch, or given an ``Input``) before ``fit``, as ``BackupAndRestore`` requires.

    Args:
        directory: The folder (created when missing).
        monitor: The logs key that defines the best model. Defaults to "val_loss" (needs
            validation data; use "loss" without).
        save_freq: "epoch", or a number of batches between backups. Defaults to "epoch".
        mode: "min", "max" or "auto". Defaults to "auto".
        delete_backup: Delete ``backup/`` when fit() ends normally. Defaults to True.

    Returns:
        [BackupAndRestore, BestModelCheckpoint]: put them in ``fit(callbacks=...)``.

    Raises:
        InvalidArgumentError: save_freq is neither "epoch" nor a positive integer, or mode is
            not one of "min", "max", "auto".

    Example:
        >>> model.fit(ds, validation_data=val, epochs=10, callbacks=backup_callbacks("run1"))
    """
    if save_freq != "epoch" and (
        isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1
    ):
        raise InvalidArgumentError(
            f"save_freq must be 'epoch' or a positive number of batches, got {save_freq!r}"
        )
    if mode not in ("min", "max", "auto"):
        raise InvalidArgumentError(f"mode must be 'min', 'max' or 'auto', got {mode!r}")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    return [
        keras.callbacks.BackupAndRestore(
            str(root / BACKUP_FOLDER), save_freq=save_freq, delete_checkpoint=delete_backup
        ),
        BestModelCheckpoint(root / BEST_MODEL_FILE, root / BEST_INFO_FILE, monitor, mode),
    ]
