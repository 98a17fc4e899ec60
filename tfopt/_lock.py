"""One writer per folder: an exclusive ``flock`` on the folder itself, held by a process.

The lock is the kernel's, on the folder's own descriptor: nothing is written into the folder,
and the lock goes with the process that holds it (kill -9 included), so a dead holder's lock
is taken over by the next run with no stale-lock guess. The holder is named from
``/proc/locks`` where the system has it (its pid and command line). Within one process a
folder is held once: a new holder in the same process (a notebook cell run again) takes the
lock over from the earlier one.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, folders unguarded
    fcntl = None

logger = logging.getLogger("tfopt")

__all__ = ["FolderBusyError", "FolderLock", "lock_folder", "lock_holder"]

_held: dict[tuple[int, int], FolderLock] = {}  # this process's locks, by (device, inode)
_guard = threading.Lock()


class FolderBusyError(Exception):
    """Raised by :func:`lock_folder` where another process holds the folder; the caller words
    the message (what the folder is, what to do)."""

    def __init__(self, folder: Path, holder: str):
        super().__init__(f"{folder}: held by {holder}")
        self.folder, self.holder = folder, holder


class FolderLock:
    """A held lock on a folder; :meth:`release` (or the process's end) frees it."""

    def __init__(self, folder: Path, fd: int | None, key: tuple[int, int] | None):
        self.folder, self._fd, self._key = folder, fd, key

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        with _guard:
            if self._key is not None and _held.get(self._key) is self:
                del _held[self._key]
            if self._fd is not None:
                os.close(self._fd)  # and with it the lock
                self._fd = None

    def _hand_over(self) -> int | None:
        fd, self._fd = self._fd, None
        return fd


def _command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()[:300]
    except OSError:
        return ""
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)


def lock_holder(folder: Path) -> str:
    """Who holds a flock on ``folder``: "process PID (COMMAND)" from ``/proc/locks``, or
    "another process" where the system does not say."""
    try:
        stat = os.stat(folder)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return "another process"
    inode = f":{stat.st_ino}"
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line starts "->"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(inode) \
                and fields[4].isdigit():
            pid = int(fields[4])
            if pid == os.getpid():
                continue
            command = _command_of(pid)
            return f"process {pid}" + (f" ({command})" if command else "")
    return "another process"


def lock_folder(folder, *, take_over: bool = True, required: bool = False) -> FolderLock:
    """Hold an exclusive lock on ``folder`` (which must exist) for this process.

    Args:
        folder: The folder.
        take_over: A lock this process already holds on the folder passes to the new holder
            (the earlier one no longer holds it). False: refused as another process's is.
        required: A file system that takes no locks is refused (``FolderBusyError``) rather
            than written unguarded with a warning.

    Raises:
        FolderBusyError: Another process (or, without ``take_over``, this one) holds it.
        FileNotFoundError: ``folder`` does not exist.
    """
    folder = Path(folder)
    if fcntl is None:
        return FolderLock(folder, None, None)
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    stat = os.fstat(fd)
    key = (stat.st_dev, stat.st_ino)
    with _guard:
        earlier = _held.get(key)
        if earlier is not None and take_over:
            os.close(fd)
            lock = FolderLock(folder, earlier._hand_over(), key)
            _held[key] = lock
            return lock
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno == errno.ENOLCK and not required:  # some NFS mounts take none
                logger.warning("%s: this file system takes no locks; nothing stops a second "
                               "run writing there at the same time", folder)
                return FolderLock(folder, None, None)
            holder = "this process" if earlier is not None else lock_holder(folder)
            raise FolderBusyError(folder, holder) from None
        lock = FolderLock(folder, fd, key)
        _held[key] = lock
        return lock
