"""The manifest: the file that makes a folder of shards a complete, verifiable dataset.

It is written last and atomically by ``convert``; a folder without one is an incomplete dataset.
It records the schema, the class names, every shard's record count, byte size and SHA-256, the
source and the options used, and every input item skipped with the reason.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from tfopt._files import atomic_write_bytes
from tfopt.errors import DatasetError
from tfopt.records.schema import FeatureSpec

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
# Present while a conversion is under way or was interrupted; removed once the manifest exists.
JOURNAL_NAME = ".tfopt-convert-journal.jsonl"
# Hidden folders beside a dataset folder DST while ``convert --overwrite`` replaces it:
# ``.DST.tfopt-new`` holds the new dataset until it is complete, ``.DST.tfopt-old`` the old
# files during the swap at the end.
STAGING_SUFFIX = ".tfopt-new"
OLD_SUFFIX = ".tfopt-old"


def swap_folder(folder, suffix: str) -> Path:
    """The hidden folder ``.NAME<suffix>`` beside ``folder`` (symlinks resolved), or
    ``folder/<suffix>`` where ``folder`` is a mount point: shards move between the two by
    rename, which cannot cross file systems."""
    real = Path(folder).resolve()
    if os.path.ismount(real):
        return real / suffix
    return real.parent / f".{real.name}{suffix}"


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard file. ``file`` is relative to the dataset folder."""

    file: str
    num_records: int
    num_bytes: int
    sha256: str

    def __post_init__(self):
        # a hand-edited manifest is refused here, named by read_manifest, instead of failing
        # deep in verify or inspect; a shard outside the folder would be read from anywhere
        for name, kind in (("file", str), ("num_records", int), ("num_bytes", int),
                           ("sha256", str)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, kind):
                raise TypeError(f"shard {name}={value!r}: expected {kind.__name__}")
        if Path(self.file).name != self.file or self.file in ("", ".", ".."):
            raise ValueError(f"shard file={self.file!r}: expected a file name in the dataset folder")


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """The shards of one split (``train``, ``validation``) and their totals."""

    shards: list[ShardInfo]

    @property
    def num_records(self) -> int:
        return sum(shard.num_records for shard in self.shards)

    @property
    def num_bytes(self) -> int:
        return sum(shard.num_bytes for shard in self.shards)


@dataclasses.dataclass(frozen=True)
class SkippedItem:
    """An input item left out under ``on_error="skip"``, with the reason."""

    path: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Manifest:
    """Everything a reader needs to know about a tfopt dataset.

    Attributes:
        features: The schema, one :class:`FeatureSpec` per feature.
        splits: Split name -> its shards.
        compression: ``"gzip"`` or None.
        image_key: The feature holding encoded images, if any.
        label_key: The feature holding the label, if any.
        class_names: Label index -> class name, when labels are classes.
        source: Where the data came from: ``{"kind": ..., "path": ...}``.
        options: The conversion options used.
        skipped: Items left out under ``on_error="skip"``.
        tfopt_version: The tfopt version that wrote it.
        format_version: The manifest format version (readers refuse newer ones).
    """

    features: list[FeatureSpec]
    splits: dict[str, SplitInfo]
    compression: str | None = None
    image_key: str | None = None
    label_key: str | None = None
    class_names: list[str] | None = None
    source: dict = dataclasses.field(default_factory=dict)
    options: dict = dataclasses.field(default_factory=dict)
    skipped: list[SkippedItem] = dataclasses.field(default_factory=list)
    tfopt_version: str = ""
    format_version: int = FORMAT_VERSION

    def replace(self, **changes) -> Manifest:
        return dataclasses.replace(self, **changes)

    @property
    def num_records(self) -> int:
        return sum(split.num_records for split in self.splits.values())

    @property
    def num_bytes(self) -> int:
        return sum(split.num_bytes for split in self.splits.values())

    @property
    def shards(self) -> list[ShardInfo]:
        return [shard for split in self.splits.values() for shard in split.shards]

    def feature(self, name: str) -> FeatureSpec:
        for spec in self.features:
            if spec.name == name:
                return spec
        known = ", ".join(spec.name for spec in self.features)
        raise KeyError(f"no feature {name!r} in the manifest; it has: {known}")

    def to_json(self) -> dict:
        return {
            "format_version": self.format_version,
            "tfopt_version": self.tfopt_version,
            "source": self.source,
            "options": self.options,
            "compression": self.compression,
            "features": [spec.to_json() for spec in self.features],
            "image_key": self.image_key,
            "label_key": self.label_key,
            "class_names": self.class_names,
            "splits": {
                name: {
                    "num_records": split.num_records,
                    "num_bytes": split.num_bytes,
                    "shards": [dataclasses.asdict(shard) for shard in split.shards],
                }
                for name, split in self.splits.items()
            },
            "totals": {
                "num_records": self.num_records,
                "num_bytes": self.num_bytes,
                "num_shards": len(self.shards),
            },
            "skipped": [dataclasses.asdict(item) for item in self.skipped],
        }

    @classmethod
    def from_json(cls, data: dict) -> Manifest:
        return cls(
            features=[FeatureSpec.from_json(spec) for spec in data["features"]],
            splits={
                name: SplitInfo([ShardInfo(**shard) for shard in split["shards"]])
                for name, split in data["splits"].items()
            },
            compression=data.get("compression"),
            image_key=data.get("image_key"),
            label_key=data.get("label_key"),
            class_names=data.get("class_names"),
            source=data.get("source", {}),
            options=data.get("options", {}),
            skipped=[SkippedItem(**item) for item in data.get("skipped", [])],
            tfopt_version=data.get("tfopt_version", ""),
            format_version=data["format_version"],
        )


