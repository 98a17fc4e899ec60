"""What every source kind shares: the kinds (:class:`SourceKind`) and the suffixes that tell them,
what a scan learns (:class:`ScannedSource`), an item that cannot be converted (:class:`BadItem`),
a source that changed under its conversion (:func:`source_changed`) and the row-count check
before planning (:func:`require_memory_for_rows`).

The kind modules (:mod:`.images`, :mod:`.numpy_arrays`, ...) import these from here, and the
package (:mod:`tfopt.records.sources`) dispatches to the kind modules: no module imports its
importer back.
"""

from __future__ import annotations

import dataclasses
import enum

from tfopt._system import available_memory
from tfopt._text import human_bytes
from tfopt.errors import SourceError
from tfopt.records.manifest import SkippedItem
from tfopt.records.schema import FeatureSpec


class SourceKind(str, enum.Enum):
    IMAGES = "images"
    NUMPY = "numpy"
    CSV = "csv"
    PARQUET = "parquet"
    HDF5 = "hdf5"


class BadItem(Exception):
    """An item that cannot be converted; ``convert`` raises it or records it as skipped."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason

    def as_source_error(self) -> SourceError:
        return SourceError(self.where, self.reason)


def source_changed(src, change: str) -> SourceError:
    """The error of a source that changed while it was converted: what changed, and that
    nothing of the conversion is kept. One wording for convert's checks of the source's
    files and for a reader that finds other bytes than the scan saw (a CSV row)."""
    return SourceError(src, f"the source changed while it was converted: {change}; nothing of "
                       "this conversion is kept (it would mix both versions): convert again "
                       "once the source stays put")


# Bytes of the main process's memory per item while a conversion is planned: the item list,
# labels, sizes, the shuffle and the shard tasks (108 measured on 3e6 NumPy rows).
PLAN_BYTES_PER_ITEM = 128


def require_memory_for_rows(count: int, where, detail: str = "") -> None:
    """Refuse a source whose row count, as its header or metadata states it, could not even be
    planned in the memory there is: an ``.npy`` of shape (10**12, 0) holds no data at all, and
    its 10**12 rows ended in a MemoryError.

    Raises:
        SourceError: ``count`` rows need more than the memory available now.
    """
    needed = count * PLAN_BYTES_PER_ITEM
    available = available_memory()
    if needed > available:
        raise SourceError(where, f"{count:,} rows{detail}: planning a conversion takes about "
                          f"{PLAN_BYTES_PER_ITEM} bytes of memory per row "
                          f"({human_bytes(needed)}), more than the {human_bytes(available)} "
                          f"available; convert it in parts of at most "
                          f"{available // PLAN_BYTES_PER_ITEM:,} rows")


@dataclasses.dataclass(frozen=True)
class ScannedSource:
    """What ``scan_source`` learned about a source.

    Attributes:
        kind: The source kind.
        path: The source path, absolute.
        items: One small picklable reference per item (see the module docstring).
        labels: The class label of each item (for a stratified validation split), or None
            (no label, or float labels: regression targets, split at random).
        item_bytes: Estimated stored bytes per item, for sizing shards.
        features: The schema. Image encodings are finalised after writing (mixed formats).
        class_names: Label index -> class name, or None.
        image_key: The image feature, if any.
        label_key: The label feature, if any.
        skipped: Items left out at scan time under ``on_error="skip"``.
        reader_config: What a worker needs to open a reader; picklable.
        content_stamp: For image folders, a hash of every image's path, size and modification
            time (taken from the stat the scan makes anyway), so that ``--resume`` notices an
            image replaced by one of the same size; None for other sources, whose files the
            resume check stamps itself.
        escaped_names: Class folders, files or arrays whose names are not UTF-8, as the
            manifest shows them (each byte that is not written ``\\xNN``).
        blocks: For sources read block by block (Parquet row groups, HDF5 chunks), whose
            items are row numbers: the first row of each block, ascending. The plan keeps
            each shard's rows within few blocks (see ``plan_shards``); None for the others.
    """

    kind: SourceKind
    path: str
    items: list
    labels: list[int] | None
    item_bytes: list[int]
    features: list[FeatureSpec]
    class_names: list[str] | None
    image_key: str | None
    label_key: str | None
    skipped: list[SkippedItem]
    reader_config: dict
    content_stamp: str | None = None
    blocks: list[int] | None = None
    escaped_names: list[str] = dataclasses.field(default_factory=list)


PARQUET_SUFFIXES = (".parquet", ".pq")
HDF5_SUFFIXES = (".h5", ".hdf5", ".hdf", ".he5")
