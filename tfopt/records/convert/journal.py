"""The journal of ``convert``: finished shards, appended and fsynced one line each, for ``--resume``.

Example:
    >>> journal = Journal(Path("shards") / JOURNAL_NAME)
    >>> fingerprint, results = journal.read()
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
from pathlib import Path

from tfopt._files import fsync_dir, sha256_file
from tfopt.errors import DatasetError
from tfopt.records.writer import ShardResult

logger = logging.getLogger("tfopt")


_JOURNAL_VERSION = 1
_REFUSED = (errno.EACCES, errno.EPERM, errno.EROFS)  # the journal's errors that are the user's


class Journal:
    """An append-only, fsynced record of finished shards, for ``--resume``."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> tuple[str | None, dict[str, ShardResult]]:
        if not self.path.exists():
            return None, {}
        fingerprint, results = None, {}
        with self._refused("read"):
            text = self.path.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line torn by a kill; its shard is simply redone
            if "fingerprint" in entry:
                fingerprint = entry["fingerprint"]
            elif "file" in entry:
                results[entry["file"]] = ShardResult.from_json(entry)
        return fingerprint, results

    def start(self, fingerprint: str, keep: bool) -> None:
        with self._refused("write"):
            if keep:
                if not self.path.read_bytes().endswith(b"\n"):
                    # a kill tore the last line: without a line break the next entry would
                    # join it and be lost too
                    with open(self.path, "ab") as handle:
                        handle.write(b"\n")
                return
            self.path.write_text(json.dumps({"journal": _JOURNAL_VERSION,
                                             "fingerprint": fingerprint}) + "\n",
                                 encoding="utf-8")
            self._sync()

    def append(self, result: ShardResult) -> None:
        with self._refused("write"), open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(result.to_json()) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    @contextlib.contextmanager
    def _refused(self, what: str):
        """A journal this process may not read or write (permissions, a read-only file system)
        as one line naming it; other errors (a full disk: convert keeps the finished shards
        for --resume) as they are."""
        try:
            yield
        except OSError as error:
            if error.errno not in _REFUSED:
                raise
            raise DatasetError(f"{self.path}: cannot {what} convert's journal ({error.strerror}); "
                               f"{self.path.parent} must be readable and writable by this "
                               "user") from None

    def _sync(self) -> None:
        with open(self.path, "rb") as handle:
            os.fsync(handle.fileno())
        fsync_dir(self.path.parent)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def resumable_results(journal: Journal, fingerprint: str, tasks, dst: Path) -> dict:
    """Journaled shards whose files still match their size and SHA-256."""
    old_fingerprint, results = journal.read()
    if old_fingerprint is None:
        return {}
    if old_fingerprint != fingerprint:
        raise DatasetError(
            f"{dst}: the interrupted conversion had another source or other options (seed, "
            "shards, split, compression...), or the input changed since (files added, removed "
            "or edited, modification times included); resume with the same source, input and "
            "options, or use --overwrite"
        )
    kept = {}
    planned = {task.file for task in tasks}
    for file, result in results.items():
        path = dst / file
        if file not in planned or not path.exists():
            continue
        if path.stat().st_size == result.num_bytes and sha256_file(path) == result.sha256:
            kept[file] = result
        else:
            logger.warning("%s: checksum differs from the journal; writing it again", path)
    return kept
