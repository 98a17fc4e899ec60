"""Where a dataset's TFRecord files are: which files, which split each belongs to, compression.

One resolution for every reader: the pipelines (``tfopt.data.source``), ``inspect`` and
``verify`` all call :func:`resolve_dataset`, so a dataset is read as the same files, split the
same way, with the same compression, or refused with the same error by all three.

The rule for a folder (``docs/records.md``): its ``manifest.json`` says everything; without one
(TFRecord files written by ``tf.io.TFRecordWriter``, TFDS, Model Garden, TFX) the splits are
told as TensorFlow's own tools name them: by each file's name (``train-00000-of-01024``,
``mnist-train.tfrecord-00000-of-00001``, ``validation.tfrecord.gz``) or, where the folder holds
no TFRecord files itself, by subfolder (``train/``, ``validation/``). Files of which no name
tells a split are one unsplit dataset; a folder that mixes the two is refused, naming both.

Example:
    >>> dataset = resolve_dataset("imagenet/")
    >>> dataset.layout, sorted(dataset.splits), dataset.compression
    (<Layout.SPLIT_NAMES: 'split names'>, ['train', 'validation'], None)
"""

from __future__ import annotations

import dataclasses
import enum
import glob
import logging
import re
from pathlib import Path

from tfopt._files import special_kind
from tfopt.errors import DatasetError, NoManifestError
from tfopt.records.format.tfrecord import is_gzip, is_tfrecord_file
from tfopt.records.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestIssue,
    load_manifest,
    manifest_issues_error,
    read_manifest,
)

logger = logging.getLogger("tfopt")


class Layout(str, enum.Enum):
    """How a dataset's files were found, and so where its splits come from."""

    MANIFEST = "manifest"  # a tfopt dataset: its manifest lists each split's shards
    SPLIT_NAMES = "split names"  # no manifest: each file's name says its split
    SPLIT_FOLDERS = "split folders"  # no manifest: one subfolder of TFRecord files per split
    UNSPLIT = "unsplit"  # no manifest, and no file name says a split: one set of files
    FILES = "files"  # one file, a glob or a list: read as named, no splits
    INCOMPLETE = "incomplete"  # a conversion's journal and no manifest: interrupted

    @property
    def told_from(self) -> str | None:
        """Where a folder without a manifest had its splits from, for people; else None."""
        return {Layout.SPLIT_NAMES: "the file names",
                Layout.SPLIT_FOLDERS: "the subfolders"}.get(self)


# The split names that file names are read for, as TFDS, Model Garden, the TFRecord examples
# of the TensorFlow tutorials and Kaggle write them. A name is kept as written ("val" is not
# renamed "validation"): a pipeline asked for a split the files do not name says which they do.
SPLIT_WORDS = ("train", "validation", "val", "valid", "test", "eval", "dev")

# What ends a shard's name after its split: the shard numbers (-00000-of-01024, _3) and
# TFRecord extensions, compressed or not; stripped from the end until none is left.
_NAME_TAIL = re.compile(r"(\.(tfrecords?|tfrec|tfr|records?|gz|gzip|zlib)|[-_.]\d+-of-\d+"
                        r"|[-_.]\d+)$", re.IGNORECASE)


def split_in_name(name: str) -> str | None:
    """The split a file's name says, or None: its first or (TFDS's ``mnist-train.tfrecord-
    00000-of-00001``) last word once shard numbers and extensions are stripped."""
    stem = name
    while (tail := _NAME_TAIL.search(stem)) and tail.start() > 0:
        stem = stem[:tail.start()]
    words = re.split(r"[-_.]", stem.lower())
    for word in (words[0], words[-1]):
        if word in SPLIT_WORDS:
            return word
    return None


@dataclasses.dataclass(frozen=True)
class DatasetFiles:
    """A resolved dataset: its files, its splits, its compression.

    Attributes:
        path: What was resolved, as given.
        layout: How the files were found (where the splits come from).
        files: Every file, split by split in a stable order.
        splits: Split name -> its files; empty for an unsplit folder, files or an
            interrupted conversion.
        compression: ``"gzip"`` or None, one for the whole dataset.
        manifest: The tfopt manifest (layout MANIFEST), else None.
        manifest_issues: Where that manifest contradicts itself (kept only when asked for).
        notes: What the user should know: files not read, how the splits were told.
        incomplete: Why a folder is an interrupted conversion (layout INCOMPLETE), else None.
    """

    path: str
    layout: Layout
    files: tuple[Path, ...]
    splits: dict[str, tuple[Path, ...]]
    compression: str | None
    manifest: Manifest | None = None
    manifest_issues: tuple[ManifestIssue, ...] = ()
    notes: tuple[str, ...] = ()
    incomplete: str | None = None


