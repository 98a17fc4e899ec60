"""The best model of a training, kept across restarts (:class:`BestModelCheckpoint`).

Keras's ``ModelCheckpoint(save_best_only=True)`` forgets its best value when the process
restarts, so a resumed run overwrites a better model with its first epoch's; it also writes
in place and from every worker. This one reads its value back, writes atomically, and writes
from the chief alone (``docs/train.md``, "Backups").
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from pathlib import Path

import keras

from tfopt._files import read_small_json
from tfopt._internals.keras_model import metric_direction
from tfopt.errors import InvalidArgumentError
from tfopt.train.backup_io import (
    is_chief,
    save_and_discard,
    save_atomically,
    write_json_atomically,
)

logger = logging.getLogger("tfopt")

__all__ = ["BestModelCheckpoint", "free_previous_number", "keep_as_previous", "previous_name"]

MAX_INFO_BYTES = 1 << 20  # best.json: a monitor, a value and an epoch


def previous_name(path: Path, number: int) -> Path:
    """``best.keras`` -> ``best-previous-1.keras``: the name keeps the suffix Keras checks."""
    return path.with_name(f"{path.stem}-previous-{number}{path.suffix}")


def free_previous_number(paths) -> int:
    """The first N for which no ``<name>-previous-N`` of ``paths`` exists (a link counts):
    one N names a run's files together."""
    number = 1
    while any(os.path.lexists(previous_name(Path(path), number)) for path in paths):
        number += 1
    return number


def keep_as_previous(paths, number: int) -> list[str]:
    """Rename each of ``paths``, in order, to ``<name>-previous-number``; the new names."""
    kept = []
    for path in paths:
        os.replace(path, previous_name(Path(path), number))
        kept.append(previous_name(Path(path), number).name)
    return kept