def write_manifest(folder: Path, manifest: Manifest) -> Path:
    """Write ``folder/manifest.json`` atomically and return its path."""
    path = Path(folder) / MANIFEST_NAME
    text = json.dumps(manifest.to_json(), indent=2, sort_keys=False) + "\n"
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


# The keys every manifest has, with their JSON types: checked first, so that a hand-edited or
# foreign file gets a message naming the key instead of a TypeError from deep in from_json.
_REQUIRED_KEYS = {"format_version": (int, "an integer"), "features": (list, "a JSON array"),
                  "splits": (dict, "a JSON object")}


def read_manifest(folder) -> Manifest:
    """Read the manifest of a dataset folder.

    Args:
        folder: The dataset folder (or the manifest file itself).

    Raises:
        DatasetError: The folder has no manifest (an incomplete or foreign dataset), or the
            manifest is unreadable or from a newer tfopt.

    Example:
        >>> manifest = read_manifest("shards/")
        >>> manifest.splits["train"].num_records
        9000
    """
    folder = Path(folder)
    path = folder if folder.name == MANIFEST_NAME else folder / MANIFEST_NAME
    folder = path.parent
    if not path.is_file():
        if (folder / JOURNAL_NAME).exists():
            raise DatasetError(
                f"{folder}: incomplete dataset: a conversion was interrupted before writing "
                f"{MANIFEST_NAME}; finish it with 'tfopt convert ... --resume'"
            )
        if swap_folder(folder, OLD_SUFFIX).is_dir():
            raise DatasetError(
                f"{folder}: incomplete dataset: a 'tfopt convert --overwrite' was killed while "
                f"it replaced the dataset here; the next 'tfopt convert ... {folder}' puts the "
                "old one back first (add --resume to finish the new one)"
            )
        raise DatasetError(f"{folder}: no {MANIFEST_NAME}: not a complete tfopt dataset")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:  # ValueError: broken JSON or bytes that are not UTF-8
        raise DatasetError(f"{path}: unreadable manifest ({type(error).__name__}: {error})") from error
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: unreadable manifest: expected a JSON object, got "
                           f"{type(data).__name__}")
    for key, (kind, kind_name) in _REQUIRED_KEYS.items():
        if key not in data:
            raise DatasetError(f"{path}: unreadable manifest: missing key {key!r}")
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise DatasetError(f"{path}: unreadable manifest: {key}={repr(value)[:60]}, "
                               f"expected {kind_name}")
    try:
        manifest = Manifest.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        # deeper down in a hand-edited or foreign file: AttributeError where an object is a
        # list ("splits": {"train": []}), TypeError where a shard lacks a field
        raise DatasetError(f"{path}: unreadable manifest ({type(error).__name__}: {error})") from error
    if manifest.format_version > FORMAT_VERSION:
        raise DatasetError(
            f"{path}: manifest format {manifest.format_version} is newer than this tfopt "
            f"reads ({FORMAT_VERSION}); upgrade tfopt"
        )
    return manifest
