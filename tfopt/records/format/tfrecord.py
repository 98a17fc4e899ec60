"""TFRecord files: find them, tell their compression, check their headers, count records.

What a user points at (a dataset folder, one shard, a glob) resolves into TFRecord files here;
``inspect``, ``verify`` and the pipelines read them through these functions.

Example:
    >>> files, manifest, notes = resolve_files("shards/")
    >>> compression = detect_compression(files, manifest)
    >>> sum(count_records(file, compression) for file in files)
    27
"""

from __future__ import annotations

import glob
import gzip
import logging
import re
import struct
import zlib
from pathlib import Path

from tfopt._files import special_kind
from tfopt.errors import DatasetError
from tfopt.records.format.framing import RecordError, masked_crc32c, read_records
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME, Manifest, read_manifest

logger = logging.getLogger("tfopt")

_GZIP_MAGIC = b"\x1f\x8b"


def tf_compression_type(compression: str | None) -> str:
    """TensorFlow's ``compression_type`` for a manifest's compression (``"gzip"`` or None)."""
    return "GZIP" if compression == "gzip" else ""


def is_gzip(path: Path) -> bool:
    """True when the file starts with the GZIP magic bytes (TFRecord GZIP files do)."""
    with open(path, "rb") as handle:
        return handle.read(2) == _GZIP_MAGIC


def detect_compression(files: list[Path], manifest: Manifest | None) -> str | None:
    """``"gzip"`` or None: the manifest's, else told from the files' first bytes.

    Raises:
        tfopt.errors.DatasetError: Some files are GZIP and some not.
    """
    if manifest is not None:
        return manifest.compression
    gzipped = {file: is_gzip(file) for file in files}
    if len(set(gzipped.values())) > 1:
        plain = [str(file) for file, flag in gzipped.items() if not flag][:2]
        raise DatasetError(f"mixed compression: some files are GZIP and some not (e.g. {plain}); "
                           "inspect them separately")
    return "gzip" if next(iter(gzipped.values())) else None


def resolve_files(path) -> tuple[list[Path], Manifest | None, list[str]]:
    """The files of a dataset, its manifest if it has one, and notes for the user.

    A folder without a manifest gives its TFRecord files (see :func:`is_tfrecord_file`); the
    other files are named in a note.

    Args:
        path: A dataset folder (with or without a manifest), one TFRecord file, or a glob such
            as ``"data/train-*.tfrecord"``.

    Raises:
        tfopt.errors.DatasetError: Nothing to read at ``path``, or a folder without a manifest that
            holds no TFRecord files.
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
    if not path.is_dir():  # a named pipe or a device: reading one would block or never end
        kind = special_kind(path.stat().st_mode) or "a special file"
        raise DatasetError(f"{path}: is {kind}, not a TFRecord file or a dataset folder")
    if (path / MANIFEST_NAME).exists():
        manifest = read_manifest(path)
        return [path / shard.file for shard in manifest.shards], manifest, notes
    if (path / JOURNAL_NAME).exists():
        notes.append("incomplete dataset: a conversion was interrupted before writing "
                     f"{MANIFEST_NAME}; finish it with 'tfopt convert ... --resume'")
    else:
        notes.append(f"no {MANIFEST_NAME}: not a tfopt dataset, or an incomplete one")
    try:
        files = sorted(entry for entry in path.iterdir()
                       if entry.is_file() and not entry.name.startswith(".")
                       and entry.name != MANIFEST_NAME)
    except OSError as error:
        raise DatasetError(f"{path}: cannot be listed ({error.strerror or error})") from None
    if not files:
        if (path / JOURNAL_NAME).exists():  # killed before its first shard: still say what it is
            raise DatasetError(f"{path}: incomplete dataset: a conversion was interrupted before "
                               "it finished a shard; finish it with 'tfopt convert ... --resume'")
        raise DatasetError(f"{path}: no files in this folder")
    # only its TFRecord files: a README or a label map beside foreign shards is no shard
    return _tfrecord_files_of_folder(path, files, notes), None, notes


# Names of TFRecord files: by extension (compressed too), the tfds layout
# (name-train.tfrecord-00000-of-00010) and the Model Garden's (train-00000-of-01024).
_TFRECORD_NAME = re.compile(
    r"(\.(tfrecords?|tfrec|tfr|records?)(\.(gz|gzip|zlib))?$)|(\.tfrecords?-\d+-of-\d+$)"
    r"|(-\d+-of-\d+(\.[a-z]+)?$)", re.IGNORECASE)


def is_tfrecord_file(path) -> bool:
    """Whether a file is meant as TFRecord: its name says so, or it starts with a record header.

    A TFRecord record starts with its length (8 bytes) and the masked CRC-32C of that length (4
    bytes), so a text or other file fails the check; an empty file is an empty TFRecord file.
    A file named as TFRecord is taken whatever it holds, so that a damaged shard is reported.
    """
    path = Path(path)
    if _TFRECORD_NAME.search(path.name):
        return True
    try:
        with open(path, "rb") as handle:
            head = handle.read(12)
            if head[:2] == b"\x1f\x8b":  # GZIP: the header of the decompressed stream
                handle.seek(0)
                with gzip.GzipFile(fileobj=handle) as stream:
                    head = stream.read(12)
    except (OSError, EOFError, zlib.error):
        return False
    if not head:
        return True
    if len(head) < 12:
        return False
    (masked,) = struct.unpack("<I", head[8:])
    return masked == _masked_crc32c(head[:8])


def _masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of ``data``."""
    return masked_crc32c(data)


