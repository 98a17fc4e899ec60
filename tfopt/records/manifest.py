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

from tfopt._files import SmallFileError, atomic_write_bytes, read_small_json, special_kind
from tfopt.errors import DatasetError, NoManifestError
from tfopt.records.schema import FeatureKind, FeatureSpec

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
# a manifest lists its shards and features: a million shards stays far below this
MAX_MANIFEST_BYTES = 256 << 20
# Present while a conversion is under way or was interrupted; removed once the manifest exists.
JOURNAL_NAME = ".tfopt-convert-journal.jsonl"
# Hidden folders beside a dataset folder DST while ``convert --overwrite`` replaces it:
# ``.DST.tfopt-new`` holds the new dataset until it is complete, ``.DST.tfopt-old`` the old
# files during the swap at the end.
STAGING_SUFFIX = ".tfopt-new"
OLD_SUFFIX = ".tfopt-old"
# In the old folder during the swap: every old file has left DST, and new shards may follow.
ALL_MOVED_MARKER = ".tfopt-all-moved"


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
        for name in ("num_records", "num_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"shard {name}={getattr(self, name)}: expected an int >= 0")


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
# Each shard's fields: a negative count would pass for a shard read short, and be summed.
_SHARD_FIELDS = {"file": (str, "a file name"), "num_records": (int, "an int >= 0"),
                 "num_bytes": (int, "an int >= 0"), "sha256": (str, "a string (SHA-256 in hex)")}


@dataclasses.dataclass(frozen=True)
class ManifestIssue:
    """One place where a readable manifest contradicts itself or its schema.

    :func:`read_manifest` refuses a manifest with any (its readers would train on wrong counts,
    read a shard twice, or name the wrong classes); ``verify`` lists them all.

    Attributes:
        key: Where in the manifest, e.g. ``splits.train.num_records``.
        detail: What is wrong, with the values found and expected.
        file: The shard it concerns, if one.
        duplicate: A shard listed more than once.
    """

    key: str
    detail: str
    file: str | None = None
    duplicate: bool = False

    def __str__(self) -> str:
        return f"{self.key}: {self.detail}"


def interrupted_swap(folder) -> str | None:
    """What a ``convert --overwrite`` killed in the middle of its swap left in ``folder``, and
    what to do about it; None when ``folder`` is not half-replaced.

    The swap moves the old dataset's files out of ``folder`` (its manifest first), then the
    new shards in, then writes the new manifest: a folder without a manifest beside the old
    dataset's swap folder holds part of one dataset or of the other, and its shards pass every
    check a manifest-less folder gets. ``verify``, ``inspect`` and the pipelines all ask here.

    Example:
        >>> interrupted_swap("shards/") is None
        True
    """
    folder = Path(folder)
    if (folder / MANIFEST_NAME).is_file():
        # whole: the old dataset (the swap had not started moving) or the new one (only the
        # cleanup was left)
        return None
    old = swap_folder(folder, OLD_SUFFIX)
    if not old.is_dir():
        return None
    staging = swap_folder(folder, STAGING_SUFFIX)
    here = _dataset_files(folder)
    if (old / ALL_MOVED_MARKER).exists():
        state = (f"{here} of the new dataset's shard(s) are here and "
                 f"{_dataset_files(staging)} still in {staging}; the old dataset is whole in "
                 f"{old} ({_dataset_files(old)} files)")
    else:
        state = (f"{_dataset_files(old)} of the old dataset's files (its {MANIFEST_NAME} first) "
                 f"are in {old} and {here} still here; the new dataset is whole in {staging}")
    return (f"a 'tfopt convert --overwrite' was killed while it replaced the dataset here: "
            f"{state}. Run 'tfopt convert SOURCE {folder} --resume' with the interrupted run's "
            f"source and options to finish the new dataset; any other 'tfopt convert ... "
            f"{folder}', even one it refuses, puts the old one back")


def _dataset_files(folder: Path) -> int:
    """Shards and manifest in ``folder`` (hidden files, journal and markers, are not counted)."""
    if not folder.is_dir():
        return 0
    return sum(1 for entry in folder.iterdir() if not entry.name.startswith(".")
               and entry.is_file())


def read_manifest(folder) -> Manifest:
    """Read the manifest of a dataset folder.

    Args:
        folder: The dataset folder (or the manifest file itself).

    Raises:
        NoManifestError: The folder has no manifest (a foreign dataset, or a conversion
            interrupted before it wrote one): a DatasetError.
        DatasetError: A killed ``convert --overwrite`` left the folder half-replaced, or the
            manifest is unreadable, from a newer tfopt, or contradicts itself (see
            :class:`ManifestIssue`).

    Example:
        >>> manifest = read_manifest("shards/")
        >>> manifest.splits["train"].num_records
        9000
    """
    manifest, issues = load_manifest(folder)
    if issues:
        raise manifest_issues_error(folder, issues)
    return manifest


def manifest_issues_error(folder, issues: list[ManifestIssue]) -> DatasetError:
    """The error a reader raises for a manifest that contradicts itself (the first three named)."""
    path = _manifest_path(folder)
    shown = "; ".join(str(issue) for issue in issues[:3])
    more = f"; and {len(issues) - 3} more" if len(issues) > 3 else ""
    return DatasetError(f"{path}: inconsistent manifest: {shown}{more}; 'tfopt verify "
                        f"{path.parent}' lists every problem, and a new convert rewrites it")


def _manifest_path(folder) -> Path:
    folder = Path(folder)
    return folder if folder.name == MANIFEST_NAME else folder / MANIFEST_NAME


def load_manifest(folder) -> tuple[Manifest, list[ManifestIssue]]:
    """The manifest of a dataset folder and where it contradicts itself, not refused for that.

    ``verify`` reports each issue and still checks the shards; readers use
    :func:`read_manifest`, which refuses a manifest with issues.

    Raises:
        DatasetError: As :func:`read_manifest`, but not for issues.
    """
    path = _manifest_path(folder)
    folder = path.parent
    if (path.exists() or path.is_symlink()) and not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file"
        try:
            kind = special_kind(os.stat(path).st_mode) or kind
        except OSError as error:
            kind = f"a link that cannot be followed ({error.strerror})"
        raise DatasetError(f"{path}: is {kind}; expected the dataset's manifest (a JSON "
                           "file tfopt convert writes)")
    if not path.is_file():
        swap = interrupted_swap(folder)
        if swap is not None:
            raise DatasetError(f"{folder}: incomplete dataset: {swap}")
        if (folder / JOURNAL_NAME).exists():
            raise NoManifestError(
                folder, True,
                f"{folder}: incomplete dataset: a conversion was interrupted before writing "
                f"{MANIFEST_NAME}; finish it with 'tfopt convert ... --resume'")
        raise NoManifestError(folder, False,
                              f"{folder}: no {MANIFEST_NAME}: not a complete tfopt dataset")
    try:
        data = read_small_json(path, MAX_MANIFEST_BYTES)
    except SmallFileError as error:
        raise DatasetError(f"{path}: unreadable manifest ({error.problem})") from None
    except OSError as error:
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
    _check_shard_entries(path, data["splits"])
    try:
        manifest = Manifest.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        # deeper down in a hand-edited or foreign file: AttributeError where an object is a
        # list ("features": [[]]), TypeError where a feature lacks a field
        raise DatasetError(f"{path}: unreadable manifest ({type(error).__name__}: {error})") from error
    if manifest.format_version > FORMAT_VERSION:
        raise DatasetError(
            f"{path}: manifest format {manifest.format_version} is newer than this tfopt "
            f"reads ({FORMAT_VERSION}); upgrade tfopt"
        )
    return manifest, _issues(data, manifest)


def _check_shard_entries(path: Path, splits: dict) -> None:
    """Refuse a split or shard entry of the wrong shape, naming its key and shard."""
    def refuse(key: str, value, expected: str, file=None) -> None:
        shard = f" (shard {file})" if isinstance(file, str) else ""
        raise DatasetError(f"{path}: unreadable manifest: {key}={repr(value)[:60]}{shard}, "
                           f"expected {expected}")

    for name, split in splits.items():
        key = f"splits.{name}"
        if not isinstance(split, dict):
            refuse(key, split, "a JSON object with 'shards'")
        shards = split.get("shards")
        if not isinstance(shards, list):
            refuse(f"{key}.shards", shards, "a JSON array of shards")
        for position, shard in enumerate(shards):
            shard_key = f"{key}.shards[{position}]"
            if not isinstance(shard, dict):
                refuse(shard_key, shard, "a JSON object (file, num_records, num_bytes, sha256)")
            file = shard.get("file")
            for field, (kind, expected) in _SHARD_FIELDS.items():
                if field not in shard:
                    refuse(f"{shard_key}.{field}", None, expected, file)
                value = shard[field]
                if (isinstance(value, bool) or not isinstance(value, kind)
                        or (kind is int and value < 0)):
                    refuse(f"{shard_key}.{field}", value, expected, file)


def _issues(data: dict, manifest: Manifest) -> list[ManifestIssue]:
    """Where the manifest contradicts itself: counts, shards listed twice, keys, classes."""
    issues = []
    first_listed: dict[str, str] = {}
    for name, split in data["splits"].items():
        for position, shard in enumerate(split["shards"]):
            key, file = f"splits.{name}.shards[{position}]", shard["file"]
            if file in first_listed:
                issues.append(ManifestIssue(
                    key, f"{file} is listed again (first at {first_listed[file]}): readers "
                    "would read its records twice", file=file, duplicate=True))
            else:
                first_listed[file] = key
        info = manifest.splits[name]
        for field, total in (("num_records", info.num_records), ("num_bytes", info.num_bytes)):
            if field in split and not _same_count(split[field], total):
                issues.append(ManifestIssue(
                    f"splits.{name}.{field}", f"{split[field]!r}, but its "
                    f"{len(info.shards)} shard(s) add up to {total}"))
    totals = data.get("totals")
    if totals is not None and not isinstance(totals, dict):
        issues.append(ManifestIssue("totals", f"{repr(totals)[:60]}: expected a JSON object"))
    elif totals:
        for field, total in (("num_records", manifest.num_records),
                             ("num_bytes", manifest.num_bytes),
                             ("num_shards", len(manifest.shards))):
            if field in totals and not _same_count(totals[field], total):
                issues.append(ManifestIssue(f"totals.{field}", f"{totals[field]!r}, but the "
                                            f"splits' shards add up to {total}"))
    return issues + _shape_issues(data["features"]) + _key_issues(manifest)


# Protobuf refuses a message of 2 GiB or more: no record holds a feature beyond it, and a
# pipeline would allocate a batch of such shapes before it found out.
MAX_RECORD_BYTES = (1 << 31) - 1
# The fewest bytes one value of a list takes in a record: a packed float, a one-byte varint,
# a string's tag and length; raw bytes take their dtype's size (1 where it is not known).
_VALUE_BYTES = {FeatureKind.FLOAT: 4, FeatureKind.INT64: 1, FeatureKind.BYTES: 2}
_RAW_ITEM_BYTES = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "float16": 2,
                   "int32": 4, "uint32": 4, "float32": 4, "int64": 8, "uint64": 8,
                   "float64": 8}


