"""How a backup's files reach the disk without a full disk crashing the process.

HDF5 writing a weights file straight to a full disk fails with errno 28 inside its C library,
and h5py's clean-up of the half-open file then dies by SIGSEGV (Keras 3.15, h5py 3.14). Here
the weights are serialised into memory (Keras's own HDF5 store over an ``io.BytesIO``: the same
file ``save_weights`` writes) and written with plain ``os.write``, where ENOSPC is an
``OSError``: the caller gets one :class:`BackupWriteError` naming the folder, the temporary
file is removed, and the previous backup is untouched. Cost: the weights file is held in
memory once while it is written (``docs/train.md``, "Backups").
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from pathlib import Path

from tfopt._files import atomic_path
from tfopt._internals.keras_model import weights_file_bytes
from tfopt.errors import TfoptError
from tfopt.train.backup_records import temp_name

__all__ = ["BackupWriteError", "is_chief", "save_and_discard", "save_atomically", "weights_bytes",
           "write_bytes_atomically", "write_json_atomically"]

# room left beyond the file itself: the folder entry, the record written after it, and the
# file system's own blocks (ext4 and tmpfs allocate in 4 KiB pages)
_SPACE_MARGIN = 64 << 10


class BackupWriteError(TfoptError):
    """A backup file could not be written (full disk, quota, read-only folder, I/O error)."""


def weights_bytes(model) -> bytes:
    """The bytes ``model.save_weights("x.weights.h5")`` would write, made in memory.

    Made in memory so that the space is checked before a byte is written; every variable is
    read as ``save_weights`` reads it, so a worker's part in collective reads is the same.
    """
    if not model.built:
        raise ValueError(f"model {model.name!r} is not built: build it before saving weights")
    return weights_file_bytes(model)


def _failure(folder: Path, path: Path, error: OSError, size: int) -> BackupWriteError:
    reason = error.strerror or str(error)
    hint = {errno.ENOSPC: "free space on that disk or give another directory",
            errno.EDQUOT: "raise the quota or give another directory",
            errno.EROFS: "the folder is read-only: give a writable directory",
            errno.EACCES: "the folder is not writable by this user"}.get(
                error.errno, "check the disk")
    return BackupWriteError(
        f"{folder}: cannot write {path.name} ({size} bytes): {reason}; nothing was replaced "
        f"and the previous backup there is kept. Hint: {hint}.")


def write_bytes_atomically(path: Path, data: bytes, temp: Path | None = None) -> None:
    """Write ``data`` to ``path`` (temporary name, fsync, rename), checking the space first.

    Raises:
        BackupWriteError: too little free space for ``data``, or the write failed (ENOSPC,
            EDQUOT, EIO...); the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(folder).free
    except OSError as error:
        raise _failure(folder, path, error, len(data)) from None
    if free < len(data) + _SPACE_MARGIN:
        raise BackupWriteError(
            f"{folder}: no space for {path.name}: it needs {len(data)} bytes and "
            f"{free} are free; nothing was replaced and the previous backup there is kept. "
            "Hint: free space on that disk or give another directory.")
    try:
        with atomic_path(path, temp) as tmp:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
    except OSError as error:  # atomic_path removed the temporary file
        raise _failure(folder, path, error, len(data)) from None


def write_json_atomically(path: Path, data: dict) -> None:
    """``data`` as JSON in ``path``: a complete file or none (a crash mid-write leaves no half
    file, a full disk is one :class:`BackupWriteError` naming the folder)."""
    write_bytes_atomically(path, json.dumps(data).encode(),
                           path.with_name(temp_name(path.name)))


def save_atomically(save, path: Path) -> None:
    """``save(temporary path)``, then fsync and rename it to ``path``; on failure no trace.

    The temporary name keeps the suffix Keras checks (``.keras``, ``.weights.h5``). An
    ``OSError`` (a full disk) becomes one :class:`BackupWriteError` naming the folder.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path, path.with_name(temp_name(path.name))) as tmp:
            save(str(tmp))
    except OSError as error:
        raise BackupWriteError(
            f"{path.parent}: cannot write {path.name}: {error.strerror or error}; nothing was "
            "replaced. Hint: free space on that disk or give another directory.") from None


def save_and_discard(save, name: str) -> None:
    """``save(path)`` into a private temporary folder, deleted at once: a non-chief worker's
    part in a save whose variable reads may be collective ops."""
    scratch = tempfile.mkdtemp(prefix="tfopt-backup-")
    try:
        save(os.path.join(scratch, name))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def is_chief(model) -> bool:
    """Whether this process writes checkpoints: True on one machine; under
    ``MultiWorkerMirroredStrategy`` only for task "chief", or worker 0 when there is none."""
    try:
        strategy = model.distribute_strategy
    except AttributeError:  # not the TensorFlow backend: no strategy, one process
        return True
    return bool(strategy.extended.should_checkpoint)
