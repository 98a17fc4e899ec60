"""Whether a conversion's source stayed put while it was read.

A source rewritten during a conversion (a CSV saved again by an editor, a NumPy file replaced
by the next export) would give a dataset mixing rows of both versions, which verify cannot
tell from a good one: its shards are whole and their checksums right. The source's files are
stat'ed before the scan (size, modification time, inode), those of tables and arrays sampled
too (a hash of a few blocks of each), and checked again before the manifest is written; any difference fails the
conversion with one line, and nothing of it is kept. A file deleted while a worker reads it is
told the same way, rather than as the worker's traceback.

The sample catches a rewrite in place that keeps the size and puts the modification time back
(``os.utime``, ``touch -r``, a copy that keeps times), where it changes a sampled block; a CSV
is checked whole besides, row by row as the workers read it (each row against the CRC-32 the
scan took: :mod:`tfopt.records.sources.csv_tables`). Image folders are not sampled: each image
is read whole, by one worker at one moment, so a rewrite gives the old image or the new one,
never a record of both; and sampling would cost a folder of a million images an open and a
read of every image twice over, a share of a conversion that stores small images as they are
(docs/benchmarks.md), for a rewrite that keeps an image's exact byte count, which a re-encode
almost never does.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from tfopt.records.sources.shared import source_changed

__all__ = ["SourceSnapshot"]

# What the content check reads of each file of a table or array source (a CSV, an .npz, an
# HDF5 file, .npy files, Parquet parts): 16 blocks of 64 KiB spread over the file, its first and
# last bytes included, 1 MiB a file (a file smaller than that is read whole): milliseconds,
# against the minutes that converting a file of hundreds of megabytes takes.
_BLOCKS = 16
_BLOCK_BYTES = 64 << 10


def _state(path: str) -> tuple[int, int, int, int] | None:
    """Size, modification time, inode and file type (links followed); None if gone."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns, status.st_ino, stat.S_IFMT(status.st_mode)


def _block_offsets(size: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of the sampled blocks: evenly spread, the first and last included."""
    if size <= _BLOCKS * _BLOCK_BYTES:
        return [(0, size)]
    last = size - _BLOCK_BYTES
    return [(round(last * index / (_BLOCKS - 1)), _BLOCK_BYTES) for index in range(_BLOCKS)]


def _sample(path: str, state: tuple[int, int, int, int]) -> bytes | None:
    """A hash of the sampled blocks of a regular file; None for anything else, or a file that
    cannot be read (which the stat comparison covers). Only a regular file is opened (a device
    may have side effects), non-blocking and checked again on the open descriptor: a named
    pipe put in its place cannot block the open."""
    if not stat.S_ISREG(state[3]):
        return None
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_ino != state[2]:
            return None
        digest = hashlib.blake2b(digest_size=16)
        for offset, length in _block_offsets(state[0]):
            digest.update(os.pread(descriptor, length, offset))
        return digest.digest()
    except OSError:
        return None
    finally:
        os.close(descriptor)


class SourceSnapshot:
    """The source's files with their size, modification time, inode and, where ``sampled``, a
    hash of sampled blocks of each, taken now.

    Args:
        src: The source: a file, or a folder (every file under it).
        sampled: Sample each file's content: for tables and arrays, read in parts over the
            conversion; not for an image folder (see the module's docstring).
    """

    def __init__(self, src: Path, *, sampled: bool):
        self.src = Path(src)
        if self.src.is_dir():
            paths = [os.path.join(folder, name)
                     for folder, _, names in os.walk(self.src, followlinks=False)
                     for name in names]
        else:
            paths = [str(self.src)]
        self._states = {path: state for path in paths if (state := _state(path)) is not None}
        self._samples = ({path: _sample(path, state) for path, state in self._states.items()}
                         if sampled else None)

    def change(self) -> str | None:
        """What changed since the snapshot (the first file found), in words; None if nothing.
        Files added since are not the conversion's: they are ignored."""
        for path, before in self._states.items():
            now = _state(path)
            if now is None:
                return f"{path} was deleted"
            if now != before:
                what = ("its size changed" if now[0] != before[0] else
                        "it was replaced" if now[2] != before[2] else "it was written to")
                return f"{path} changed ({what})"
            if self._samples is not None and _sample(path, now) != self._samples[path]:
                return (f"{path} changed (its bytes differ, though its size and modification "
                        "time do not: it was written to, and its time put back)")
        return None

    def check(self) -> None:
        """Raise where the source changed.

        Raises:
            tfopt.errors.SourceError: The first change, and what to do.
        """
        change = self.change()
        if change is not None:
            raise source_changed(self.src, change)