def resolve_dataset(path, *, keep_manifest_issues: bool = False) -> DatasetFiles:
    """Resolve a dataset folder, one TFRecord file, a glob or a list of files.

    Args:
        path: A folder (with or without a manifest), a file, a glob such as
            ``"data/train-*.tfrecord"``, or a list of files.
        keep_manifest_issues: Return a self-contradicting manifest with its issues
            (``verify`` reports them) instead of refusing it.

    Raises:
        tfopt.errors.DatasetError: Nothing to read at ``path``; a folder without a manifest
            that holds no TFRecord files, or mixes files of a named split with files of none;
            GZIP and uncompressed files mixed; an unreadable manifest.
    """
    if isinstance(path, (list, tuple)):
        files = [Path(str(file)) for file in path]
        missing = [str(file) for file in files if not file.is_file()]
        if not files or missing:
            raise DatasetError(f"shard files not found: {missing[:3] or 'empty list'}")
        return _files(str(path), files)
    text = str(path)
    if any(char in text for char in "*?["):
        files = [Path(name) for name in sorted(glob.glob(text)) if Path(name).is_file()]
        if not files:
            raise DatasetError(f"{text}: no files match this pattern")
        return _files(text, files)
    given = Path(text)
    if not given.exists():
        raise DatasetError(f"{given}: does not exist")
    folder = given.parent if given.name == MANIFEST_NAME and given.is_file() else given
    if folder.is_file():
        return _files(text, [folder])
    if not folder.is_dir():  # a named pipe or a device: reading one would block or never end
        kind = special_kind(folder.stat().st_mode) or "a special file"
        raise DatasetError(f"{folder}: is {kind}, not a TFRecord file or a dataset folder")
    try:
        manifest, issues = load_manifest(folder)
    except NoManifestError as error:
        if error.interrupted:
            return _interrupted(text, folder, str(error))
        return _foreign(text, folder)
    if issues and not keep_manifest_issues:
        raise manifest_issues_error(folder, issues)
    splits = {name: tuple(folder / shard.file for shard in split.shards)
              for name, split in manifest.splits.items()}
    return DatasetFiles(text, Layout.MANIFEST, tuple(folder / shard.file for shard in manifest.shards),
                        splits, manifest.compression, manifest, tuple(issues))


def _files(text: str, files: list[Path]) -> DatasetFiles:
    return DatasetFiles(text, Layout.FILES, tuple(files), {}, _compression(text, files))


def _compression(where: str, files) -> str | None:
    """One compression for the dataset, told from the files' first bytes."""
    gzipped = {file: is_gzip(file) for file in files}
    if len(set(gzipped.values())) > 1:
        plain = [str(file) for file, flag in gzipped.items() if not flag][:2]
        packed = [str(file) for file, flag in gzipped.items() if flag][:2]
        raise DatasetError(f"{where}: mixed compression: some files are GZIP (e.g. {packed}) and "
                           f"some not (e.g. {plain}); expected one compression for a dataset: "
                           "read them as separate globs")
    return "gzip" if any(gzipped.values()) else None


def _listing(folder: Path) -> tuple[list[Path], list[Path]]:
    """The visible files (manifest and journal aside) and subfolders of a folder."""
    try:
        entries = sorted(entry for entry in folder.iterdir() if not entry.name.startswith("."))
    except OSError as error:
        raise DatasetError(f"{folder}: cannot be listed ({error.strerror or error})") from None
    files = [entry for entry in entries if entry.is_file() and entry.name != MANIFEST_NAME]
    return files, [entry for entry in entries if entry.is_dir()]


def _tfrecords_of(files: list[Path]) -> tuple[list[Path], list[str]]:
    """The TFRecord files among ``files`` (name or record header), and the others' names."""
    kept, others = [], []
    for file in files:  # one pass: a membership test against kept was quadratic in the files
        (kept if is_tfrecord_file(file) else others).append(file)
    return kept, [str(file) for file in others]


