"""The options of ``convert`` and what it returns: :class:`ConvertOptions`, :class:`ConvertResult`.

Example:
    >>> options = ConvertOptions(val_fraction=0.1, compression="gzip")
    >>> options.replace(seed=3).plan_fields()["seed"]
    3
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

from tfopt._validate import (
    choice,
    flag,
    number,
    optional_whole_number,
    require,
    whole_number,
)
from tfopt.errors import InvalidArgumentError
from tfopt.records.image_limits import DEFAULT_MAX_PIXELS
from tfopt.records.manifest import Manifest
from tfopt.records.sources import SourceKind

TARGET_SHARD_BYTES = 128 << 20  # 100-200 MB per shard reads well on local and remote disks


class OnError(str, enum.Enum):
    """What to do with an item that cannot be converted."""

    RAISE = "raise"  # stop, exit 1, remove everything this run wrote
    SKIP = "skip"  # leave it out, record path and reason in the manifest


class ImageCheck(str, enum.Enum):
    """How each image is proven whole before it is stored."""

    STRUCTURE = "structure"  # judged as the decoder would, without decoding: no TensorFlow
    DECODE = "decode"  # a decode (JPEGs at 1/8 scale), TensorFlow in every worker: slower


class Compression(str, enum.Enum):
    NONE = "none"
    GZIP = "gzip"


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    """How ``convert`` turns a source into shards.

    Attributes:
        source_format: ``"images"``, ``"numpy"``, ``"csv"``, ``"parquet"`` or ``"hdf5"``.
            Defaults to detecting it from the source path.
        label: The column (CSV, Parquet), array (NumPy) or dataset (HDF5) holding the label:
            integers (class indices), text (class names) or floats (regression targets).
            Defaults to one named label, labels, class, target or y, if there is one.
        shard_size: Target shard size in bytes. Defaults to 128 MiB.
        shards: Number of training shards, overriding ``shard_size``. Defaults to None.
        seed: Seed of the shuffle before sharding and of the validation split. Defaults to 0.
        val_fraction: Fraction of records for a ``validation`` split, stratified by class;
            with float labels (no classes) a plain random split drawn with ``seed``.
            Defaults to 0 (no validation split).
        compression: ``"gzip"`` or ``"none"``. Defaults to "none": GZIP saves disk but costs
            CPU on every read, the scarcer resource in training.
        workers: Processes writing shards. Defaults to None: the number of usable cores of
            the machine that runs the conversion.
        max_size: Downscale images whose longer side exceeds this (aspect kept, JPEG
            re-encoded at ``quality``). Defaults to None (bytes stored as they are).
        quality: JPEG quality of downscaled images, 1-100. Defaults to 90.
        max_pixels: Refuse images of more pixels (height x width) than this, judged from the
            header before anything is decoded: a one-colour 20000x20000 PNG is 1.2 MB on disk,
            1.2 GB decoded in every epoch. None keeps TensorFlow's own limits alone (which are
            always applied: see :mod:`tfopt.records.image_limits`). Defaults to 178,956,970,
            the largest RGB JPEG TensorFlow decodes whole.
        check: How images are checked: ``"structure"`` rejects what TensorFlow's decoder
            rejects without decoding (JPEGs by every marker and segment to the end-of-image
            marker, PNGs by their chunks, GIFs by their records and LZW data, BMPs
            by their header and size; see :mod:`tfopt.records.image_structure`), decoding only
            the rare image those cannot vouch for; ``"decode"`` decodes each (JPEGs at 1/8
            scale), with TensorFlow in every worker: several times slower. Defaults to
            "structure".
        on_error: ``"raise"`` or ``"skip"`` (see :class:`OnError`). Defaults to "raise".
        overwrite: Replace a tfopt dataset already in the output folder (never a file tfopt
            did not write). The new dataset is written into a hidden folder beside it,
            ``.NAME.tfopt-new``, and replaces the old one only once complete: a failed or
            interrupted run leaves the old dataset whole (the disk holds both meanwhile).
            Defaults to False.
        resume: Finish an interrupted conversion into the same folder, an interrupted
            ``overwrite`` included. Defaults to False.
        group: The group of an HDF5 file whose datasets are converted, e.g. ``"train"``.
            Defaults to None: the file's root group.

    Raises:
        tfopt.errors.InvalidArgumentError: A field of the wrong type or out of range (the message
            names it, the value received and what is allowed), or ``overwrite`` with
            ``resume``.
    """

    source_format: str | None = None
    label: str | None = None
    shard_size: int = TARGET_SHARD_BYTES
    shards: int | None = None
    seed: int = 0
    val_fraction: float = 0.0
    compression: str = Compression.NONE.value
    workers: int | None = None
    max_size: int | None = None
    quality: int = 90
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    check: str = ImageCheck.STRUCTURE.value
    on_error: str = OnError.RAISE.value
    overwrite: bool = False
    resume: bool = False
    group: str | None = None

    def __post_init__(self):
        set_field = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if self.source_format is not None:
            set_field("source_format", choice(SourceKind, self.source_format, "source_format").value)
        set_field("compression", choice(Compression, self.compression or "none", "compression").value)
        set_field("on_error", choice(OnError, self.on_error, "on_error").value)
        set_field("check", choice(ImageCheck, self.check, "check").value)
        require(self.label is None or isinstance(self.label, str), "label", self.label,
                "the name of a column (CSV, Parquet), array (NumPy) or dataset (HDF5), or None")
        require(self.group is None or (isinstance(self.group, str) and self.group != ""),
                "group", self.group, "the name of a group in an HDF5 file, or None for its root")
        # NumPy's generators take no negative seeds (a ValueError deep in the shuffle otherwise)
        set_field("seed", whole_number(self.seed, "seed", 0))
        set_field("shard_size", whole_number(self.shard_size, "shard_size", 1,
                                             "a positive int of bytes, e.g. 134217728 (128 MiB)"))
        set_field("shards", optional_whole_number(self.shards, "shards", 1,
                                                  "an int >= 1, or None to size by shard_size"))
        set_field("val_fraction", number(self.val_fraction, "val_fraction", low=0.0, high=1.0,
                                         open_high=True,
                                         expected="a finite number in [0, 1), e.g. 0.1"))
        # None stays None: the core count is the machine's, resolved where convert runs
        set_field("workers", optional_whole_number(self.workers, "workers", 1,
                                                   "an int >= 1, or None for all usable cores"))
        set_field("max_size", optional_whole_number(
            self.max_size, "max_size", 8, "an int >= 8 (pixels), e.g. 320 for 224-px training "
            "crops, or None to store images as they are"))
        set_field("quality", whole_number(self.quality, "quality", 1, maximum=100))
        set_field("max_pixels", optional_whole_number(
            self.max_pixels, "max_pixels", 1, "an int >= 1 (pixels per image, height x width), "
            "or None for TensorFlow's own limits alone"))
        set_field("overwrite", flag(self.overwrite, "overwrite"))
        set_field("resume", flag(self.resume, "resume"))
        if self.overwrite and self.resume:
            raise InvalidArgumentError("overwrite and resume exclude each other: choose one")

    def replace(self, **changes) -> ConvertOptions:
        return dataclasses.replace(self, **changes)

    def plan_fields(self) -> dict:
        """The options that shape the output (recorded in the manifest, checked on resume)."""
        data = dataclasses.asdict(self)
        for run_only in ("workers", "overwrite", "resume"):
            data.pop(run_only)
        return data


@dataclasses.dataclass(frozen=True)
class ConvertResult:
    """What ``convert`` wrote.

    Attributes:
        path: The dataset folder.
        manifest: Its manifest.
        seconds: Wall time of the run.
        resumed_shards: Shards kept from an interrupted run.
    """

    path: Path
    manifest: Manifest
    seconds: float
    resumed_shards: int = 0

    @property
    def num_records(self) -> int:
        return self.manifest.num_records

    @property
    def records_per_second(self) -> float:
        return self.num_records / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {
            "path": str(self.path),
            "splits": {
                name: {"records": split.num_records, "shards": len(split.shards),
                       "bytes": split.num_bytes}
                for name, split in self.manifest.splits.items()
            },
            "records": self.num_records,
            "bytes": self.manifest.num_bytes,
            "skipped": len(self.manifest.skipped),
            "resumed_shards": self.resumed_shards,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
        }