def _tfrecord_files_of_folder(path: Path, files: list[Path], notes: list[str]) -> list[Path]:
    """The TFRecord files of a folder without a manifest; the others are named in a note."""
    kept, others = [], []
    for file in files:  # one pass: a membership test against kept was quadratic in the files
        if is_tfrecord_file(file):
            kept.append(file)
        else:
            others.append(file.name)
    shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
    if not kept:
        raise DatasetError(f"{path}: no TFRecord files in this folder ({len(others)} other "
                           f"file(s): {shown})")
    if others:
        notes.append(f"not read: {len(others)} file(s) that are not TFRecord files (neither "
                     f"a TFRecord name nor a record header): {shown}")
    if not (path / JOURNAL_NAME).exists():  # not an interrupted conversion
        notes.append(f"pipelines read a folder only with its manifest; {folder_hint(path, kept)}")
    return kept


def manifest_listing(files) -> tuple[Manifest | None, Path | None]:
    """The manifest (and its folder) that lists every one of ``files``, if there is one.

    Shards of a tfopt dataset named by a glob or a list rather than by their folder: the
    manifest beside them holds their schema (raw arrays, shapes) and counts. None unless all
    files lie in one folder whose readable manifest lists each of them.
    """
    folders = {Path(file).resolve().parent for file in files}
    if len(folders) != 1:
        return None, None
    folder = folders.pop()
    if not (folder / MANIFEST_NAME).is_file():
        return None, None
    try:
        manifest = read_manifest(folder)
    except DatasetError as error:
        logger.warning("%s; the schema is inferred from the records instead", error)
        return None, None
    listed = {(folder / shard.file).resolve() for shard in manifest.shards}
    unlisted = [file for file in files if Path(file).resolve() not in listed]
    if unlisted:
        logger.info("%s is not listed in %s: the schema is inferred from the records",
                    unlisted[0], folder / MANIFEST_NAME)
        return None, None
    return manifest, folder


def folder_hint(folder, files: list[Path] | None = None) -> str:
    """How to read the TFRecord files of a folder without a manifest: a glob that names them."""
    folder = Path(folder)
    if files is None:
        files = sorted(entry for entry in folder.iterdir() if entry.is_file()
                       and not entry.name.startswith(".") and is_tfrecord_file(entry))
    if not files:
        return "it holds no TFRecord files"
    wanted = sorted(str(file) for file in files)
    patterns = [str(folder / "*-of-*")]
    if len({file.suffix for file in files}) == 1 and files[0].suffix:
        patterns.insert(0, str(folder / f"*{files[0].suffix}"))
    for pattern in patterns:
        if sorted(glob.glob(pattern)) == wanted:
            return (f"for TFRecord files written elsewhere, pass the glob '{pattern}' "
                    f"({len(files)} file(s)) or a list of files")
    return f"for TFRecord files written elsewhere, pass a list of its {len(files)} TFRecord files"


def count_records(file: Path, compression: str | None) -> int:
    """Exact record count of one file, every CRC checked.

    Like TensorFlow's reader, fewer bytes than a record header after the last whole record end
    the file without an error (``verify`` reports them).

    Raises:
        tfopt.records.format.framing.RecordError: A record cannot be read.
    """
    count = 0
    try:
        for _ in read_records(file, compression):
            count += 1
    except RecordError as error:
        if error.kind != "trailing":
            raise
    return count