def _shape_issues(features: list) -> list[ManifestIssue]:
    """Feature shapes a record can hold: whole dimensions >= 0 whose values fit in one record
    (a hand-edited shape of 10**12, or -1, passed verify and failed the pipeline)."""
    issues = []
    for position, spec in enumerate(features):
        if not isinstance(spec, dict) or spec.get("shape") is None:
            continue
        shape, name = spec["shape"], spec.get("name")
        key = f"features[{position}].shape"
        if not isinstance(shape, list) or any(isinstance(d, bool) or not isinstance(d, int)
                                              for d in shape):
            issues.append(ManifestIssue(key, f"{repr(shape)[:60]} (feature {name!r}): expected "
                                        "a list of whole dimensions, or null"))
            continue
        if any(d < 0 for d in shape):
            issues.append(ManifestIssue(key, f"{shape} (feature {name!r}): expected dimensions "
                                        ">= 0"))
            continue
        values = 1
        for d in shape:
            values *= d
        encoding, kind = spec.get("encoding"), spec.get("kind")
        per_value = (_RAW_ITEM_BYTES.get(spec.get("dtype"), 1) if encoding == "raw" else
                     _VALUE_BYTES.get(FeatureKind(kind), 1) if kind in _KINDS else 1)
        if values * per_value > MAX_RECORD_BYTES:
            issues.append(ManifestIssue(key, f"{shape} (feature {name!r}): {values:,} values of "
                                        f"at least {per_value} byte(s) each, more than one "
                                        f"record can hold ({MAX_RECORD_BYTES + 1:,} bytes, "
                                        "protobuf's limit)"))
    return issues


