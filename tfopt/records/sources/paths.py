"""What a source path is, said before anything opens it: a regular file, a folder, or a problem.

``open()`` on a named pipe blocks until a writer appears (forever, and Ctrl-C waits with it), a
device can stream without end (``/dev/zero``) or have side effects, and a symbolic link can loop
or point nowhere. Every path a source reads is checked here first with ``os.stat``, and only
regular files are ever opened; the problem is worded for a ``file: problem`` line.

Example:
    >>> path_problem(Path("photos/cat/pipe.jpg"))
    'is a named pipe (FIFO), not a regular file; convert reads regular files only'
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from tfopt._files import special_kind
from tfopt.errors import SourceError

LOOPING_LINK = ("is a symbolic link that loops (it points back at itself, directly or through "
                "other links)")


class UnreadableFile(Exception):
    """A path that is not a regular file this process can read; ``reason`` says why."""

    def __init__(self, path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = str(path)
        self.reason = reason


def shown_name(name: str) -> str:
    """A file name as text that any output takes: its bytes read as UTF-8, each byte that is
    not UTF-8 written ``\\xNN``.

    Python gives a name that is not UTF-8 (or, under ``LANG=C`` with UTF-8 mode off, any name
    beyond ASCII) lone surrogates, which no UTF-8 encoder, JSON reader or terminal takes: a
    class folder named ``b'caf\\xe9'`` (Latin-1) ended convert in a UnicodeEncodeError.
    The same name gives the same text under every locale.

    Example:
        >>> shown_name(os.fsdecode(b"caf\\xe9"))
        'caf\\\\xe9'
    """
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def is_utf8_name(name: str) -> bool:
    """Whether a file name's bytes are UTF-8 (:func:`shown_name` keeps it as it is)."""
    try:
        os.fsencode(name).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def not_regular(mode: int) -> str:
    """The problem of a file that is neither a regular file nor a folder."""
    return (f"is {special_kind(mode) or 'a special file'}, not a regular file; convert reads "
            "regular files only")


def stat_problem(path, error: OSError) -> str:
    """What an ``os.stat`` failure on ``path`` means, for a ``path: problem`` line."""
    if error.errno == errno.ELOOP:
        return f"{LOOPING_LINK}; point it at a real file or folder"
    if error.errno == errno.ENOENT and os.path.islink(path):
        return f"is a symbolic link to {os.readlink(path)!r}, which does not exist"
    if error.errno == errno.ENOENT:
        return "does not exist"
    return f"cannot be read ({error.strerror})"


def path_status(path) -> os.stat_result:
    """``os.stat(path)`` (links followed), with a failure as :class:`UnreadableFile`."""
    try:
        return os.stat(path)
    except OSError as error:
        raise UnreadableFile(path, stat_problem(path, error)) from None


def path_problem(path) -> str | None:
    """Why ``path`` cannot be read as a regular file; None when it can be."""
    try:
        mode = path_status(path).st_mode
    except UnreadableFile as unreadable:
        return unreadable.reason
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    return not_regular(mode)


def source_is_folder(path) -> bool:
    """Whether a source path is a folder (True) or a regular file (False).

    Raises:
        SourceError: Anything else: missing, a broken or looping link, a named pipe, a device.
    """
    try:
        mode = path_status(path).st_mode
    except UnreadableFile as unreadable:
        raise SourceError(path, unreadable.reason) from None
    if stat.S_ISDIR(mode):
        return True
    if stat.S_ISREG(mode):
        return False
    raise SourceError(path, f"is {special_kind(mode) or 'a special file'}, neither a regular "
                      "file nor a folder; a source is a folder, or a .npz, .npy, .csv or .tsv "
                      "file")


def is_folder(path) -> bool:
    """True for a folder (or a link to one); False for anything else, a broken or looping link
    included (``DirEntry.is_dir`` raises on a looping link)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:
        return False


def is_regular_file(path) -> bool:
    """True for a regular file (or a link to one), as :func:`is_folder` for folders."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def list_folder(path) -> list[os.DirEntry]:
    """The entries of a folder, sorted by name; a folder that cannot be listed (permissions)
    as :class:`UnreadableFile`."""
    try:
        with os.scandir(path) as entries:
            return sorted(entries, key=lambda entry: entry.name)
    except OSError as error:
        raise UnreadableFile(path, stat_problem(path, error)) from None


def read_regular_file(path: Path) -> bytes:
    """The bytes of a regular file; anything else (a named pipe, a device, a socket, a looping
    link) as :class:`UnreadableFile`, without opening it.

    The file is opened non-blocking and checked again on the open descriptor: a pipe put in
    its place between the check and the open is caught there, and cannot block the open.
    """
    problem = path_problem(path)
    if problem:
        raise UnreadableFile(path, problem)
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise UnreadableFile(path, stat_problem(path, error)) from None
    with open(descriptor, "rb", closefd=True) as handle:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(path, not_regular(mode))
        try:
            return handle.read()
        except OSError as error:
            raise UnreadableFile(path, f"cannot be read ({error.strerror})") from None
