"""Durable file writing: a file appears under its final name only when it is complete.

Used by every module that writes (manifests, shards, demo images, monitor logs). The recipe is
the classic one: write to a temporary name in the same folder (so ``os.replace`` is a rename on
one file system, atomic on POSIX), flush and fsync the file, rename, then fsync the folder so the
rename itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from pathlib import Path

TEMP_MARKER = ".tmp-"  # temporary files are named ".{final}.tmp-{pid}"; cleaners look for it
_HASH_CHUNK = 1 << 20  # 1 MiB reads keep hashing at disk speed without holding whole shards


def temp_path_for(final: Path) -> Path:
    """The temporary name used while ``final`` is being written (same folder, hidden)."""
    return final.with_name(f".{final.name}{TEMP_MARKER}{os.getpid()}")


def is_temp_file(path: Path) -> bool:
    return path.name.startswith(".") and TEMP_MARKER in path.name


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Persist a rename or a new file in ``folder`` (no-op where the OS cannot open folders)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(final: Path, temp: Path | None = None, *, durable: bool = True):
    """Yield a temporary path to write; on success it is fsynced and renamed to ``final``.

    On an exception the temporary file is removed and ``final`` is untouched. ``temp``, in
    the same folder, replaces the default name (:func:`temp_path_for`) where a writer checks
    the file's suffix (Keras: ``.keras``, ``.weights.h5``). ``durable=False`` skips both
    fsyncs: still whole or absent under its final name, but not kept through a power cut (for
    files cheaper to make again than to sync, such as demo images).

    Example:
        >>> with atomic_path(Path("out.bin")) as tmp:
        ...     tmp.write_bytes(b"data")
    """
    final = Path(final)
    tmp = Path(temp) if temp is not None else temp_path_for(final)
    try:
        yield tmp
        if durable:
            fsync_file(tmp)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(final.parent)


def atomic_write_bytes(final: Path, data: bytes) -> None:
    """Write ``data`` to ``final`` so that readers see either the old file or all of the new."""
    with atomic_path(final) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(data)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    with open(path, "rb") as handle:
        return sha256_stream(handle)[0]


def sha256_stream(handle, copy_to=None) -> tuple[str, int]:
    """(hex SHA-256, size) of what ``handle`` reads to its end, in 1 MiB chunks; each chunk is
    also written to ``copy_to`` when given (a file copied and checked in one pass)."""
    digest, size = hashlib.sha256(), 0
    while chunk := handle.read(_HASH_CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if copy_to is not None:
            copy_to.write(chunk)
    return digest.hexdigest(), size


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def special_kind(mode: int) -> str | None:
    """``"a named pipe (FIFO)"`` and the like for a file that is neither regular nor a folder
    (``os.stat(path).st_mode``); None for anything else."""
    return next((name for test, name in _SPECIAL_KINDS if test(mode)), None)
