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
import io
import os
import shutil
from pathlib import Path

from tfopt._files import atomic_path
from tfopt.errors import TfoptError

__all__ = ["BackupWriteError", "weights_bytes", "write_bytes_atomically"]

# room left beyond the file itself: the folder entry, the record written after it, and the
# file system's own blocks (ext4 and tmpfs allocate in 4 KiB pages)
_SPACE_MARGIN = 64 << 10


class BackupWriteError(TfoptError):
    """A backup file could not be written (full disk, quota, read-only folder, I/O error)."""


def weights_bytes(model) -> bytes:
    """The bytes ``model.save_weights("x.weights.h5")`` would write, made in memory.

    Uses Keras's ``H5IOStore`` over ``io.BytesIO`` and its ``_save_state`` (private in Keras
    3.14 and 3.15, which ``scripts/test_floor.sh`` runs): every variable is read as
    ``save_weights`` reads it, so a worker's part in collective reads is the same.
    """
    if not model.built:
        raise ValueError(f"model {model.name!r} is not built: build it before saving weights")
    from keras.src.saving import saving_lib

    buffer = io.BytesIO()
    store = saving_lib.H5IOStore(buffer, mode="w")
    try:
        saving_lib._save_state(model, weights_store=store, assets_store=None, inner_path="",
                               visited_saveables=set())
    finally:
        store.close()
    return buffer.getvalue()


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