class BestModelCheckpoint(keras.callbacks.Callback):
    """``ModelCheckpoint(save_best_only=True)`` that remembers its best value across restarts.

    Saves the whole model to ``filepath`` when ``monitor`` improves and records the value and
    epoch in ``info_path`` (JSON); both are written atomically, and under several workers by
    the chief alone (the others save into a temporary folder: their reads of the variables
    may be collective ops). On
    creation it reads ``info_path`` back, when its monitor matches, so a restarted run only
    replaces the file with a better model. As Keras's checkpoint does, an epoch whose logs lack
    ``monitor`` (or hold a non-scalar) is saved with a warning, and ``filepath`` may hold
    ``{epoch}`` and logs keys to format.

    With ``backup`` (as ``backup_callbacks`` pairs them) the value read back is kept only
    when that backup has something to resume, decided at the start of the first ``fit``: a new
    run (no backup) starts its best afresh and the chief renames the previous run's files to
    ``<stem>-previous-N<suffix>`` (the first free N) so that nothing is lost.

    Args:
        filepath: Where the best model goes (``.keras``).
        info_path: Where its value goes (``.json``).
        monitor: The logs key to watch. Defaults to "val_loss".
        mode: "min", "max" or "auto" (Keras's rule: min for losses, else the direction the
            compiled metric of that name declares). Defaults to "auto".
        backup: The ``AtomicBackupAndRestore`` of the same run, or None (the best value
            in ``info_path`` always counts). Defaults to None.

    Raises:
        InvalidArgumentError: ``filepath`` does not end in ``.keras`` or ``.h5``, or ``mode``
            is not one of "min", "max", "auto".
        ValueError: (at the first epoch's end) mode "auto" and no direction known for
            ``monitor``.

    Example:
        >>> BestModelCheckpoint("run/best.keras", "run/best.json", monitor="val_accuracy")
    """

    def __init__(self, filepath, info_path, monitor: str = "val_loss", mode: str = "auto",
                 backup=None):
        super().__init__()
        self.filepath = os.fspath(filepath)
        if not self.filepath.endswith((".keras", ".h5")):
            raise InvalidArgumentError(f"filepath={self.filepath!r}: expected a path ending in "
                                       "'.keras' (Keras's model format)")
        if mode not in ("min", "max", "auto"):
            raise InvalidArgumentError(f"mode must be 'min', 'max' or 'auto', got {mode!r}")
        self.info_path = Path(info_path)
        self.monitor = monitor
        self.mode = mode
        self.backup = backup
        self.best: float | None = None
        self._higher_is_better: bool | None = None  # decided once the metrics are built
        self._first_fit = True
        self._restore_best()

    def on_train_begin(self, logs=None):
        if self._first_fit and self.backup is not None and not self.backup.has_backup():
            self._start_afresh()
        # later fit() calls with this callback continue its best, as Keras's checkpoint does
        self._first_fit = False

    def _start_afresh(self) -> None:
        """A new run: forget the best value read back and move the old run's files aside.

        Every worker forgets (they must decide alike); the chief alone renames.
        """
        self.best = None
        model_path = Path(self.filepath)
        old = [path for path in (model_path, self.info_path) if path.exists()]
        if not old or not is_chief(self.model):
            return
        number = free_previous_number((model_path, self.info_path))
        # the model first: best.json left alone never names a model that is not there
        kept = keep_as_previous(old, number)
        logger.warning(
            "%s holds a finished run's best model and no backup to resume: this run tracks "
            "its own best; the previous files are now %s", model_path.parent, ", ".join(kept))

    def _restore_best(self) -> None:
        if not (self.info_path.exists() and Path(self.filepath).exists()):
            return
        try:
            info = read_small_json(self.info_path, MAX_INFO_BYTES)
        except (OSError, ValueError) as error:  # SmallFileError is a ValueError
            logger.warning("%s unreadable (%s); the best value starts afresh", self.info_path,
                           error)
            return
        value = info.get("value")
        if info.get("monitor") == self.monitor and isinstance(value, (int, float)):
            self.best = float(value)
            logger.info("best model so far: %s = %g at epoch %s", self.monitor, self.best,
                        info.get("epoch"))

    def _direction(self) -> bool:
        """Whether a higher ``monitor`` is better, by Keras's rule for ``mode``."""
        if self.mode != "auto":
            return self.mode == "max"
        name = self.monitor.removeprefix("val_")
        direction = metric_direction(self.model, name)
        if direction is not None:
            return direction == "up"
        if name == "loss":
            return False
        raise ValueError(
            f"BestModelCheckpoint: monitor={self.monitor!r}: no direction is known for that "
            "metric; pass mode='max' to keep the highest value or mode='min' the lowest")

    def _improved(self, logs) -> bool:
        """Whether this epoch's model is to be saved (and ``best`` updated)."""
        current = logs.get(self.monitor)
        if current is None:
            warnings.warn(f"Can save best model only with {self.monitor} available.",
                          stacklevel=3)
            return True
        if len(getattr(current, "shape", None) or ()) > 0:
            warnings.warn(f"Can save best model only when `monitor` is a scalar value. "
                          f"Received: {current}. Falling back to `save_best_only=False`.",
                          stacklevel=3)
            return True
        if self.best is not None and not (current > self.best if self._higher_is_better
                                          else current < self.best):
            return False
        self.best = current
        return True

    def _file_path(self, epoch: int, logs) -> str:
        try:
            return self.filepath.format(epoch=epoch + 1, **logs)
        except KeyError as error:
            raise KeyError(f'Failed to format this callback filepath: "{self.filepath}". '
                           f"Reason: {error}") from None

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self._higher_is_better is None:
            self._higher_is_better = self._direction()
        before = self.best
        if not self._improved(logs):
            return
        # every worker decides alike (the logs are reduced over workers, best.json is
        # shared), the chief alone keeps the file: the others' saves read the variables too
        filepath = self._file_path(epoch, logs)
        if is_chief(self.model):
            save_atomically(lambda path: self.model.save(path, overwrite=True), Path(filepath))
        else:
            save_and_discard(self.model.save, Path(filepath).name)
        best = self.best
        if (best is not None and best != before and not math.isnan(float(best))
                and is_chief(self.model)):
            write_json_atomically(
                self.info_path,
                {"monitor": self.monitor, "value": float(best), "epoch": epoch + 1},
            )