def _shown(names: list[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def _foreign(text: str, folder: Path) -> DatasetFiles:
    """A folder without a manifest: splits told by file name, else by subfolder, else none."""
    files, subfolders = _listing(folder)
    tfrecords, others = _tfrecords_of(files)
    foreign = f"no {MANIFEST_NAME}: TFRecord files written elsewhere"
    notes = []
    if tfrecords:
        if subfolders:
            notes.append(f"not read: {len(subfolders)} subfolder(s) ({_shown([s.name + '/' for s in subfolders])}): "
                         "the folder's own TFRecord files are the dataset")
        named = {file: split_in_name(file.name) for file in tfrecords}
        unnamed = [file.name for file, split in named.items() if split is None]
        if len(unnamed) == len(tfrecords):
            layout, splits = Layout.UNSPLIT, {}
            notes.insert(0, f"{foreign}; no file name says a split (as train-00000-of-00004 "
                            f"does): the {len(tfrecords)} file(s) are one unsplit dataset")
        elif unnamed:
            found = sorted({split for split in named.values() if split})
            raise DatasetError(
                f"{folder}: no {MANIFEST_NAME}, and {len(tfrecords) - len(unnamed)} TFRecord "
                f"file(s) name a split ({', '.join(found)}) while {len(unnamed)} name none "
                f"({_shown(unnamed)}): expected every file's name to start with its split "
                "(train-00000-of-00004, validation-00000-of-00001) or no file's to; move the "
                "others out, or pass a glob or a list of files")
        else:
            layout = Layout.SPLIT_NAMES
            splits = {}
            for file, split in named.items():
                splits.setdefault(split, []).append(file)
            splits = {name: tuple(splits[name]) for name in sorted(splits, key=_split_order)}
            notes.insert(0, f"{foreign}, split as {Layout.SPLIT_NAMES.told_from} say: "
                         + _splits_shown(splits))
        if others:
            notes.append(_not_read(others, folder))
        ordered = tuple(file for members in splits.values() for file in members) or tuple(tfrecords)
        return DatasetFiles(text, layout, ordered, splits, _compression(str(folder), ordered),
                            notes=tuple(notes))
    splits, skipped = {}, []
    for subfolder in subfolders:
        inner, inner_others = _tfrecords_of(_listing(subfolder)[0])
        if inner:
            splits[subfolder.name] = tuple(inner)
            others += inner_others
        else:
            skipped.append(subfolder.name + "/")
    if not splits:
        if not files and not subfolders:
            raise DatasetError(f"{folder}: no files in this folder")
        where = f"{len(others)} other file(s): {_shown([Path(o).name for o in others])}" if others else ""
        if skipped:
            where += ("; " if where else "") + f"nor in its subfolders {_shown(skipped)}"
        raise DatasetError(f"{folder}: no TFRecord files in this folder ({where}): expected a "
                           f"tfopt dataset ({MANIFEST_NAME}), TFRecord files, or one subfolder "
                           "of TFRecord files per split (train/, validation/)")
    splits = {name: splits[name] for name in sorted(splits, key=_split_order)}
    notes = [f"{foreign}, split as {Layout.SPLIT_FOLDERS.told_from} say: "
             + _splits_shown(splits)]
    if skipped:
        notes.append(f"not read: subfolder(s) without TFRecord files: {_shown(skipped)}")
    if others:
        notes.append(_not_read(others, folder))
    ordered = tuple(file for members in splits.values() for file in members)
    return DatasetFiles(text, Layout.SPLIT_FOLDERS, ordered, splits,
                        _compression(str(folder), ordered), notes=tuple(notes))


def _splits_shown(splits: dict[str, tuple[Path, ...]]) -> str:
    return ", ".join(f"{name} ({len(files)} file(s))" for name, files in splits.items())


def _split_order(name: str) -> tuple[int, str]:
    """Splits in the order people list them: train, validation..., then by name."""
    return (SPLIT_WORDS.index(name) if name in SPLIT_WORDS else len(SPLIT_WORDS), name)


def _not_read(others: list[str], folder: Path) -> str:
    names = [str(Path(other).relative_to(folder)) for other in others]
    return (f"not read: {len(names)} file(s) that are not TFRecord files (neither a TFRecord "
            f"name nor a record header): {_shown(names)}")


def _interrupted(text: str, folder: Path, why: str) -> DatasetFiles:
    """A conversion killed before its manifest: its shards so far, read whole for the user
    to look at (``inspect``, ``verify``); a pipeline refuses it with ``why``."""
    files, _ = _listing(folder)
    if not files:  # killed before its first shard: still say what it is
        raise DatasetError(f"{folder}: incomplete dataset: a conversion was interrupted before "
                           "it finished a shard; finish it with 'tfopt convert ... --resume'")
    tfrecords, others = _tfrecords_of(files)
    notes = ["incomplete dataset: a conversion was interrupted before writing "
             f"{MANIFEST_NAME}; finish it with 'tfopt convert ... --resume'"]
    if others:
        notes.append(_not_read(others, folder))
    if not tfrecords:
        raise DatasetError(f"{folder}: no TFRecord files in this folder ({len(others)} other "
                           f"file(s): {_shown([Path(o).name for o in others])})")
    return DatasetFiles(text, Layout.INCOMPLETE, tuple(tfrecords), {},
                        _compression(str(folder), tfrecords), notes=tuple(notes),
                        incomplete=why)


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