_KINDS = {kind.value for kind in FeatureKind}


def _same_count(value, total: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value == total


def _key_issues(manifest: Manifest) -> list[ManifestIssue]:
    """The image and label keys name features; class names fit the label feature."""
    issues = []
    features = {spec.name: spec for spec in manifest.features}
    for key in ("image_key", "label_key"):
        value = getattr(manifest, key)
        if value is not None and value not in features:
            issues.append(ManifestIssue(key, f"{value!r} is not a feature; the features are: "
                                        f"{', '.join(features) or 'none'}"))
    names = manifest.class_names
    if names is None:
        return issues
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return [*issues, ManifestIssue("class_names", f"{repr(names)[:60]}: expected a JSON "
                                       "array of class names (strings), label index -> name")]
    if not names:
        issues.append(ManifestIssue("class_names", "[]: expected a name per class, or null "
                                    "where labels are not classes"))
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            issues.append(ManifestIssue(f"class_names[{index}]", f"{name!r} names class "
                                        f"{seen[name]} too: each label needs its own name"))
        seen.setdefault(name, index)
    label = features.get(manifest.label_key) if manifest.label_key else None
    if manifest.label_key is None:
        issues.append(ManifestIssue("class_names", f"{len(names)} class names but no "
                                    "label_key: no feature holds the class indices"))
    elif label is not None and (label.kind is not FeatureKind.INT64 or label.shape != []):
        shape = "variable-length" if label.shape is None else f"shape {label.shape}"
        issues.append(ManifestIssue("label_key", f"{label.name!r} is a {label.kind.value} "
                                    f"feature of {shape}; class_names needs one int64 class "
                                    "index per record"))
    return issues
