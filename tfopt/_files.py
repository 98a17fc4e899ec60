"""Durable file writing: a file appears under its final name only when it is complete.

Used by every module that writes (manifests, shards, demo images, monitor logs). The recipe is
the classic one: write to a temporary name in the same folder (so ``os.replace`` is a rename on
one file system, atomic on POSIX), flush and fsync the file, rename, then fsync the folder so the
rename itself survives a power cut.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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


class SmallFileError(ValueError):
    """What :func:`read_small_json` found wrong with a file: ``problem`` is the words after
    ``path:`` (the caller adds what the file is and what to do)."""

    def __init__(self, path: Path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


def read_small_json(path, max_bytes: int, *, within=None):
    """The JSON value of a small record file (a manifest, a backup record, a pointer), read
    with every bound a hostile file could break: a regular file (a named pipe, a device or
    ``/dev/zero`` behind a link is refused without blocking or reading it), inside ``within``
    where given (a link out of the folder is refused), at most ``max_bytes``, nested no deeper
    than Python's parser can go.

    Raises:
        FileNotFoundError: The file does not exist.
        SmallFileError: Anything else that makes it unusable, in words.
    """
    path = Path(path)
    if within is not None:
        inside = os.path.realpath(within)
        if os.path.commonpath([os.path.realpath(path), inside]) != inside:
            raise SmallFileError(path, f"is a link out of {within} (to "
                                       f"{os.path.realpath(path)!r}); expected a file there")
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError as error:
        raise SmallFileError(path, f"cannot be read ({error.strerror or error})") from None
    with open(descriptor, "rb", closefd=True) as handle:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            kind = special_kind(status.st_mode) or "a folder"
            raise SmallFileError(path, f"is {kind}, not a regular file")
        if status.st_size > max_bytes:
            raise SmallFileError(path, f"holds {status.st_size:,} bytes, more than such a "
                                       f"file's {max_bytes:,}")
        try:
            data = handle.read(max_bytes + 1)
        except OSError as error:
            raise SmallFileError(path, f"cannot be read ({error.strerror or error})") from None
    if len(data) > max_bytes:  # grew since its size was read
        raise SmallFileError(path, f"holds more than such a file's {max_bytes:,} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise SmallFileError(path, "is JSON nested too deeply to read") from None
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError
        raise SmallFileError(path, f"not JSON ({error})") from None
