"""Resolve what a user points at (a dataset folder, one shard, a glob) into TFRecord files."""

from __future__ import annotations

import glob
from pathlib import Path

from tfopt.errors import DatasetError
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME, Manifest, read_manifest

_GZIP_MAGIC = b"\x1f\x8b"


def tf_compression_type(compression: str | None) -> str:
    """TensorFlow's ``compression_type`` for a manifest's compression (``"gzip"`` or None)."""
    return "GZIP" if compression == "gzip" else ""


def is_gzip(path: Path) -> bool:
    """True when the file starts with the GZIP magic bytes (TFRecord GZIP files do)."""
    with open(path, "rb") as handle:
        return handle.read(2) == _GZIP_MAGIC


def resolve_files(path) -> tuple[list[Path], Manifest | None, list[str]]:
    """The files of a dataset, its manifest if it has one, and notes for the user.

    Args:
        path: A dataset folder (with or without a manifest), one TFRecord file, or a glob such
            as ``"data/train-*.tfrecord"``.

    Raises:
        DatasetError: Nothing to read at ``path``.
    """
    text = str(path)
    notes: list[str] = []
    if any(char in text for char in "*?["):
        files = [Path(name) for name in sorted(glob.glob(text)) if Path(name).is_file()]
        if not files:
            raise DatasetError(f"{text}: no files match this pattern")
        return files, None, notes
    path = Path(text)
    if not path.exists():
        raise DatasetError(f"{path}: does not exist")
    if path.is_file():
        if path.name == MANIFEST_NAME:
            return resolve_files(path.parent)
        return [path], None, notes
    if (path / MANIFEST_NAME).exists():
        manifest = read_manifest(path)
        return [path / shard.file for shard in manifest.shards], manifest, notes
    if (path / JOURNAL_NAME).exists():
        notes.append("incomplete dataset: a conversion was interrupted before writing "
                     f"{MANIFEST_NAME}; finish it with 'tfopt convert ... --resume'")
    else:
        notes.append(f"no {MANIFEST_NAME}: not a tfopt dataset, or an incomplete one")
    files = sorted(entry for entry in path.iterdir()
                   if entry.is_file() and not entry.name.startswith(".")
                   and entry.name != MANIFEST_NAME)
    if not files:
        if (path / JOURNAL_NAME).exists():  # killed before its first shard: still say what it is
            raise DatasetError(f"{path}: incomplete dataset: a conversion was interrupted before "
                               "it finished a shard; finish it with 'tfopt convert ... --resume'")
        raise DatasetError(f"{path}: no files in this folder")
    return files, None, notes
