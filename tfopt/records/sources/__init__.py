"""Raw data sources for ``convert``: image folders, NumPy arrays, CSV, Parquet and HDF5 files.

:func:`scan_source` runs once in the main process: it lists the items (cheaply: names, offsets,
headers; never the data), infers the schema and reports bad input that can be seen without
decoding. :func:`open_reader` runs in each shard-writing process and turns one item into the
values of one record, raising :class:`BadItem` with its file and row or key. One module per
kind (:mod:`.images`, :mod:`.numpy_arrays`, :mod:`.csv_tables`, :mod:`.parquet_tables`,
:mod:`.hdf5_arrays`), dispatched by :class:`SourceKind`. Items are small picklable values (a
relative path, a row index), so that plans can be shipped to worker processes and hashed for
``--resume``. The table sources (Parquet, HDF5) read by block (:mod:`.tables`): their readers
are given the shard's items up front.

Example:
    >>> scanned = scan_source(Path("photos"), detect_kind(Path("photos")), label=None,
    ...                       skip_bad=False)
    >>> read = open_reader(scanned.kind, scanned.reader_config)
    >>> sorted(read(scanned.items[0]))[:2]
    ['image/class/label', 'image/encoded']
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tfopt.errors import InvalidArgumentError, SourceError
from tfopt.records.image_limits import DEFAULT_MAX_PIXELS
from tfopt.records.sources import (
    csv_tables,
    hdf5_arrays,
    images,
    numpy_arrays,
    parquet_tables,
)
from tfopt.records.sources.paths import (
    UnreadableFile,
    is_regular_file,
    list_folder,
    source_is_folder,
)
from tfopt.records.sources.shared import (
    HDF5_SUFFIXES,
    PARQUET_SUFFIXES,
    BadItem,
    ScannedSource,
    SourceKind,
    require_memory_for_rows,
)

# The kinds' types, where callers have always imported them from: the package.
__all__ = ["HDF5_SUFFIXES", "PARQUET_SUFFIXES", "BadItem", "ScannedSource", "SourceKind",
           "detect_kind", "open_reader", "require_memory_for_rows", "scan_source"]


def detect_kind(src: Path) -> SourceKind:
    """Tell the source kind from the path: ``.npz``/``.npy``, ``.csv``, ``.parquet``, ``.h5``,
    or a folder (of ``.npy`` files, of Parquet part files, or of class folders of images).

    Raises:
        SourceError: ``src`` does not exist, is neither a regular file nor a folder (a named
            pipe, a device, a looping link), cannot be listed, or is not a known kind.
    """
    if not source_is_folder(src):
        suffix = src.suffix.lower()
        if suffix in (".npz", ".npy"):
            return SourceKind.NUMPY
        if suffix in (".csv", ".tsv"):
            return SourceKind.CSV
        if suffix in PARQUET_SUFFIXES:
            return SourceKind.PARQUET
        if suffix in HDF5_SUFFIXES:
            return SourceKind.HDF5
        raise SourceError(
            src, f"unknown source file type {suffix!r}: expected a .npz, .npy, .csv, .tsv, "
            ".parquet or .h5 file (or --from to name the kind), or a folder (of .npy files, "
            "of Parquet part files, or of class folders of images)"
        )
    try:
        entries = [entry for entry in list_folder(src) if not entry.name.startswith(".")]
    except UnreadableFile as unreadable:
        raise SourceError(src, unreadable.reason) from None
    if any(entry.name.lower().endswith(".npy") and is_regular_file(entry.path)
           for entry in entries):
        return SourceKind.NUMPY
    if any(entry.name.lower().endswith(PARQUET_SUFFIXES) and is_regular_file(entry.path)
           for entry in entries):
        return SourceKind.PARQUET  # part files, as Spark and pandas write them
    return SourceKind.IMAGES


def scan_source(
    src: Path, kind: SourceKind, *, label: str | None, skip_bad: bool, max_size: int | None = None,
    quality: int = 90, check: str = "structure", max_pixels: int | None = DEFAULT_MAX_PIXELS,
    group: str | None = None,
) -> ScannedSource:
    """Scan ``src`` as ``kind``; see :class:`ScannedSource`.

    Args:
        group: The HDF5 group whose datasets are read (HDF5 only). Defaults to the root.

    Raises:
        SourceError: Bad input (named with file and row or key) when ``skip_bad`` is False, or
            input with nothing usable in it.
        InvalidArgumentError: ``label`` names no column or array, or ``group`` is given for
            a source that is not HDF5.
    """
    src = Path(src)
    # --from skips detect_kind, and can name a kind that does not fit the path: say so before
    # a scanner trips on it (IsADirectoryError and kin)
    is_folder = source_is_folder(src)  # a missing path, a looping link, a pipe, a device
    if kind is SourceKind.IMAGES and not is_folder:
        raise SourceError(src, "is a file; an image source is a folder laid out as "
                          "SRC/<class>/<image>")
    if kind is SourceKind.CSV and is_folder:
        raise SourceError(src, "is a folder; a CSV source is a .csv or .tsv file with a header row")
    if kind is SourceKind.HDF5 and not src.is_file():
        raise SourceError(src, "is a folder; an HDF5 source is one .h5 file (--group picks a "
                          "group in it)")
    extra = {}
    if kind is SourceKind.HDF5:
        extra["group"] = group
    elif group is not None:
        raise InvalidArgumentError(f"group={group!r}: a group applies to HDF5 sources only, "
                                   f"and {src} is read as {kind.value}")
    scanner = _SCANNERS[kind]
    # the pixel limit is an image folder's setting alone; the other scanners take none
    image_settings = {"max_pixels": max_pixels} if kind is SourceKind.IMAGES else {}
    return scanner(src.resolve(), label=label, skip_bad=skip_bad,
                   max_size=max_size, quality=quality, check=check, **image_settings,
                   **extra)


def open_reader(kind: SourceKind, config: dict, items: list | None = None,
                ) -> Callable[[object], dict]:
    """A function ``item -> {feature name: value}`` for a worker process.

    The reader raises :class:`BadItem` for an item that cannot be converted. ``items`` are the
    items it will be asked for, in that order: the table sources need them (they read the
    blocks that hold them, once each); the others read any item at any time.
    """
    if kind in _BLOCK_READERS:
        if items is None:
            raise ValueError(f"a {kind.value} reader needs the items it will read")
        return _BLOCK_READERS[kind](config, items)
    return _READERS[kind](config)


# The scanner and reader of each kind.
_SCANNERS = {
    SourceKind.IMAGES: images.scan_images,
    SourceKind.NUMPY: numpy_arrays.scan_numpy,
    SourceKind.CSV: csv_tables.scan_csv,
    SourceKind.PARQUET: parquet_tables.scan_parquet,
    SourceKind.HDF5: hdf5_arrays.scan_hdf5,
}
_READERS = {
    SourceKind.IMAGES: images.image_reader,
    SourceKind.NUMPY: numpy_arrays.numpy_reader,
    SourceKind.CSV: csv_tables.csv_reader,
}
_BLOCK_READERS = {
    SourceKind.PARQUET: parquet_tables.parquet_reader,
    SourceKind.HDF5: hdf5_arrays.hdf5_reader,
}
