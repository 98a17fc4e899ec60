"""What the table sources (Parquet, HDF5) share: reading a shard's rows block by block, labels,
binary columns that hold encoded images, values a record cannot hold, and the optional
package each source needs.

A table is stored in blocks (a Parquet row group, a run of HDF5 chunks): reading one row costs
reading its block. So the plan keeps each shard's rows within few blocks
(``ScannedSource.blocks``; ``plan_shards``), and a shard's :class:`BlockReader` reads each
block it needs once, keeps only this shard's rows of it and lets them go once they are
written: a worker holds one block's rows at a time, whatever the size of the file.

Example:
    >>> read = BlockReader(items=[5, 2, 9], starts=[0, 4, 8], load=load_rows)
    >>> read(5)["x"]
    array([...])
"""

from __future__ import annotations

import bisect
import collections
import importlib
import logging
from collections.abc import Callable

import numpy as np

from tfopt.errors import InvalidArgumentError, SourceError
from tfopt.records.image_header import (
    ImageFormat,
    image_size,
    jpeg_structure,
    png_problem,
    sniff_format,
)
from tfopt.records.manifest import SkippedItem
from tfopt.records.schema import INT64_MAX, Encoding, FeatureKind, FeatureSpec
from tfopt.records.sources.labels import labels_from_values
from tfopt.records.sources.shared import BadItem

logger = logging.getLogger("tfopt")

# Bytes of a value read to tell an image by its signature (a BMP needs 26).
SNIFF_BYTES = 32

NULL_REASON = ("is null (a missing value, which a TFRecord feature cannot hold): fill it or "
               "drop the row, or convert with --on-error skip to leave such rows out")


def import_extra(module: str, extra: str, src, what: str):
    """Import an optional package, or say in one line which extra installs it.

    Raises:
        SourceError: The package is not installed (or cannot be imported).
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise SourceError(src, f"reading {what} needs the {module.split('.')[0]} package, "
                          f"which cannot be imported here ({error}): pip install "
                          f"'tfopt[{extra}]'") from None


def refuse_image_options(max_size, check: str, what: str) -> None:
    """Images in a table are stored as they are and checked by their structure."""
    if max_size is not None:
        raise InvalidArgumentError(f"max_size={max_size}: downscaling applies to image folders; "
                                   f"the images in a {what} source are stored as they are")
    if check != "structure":
        raise InvalidArgumentError(f"check={check!r}: the images in a {what} source are checked "
                                   "by their structure ('structure')")


class RowProblem(Exception):
    """A value of one row that a record cannot hold; the reader names the row and column."""


def image_problem(data: bytes) -> str | None:
    """What is wrong with an encoded image from a binary column, or None.

    Baseline JPEGs are walked to their end marker and PNGs checked chunk by chunk (as an image
    folder's are with ``--check structure``); GIF, BMP and progressive JPEGs by their header.
    """
    image_format = sniff_format(data)
    if image_format is None:
        return f"is not a JPEG, PNG, GIF or BMP image (starts with {data[:8]!r})"
    try:
        image_size(data, image_format)
    except ValueError as error:
        return f"holds a malformed {image_format.value} header: {error}"
    if image_format is ImageFormat.JPEG:
        problem = jpeg_structure(data).problem
    elif image_format is ImageFormat.PNG:
        problem = png_problem(data)
    else:
        problem = None
    return f"holds an image that is truncated or corrupt ({problem})" if problem else None


class ImageSniff:
    """Whether a binary column holds encoded images: every value starts like one.

    Fed the first :data:`SNIFF_BYTES` of each value, block by block; ``done`` once a value
    that is not an image settles it (the column is then plain bytes).
    """

    def __init__(self, name: str):
        self.name = name
        self.formats: set[ImageFormat] = set()
        self.images = 0
        self.other: tuple[str, bytes] | None = None  # (where, first bytes) of a non-image

    @property
    def done(self) -> bool:
        return self.other is not None

    def see(self, prefixes, where_of: Callable[[int], str], first: int) -> None:
        for offset, prefix in enumerate(prefixes):
            if prefix is None:
                continue  # a null: refused when the row is read
            image_format = sniff_format(prefix)
            if image_format is None:
                self.other = (where_of(first + offset), prefix[:8])
                return
            self.formats.add(image_format)
            self.images += 1

    def encoding(self, what: str) -> Encoding | None:
        """The column's image encoding, or None for plain bytes (with a warning where some
        of its values were images)."""
        if self.other is not None:
            if self.images:
                where, prefix = self.other
                logger.warning("%s: %s %r is stored as plain bytes, not images: %d value(s) "
                               "before it are images, but this one starts with %r; fix or "
                               "drop that row to have the column read as images",
                               where, what, self.name, self.images, prefix)
            return None
        if not self.images:
            return None
        if len(self.formats) == 1:
            return Encoding(next(iter(self.formats)).value)
        return Encoding.IMAGE


def image_spec(name: str, encoding: Encoding) -> FeatureSpec:
    """An encoded-image column, stored as an image folder's images are."""
    return FeatureSpec(name, FeatureKind.BYTES, "uint8", None, encoding)


