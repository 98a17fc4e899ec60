"""Whether a conversion's source stayed put while it was read.

A source rewritten during a conversion (a CSV saved again by an editor, a NumPy file replaced
by the next export) would give a dataset mixing rows of both versions, which verify cannot
tell from a good one: its shards are whole and their checksums right. The source's files are
stat'ed before the scan (size, modification time, inode) and again before the manifest is
written; any difference fails the conversion with one line, and nothing of it is kept. A file
deleted while a worker reads it is told the same way, rather than as the worker's traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from tfopt.errors import SourceError

__all__ = ["SourceSnapshot"]


def _state(path: str) -> tuple[int, int, int] | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_size, status.st_mtime_ns, status.st_ino


class SourceSnapshot:
    """The source's regular files with their size, modification time and inode, taken now."""

    def __init__(self, src: Path):
        self.src = Path(src)
        if self.src.is_dir():
            paths = [os.path.join(folder, name)
                     for folder, _, names in os.walk(self.src, followlinks=False)
                     for name in names]
        else:
            paths = [str(self.src)]
        self._states = {path: state for path in paths if (state := _state(path)) is not None}

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
        return None

    def check(self) -> None:
        """Raise where the source changed.

        Raises:
            tfopt.errors.SourceError: The first change, and what to do.
        """
        change = self.change()
        if change is not None:
            raise SourceError(self.src, f"the source changed while it was converted: {change}; "
                              "nothing of this conversion is kept (it would mix both "
                              "versions): convert again once the source stays put")