def checked(get: Callable[[int], object], *, nulls: np.ndarray | None = None,
            uint64: bool = False, image: bool = False, class_index: dict | None = None):
    """``get`` (position -> value) with the checks a column needs, raising :class:`RowProblem`.

    Args:
        nulls: Per position, whether the row's value is or holds a null.
        uint64: Refuse values beyond int64 (the int64 list would wrap them).
        image: Check each value as an encoded image (:func:`image_problem`).
        class_index: Map a class name (bytes) to its index.
    """
    def read(position: int):
        if nulls is not None and nulls[position]:
            raise RowProblem(NULL_REASON)
        value = get(position)
        if uint64 and np.size(value) and np.max(value) > INT64_MAX:
            raise RowProblem(f"holds {int(np.max(value))}, beyond int64 (at most {INT64_MAX}), "
                             "the largest integer a TFRecord stores; store IDs or hashes as "
                             "int64 (same bits), magnitudes as float64")
        if image:
            problem = image_problem(value)
            if problem:
                raise RowProblem(problem)
        if class_index is not None:
            return class_index[bytes(value)]
        return value

    return read


class LoadedRows:
    """The rows of one block that a shard needs, column by column; called with a row, it
    returns that row's record values.

    Args:
        rows: The rows held, ascending.
        columns: ``(feature name, position -> value)`` for each column.
        where_of: How a row is named in messages (its file and row).
        what: What a column is called in messages ("column", "dataset").
    """

    def __init__(self, rows, columns, where_of: Callable[[int], str], what: str):
        self._position = {row: position for position, row in enumerate(np.asarray(rows).tolist())}
        self._columns = columns
        self._where_of = where_of
        self._what = what

    def __call__(self, row: int) -> dict:
        position = self._position[row]
        values = {}
        for name, get in self._columns:
            try:
                values[name] = get(position)
            except RowProblem as problem:
                raise BadItem(self._where_of(row), f"{self._what} {name!r} {problem}") from None
        return values


class BlockReader:
    """A shard's reader for a source stored in blocks: ``row -> record values``.

    Args:
        items: The rows the shard will ask for, in that order.
        starts: The first row of each block, ascending.
        load: ``(block index, rows of it needed, ascending) -> LoadedRows``.
    """

    def __init__(self, items, starts, load: Callable[[int, np.ndarray], LoadedRows]):
        self._starts = [int(start) for start in starts]
        needed: dict[int, list[int]] = collections.defaultdict(list)
        for row in items:
            needed[self._block_of(row)].append(int(row))
        self._needed = {block: np.sort(np.asarray(rows, dtype=np.int64))
                        for block, rows in needed.items()}
        self._left = {block: len(rows) for block, rows in needed.items()}
        self._loaded: dict[int, LoadedRows] = {}
        self._load = load

    def _block_of(self, row: int) -> int:
        return bisect.bisect_right(self._starts, row) - 1

    def __call__(self, row: int) -> dict:
        block = self._block_of(row)
        rows = self._loaded.get(block)
        if rows is None:
            rows = self._loaded[block] = self._load(block, self._needed[block])
        self._left[block] -= 1
        if not self._left[block]:
            del self._loaded[block]  # every row of it this shard needs is read: let it go
        return rows(row)


def table_labels(values: np.ndarray, key: str, spec: FeatureSpec, bad_rows: dict[int, str],
                 where: str, where_of: Callable[[int], str], skip_bad: bool,
                 skipped: list[SkippedItem]):
    """The rows kept and their labels: ``(rows, labels, class names, stored label spec)``.

    Args:
        values: The label of every row (a placeholder where the row is bad).
        where: How the label column is named in messages (its file and column).
        where_of: How a row is named in messages.
        bad_rows: Row -> why its label cannot be used (a null); NaN and inf regression
            targets are added here.
        skip_bad: Leave bad rows out (recorded in ``skipped``) instead of raising.

    Raises:
        SourceError: A bad label and not ``skip_bad``, or no row left.
    """
    if values.dtype.kind == "f":
        for row in np.flatnonzero(~np.isfinite(values)).tolist():
            bad_rows.setdefault(row, f"label {key!r} is {values[row]}; a regression target "
                                "must be a finite number")
    keep = np.ones(len(values), dtype=bool)
    for row in sorted(bad_rows):
        if not skip_bad:
            raise SourceError(where_of(row), f"{bad_rows[row]}; drop such rows, or convert "
                              "with --on-error skip to leave them out")
        skipped.append(SkippedItem(where_of(row), bad_rows[row]))
        keep[row] = False
    rows = np.flatnonzero(keep)
    if not len(rows):
        raise SourceError(where, "every row's label is null, NaN or inf; nothing to convert")
    labels, class_names, label_spec = labels_from_values(values[rows], key, where, spec)
    return rows.tolist(), labels, class_names, label_spec
