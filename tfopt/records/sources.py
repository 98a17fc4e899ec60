"""Raw data sources for ``convert``: image folders, NumPy arrays and CSV files.

A source is used in two places. ``scan_source`` runs once in the main process: it lists the
items (cheaply: names, offsets, headers; never the data), infers the schema and reports bad input
that can be seen without decoding. ``open_reader`` runs in each shard-writing process and turns
one item into the values of one record, reporting bad items with their file and row or key.

Items are small picklable values (a relative path, a row index) so that plans can be shipped to
worker processes and hashed for ``--resume``.
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import hashlib
import io
import logging
import math
import os
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from tfopt._tf_messages import short_tf_message
from tfopt.errors import InvalidArgumentError, SourceError
from tfopt.records.image_header import (
    IMAGE_EXTENSIONS,
    ImageFormat,
    image_size,
    jpeg_structure,
    sniff_format,
)
from tfopt.records.manifest import SkippedItem
from tfopt.records.schema import (
    IMAGE_FILENAME_KEY,
    IMAGE_FORMAT_KEY,
    IMAGE_HEIGHT_KEY,
    IMAGE_KEY,
    IMAGE_WIDTH_KEY,
    LABEL_KEY,
    Encoding,
    FeatureKind,
    FeatureSpec,
)

logger = logging.getLogger("tfopt")

# Label names recognised without --label, in order of preference.
DEFAULT_LABEL_NAMES = ("label", "labels", "class", "target", "y")

_INT64 = np.iinfo(np.int64)  # the one integer type of a TFRecord (tf.train.Int64List)


class SourceKind(str, enum.Enum):
    IMAGES = "images"
    NUMPY = "numpy"
    CSV = "csv"


class BadItem(Exception):
    """An item that cannot be converted; ``convert`` raises it or records it as skipped."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason

    def as_source_error(self) -> SourceError:
        return SourceError(self.where, self.reason)


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


def detect_kind(src: Path) -> SourceKind:
    """Tell the source kind from the path: ``.npz``/``.npy``, ``.csv``, or a folder.

    Raises:
        SourceError: ``src`` does not exist or is not a known kind.
    """
    if not src.exists():
        raise SourceError(src, "does not exist")
    if src.is_file():
        suffix = src.suffix.lower()
        if suffix in (".npz", ".npy"):
            return SourceKind.NUMPY
        if suffix in (".csv", ".tsv"):
            return SourceKind.CSV
        raise SourceError(
            src, f"unknown source file type {suffix!r}: expected a .npz, .npy, .csv or .tsv "
            "file, or a folder (of .npy files, or of class folders of images)"
        )
    entries = [entry for entry in os.scandir(src) if not entry.name.startswith(".")]
    if any(entry.is_file() and entry.name.lower().endswith(".npy") for entry in entries):
        return SourceKind.NUMPY
    return SourceKind.IMAGES


def scan_source(
    src: Path, kind: SourceKind, *, label: str | None, skip_bad: bool, max_size: int | None = None,
    quality: int = 90, check: str = "structure",
) -> ScannedSource:
    """Scan ``src`` as ``kind``; see :class:`ScannedSource`.

    Raises:
        SourceError: Bad input (named with file and row or key) when ``skip_bad`` is False, or
            input with nothing usable in it.
        InvalidArgumentError: ``label`` names no column or array.
    """
    src = Path(src)
    # --from skips detect_kind, and can name a kind that does not fit the path: say so before
    # a scanner trips on it (IsADirectoryError and kin)
    if not src.exists():
        raise SourceError(src, "does not exist")
    if kind is SourceKind.IMAGES and not src.is_dir():
        raise SourceError(src, "is a file; an image source is a folder laid out as "
                          "SRC/<class>/<image>")
    if kind is SourceKind.CSV and not src.is_file():
        raise SourceError(src, "is a folder; a CSV source is a .csv or .tsv file with a header row")
    scanner = _SCANNERS[kind]
    return scanner(src.resolve(), label=label, skip_bad=skip_bad,
                   max_size=max_size, quality=quality, check=check)


def open_reader(kind: SourceKind, config: dict) -> Callable[[object], dict]:
    """A function ``item -> {feature name: value}`` for a worker process.

    The reader raises :class:`BadItem` for an item that cannot be converted.
    """
    return _READERS[kind](config)


# ---------------------------------------------------------------------------------------------
# Image folders: SRC/<class>/<file>


def _scan_images(src: Path, *, label, skip_bad, max_size, quality, check) -> ScannedSource:
    if label is not None:
        raise InvalidArgumentError(
            f"label {label!r}: the labels of an image folder come from its class folders; "
            "a label name applies to NumPy and CSV sources only"
        )
    class_dirs = sorted(
        (entry for entry in os.scandir(src) if entry.is_dir() and not entry.name.startswith(".")),
        key=lambda entry: entry.name,
    )
    stray = [entry.name for entry in os.scandir(src)
             if entry.is_file() and not entry.name.startswith(".")]
    if stray:
        logger.warning("%s: ignoring %d file(s) outside class folders, e.g. %s",
                       src, len(stray), stray[0])
    if not class_dirs:
        # detect_kind sends every folder without .npy files here: say what both kinds need
        found = f"; it holds {len(stray)} other file(s), e.g. {stray[0]}" if stray else ""
        raise SourceError(src, "neither .npy files nor class folders of images in it: a folder "
                          "source holds .npy arrays (one per feature) or is an image folder "
                          f"laid out as SRC/<class>/<image>{found}")

    items, labels, sizes, skipped = [], [], [], []
    stamp = hashlib.sha256()

    def bad(where: str, reason: str) -> None:
        if not skip_bad:
            raise SourceError(where, reason)
        skipped.append(SkippedItem(where, reason))

    for class_index, class_dir in enumerate(class_dirs):
        found = 0
        for root, dirs, files in os.walk(class_dir.path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                if name.startswith("."):
                    continue  # .DS_Store and friends
                path = Path(root, name)
                if path.suffix.lower() not in IMAGE_EXTENSIONS:
                    allowed = ", ".join(sorted(IMAGE_EXTENSIONS))
                    bad(str(path), f"not an image file (extension {path.suffix!r}; expected one of {allowed})")
                    continue
                try:
                    status = path.stat()
                except OSError as error:
                    bad(str(path), f"cannot be read ({error.strerror})")
                    continue
                size = status.st_size
                relative = str(path.relative_to(src))
                stamp.update(f"{relative}\0{size}\0{status.st_mtime_ns}\n".encode())
                items.append((relative, class_index))
                labels.append(class_index)
                sizes.append(size)
                found += 1
        if not found:
            bad(class_dir.path, "empty class folder: no images in it")
    if not items:
        raise SourceError(src, "no images found in its class folders")

    features = [
        FeatureSpec(IMAGE_KEY, FeatureKind.BYTES, "uint8", None, Encoding.JPEG),
        FeatureSpec(IMAGE_FORMAT_KEY, FeatureKind.BYTES, "string", [], Encoding.TEXT),
        FeatureSpec(IMAGE_HEIGHT_KEY, FeatureKind.INT64, "int64", [], Encoding.VALUES),
        FeatureSpec(IMAGE_WIDTH_KEY, FeatureKind.INT64, "int64", [], Encoding.VALUES),
        FeatureSpec(IMAGE_FILENAME_KEY, FeatureKind.BYTES, "string", [], Encoding.TEXT),
        FeatureSpec(LABEL_KEY, FeatureKind.INT64, "int64", [], Encoding.VALUES),
    ]
    return ScannedSource(
        kind=SourceKind.IMAGES, path=str(src), items=items, labels=labels, item_bytes=sizes,
        features=features, class_names=[entry.name for entry in class_dirs],
        image_key=IMAGE_KEY, label_key=LABEL_KEY, skipped=skipped,
        reader_config={"root": str(src), "max_size": max_size, "quality": quality,
                       "check": check},
        content_stamp=stamp.hexdigest(),
    )


def _image_reader(config: dict):
    import tensorflow as tf  # only worker processes decode

    root = Path(config["root"])
    max_size = config["max_size"]
    quality = config["quality"]
    check = config["check"]

    def read(item) -> dict:
        relative, label = item
        path = root / relative
        try:
            data = path.read_bytes()
        except OSError as error:
            raise BadItem(str(path), f"cannot be read ({error.strerror})") from None
        if not data:
            raise BadItem(str(path), "empty file")
        image_format = sniff_format(data)
        if image_format is None:
            raise BadItem(str(path), f"not a JPEG, PNG, GIF or BMP image (starts with {data[:8]!r})")
        try:
            height, width = image_size(data, image_format)
        except ValueError as error:
            raise BadItem(str(path), f"malformed {image_format.value} header: {error}") from None
        try:
            if max_size and max(height, width) > max_size:
                data, height, width = _downscale(tf, data, max_size, quality)
                image_format = ImageFormat.JPEG
            elif image_format is ImageFormat.JPEG and check == "structure":
                structure = jpeg_structure(data)
                if structure.problem:
                    raise BadItem(str(path),
                                  f"cannot be decoded, truncated or corrupt ({structure.problem})")
                if structure.progressive:  # the walk cannot vouch for its scans: decode
                    _check_decodes(tf, data, image_format, height, width)
            else:
                _check_decodes(tf, data, image_format, height, width)
        except tf.errors.OpError as error:
            reason = short_tf_message(error)
            raise BadItem(str(path), f"cannot be decoded, truncated or corrupt ({reason})") from None
        return {
            IMAGE_KEY: data,
            IMAGE_FORMAT_KEY: image_format.value.encode(),
            IMAGE_HEIGHT_KEY: height,
            IMAGE_WIDTH_KEY: width,
            IMAGE_FILENAME_KEY: relative.encode("utf-8", "surrogateescape"),
            LABEL_KEY: label,
        }

    return read


def _check_decodes(tf, data: bytes, image_format: ImageFormat, height: int, width: int) -> None:
    """Decode once to prove the image is whole (``check="decode"``, and every non-JPEG).

    JPEGs decode at 1/8 scale: the entropy-coded data is still read to the end (so truncation and
    corrupt segments are caught) but the inverse DCT and colour conversion, most of the cost,
    run on 1/64 of the pixels: about 1.5x faster than a full decode on 400-px photos here.
    """
    if image_format is ImageFormat.JPEG:
        decoded = tf.io.decode_jpeg(data, ratio=8)
        expected = (math.ceil(height / 8), math.ceil(width / 8))
    else:
        decoded = tf.io.decode_image(data, expand_animations=False)
        expected = (height, width)
    if tuple(decoded.shape[:2]) != expected:
        raise tf.errors.InvalidArgumentError(
            None, None, f"decoded size {tuple(decoded.shape[:2])} does not match the header's"
        )


def _downscale(tf, data: bytes, max_size: int, quality: int) -> tuple[bytes, int, int]:
    """Shrink an image so its longer side is ``max_size``, keep the aspect ratio, JPEG it."""
    image = tf.io.decode_image(data, channels=3, expand_animations=False)
    height, width = int(image.shape[0]), int(image.shape[1])
    scale = max_size / max(height, width)
    new_size = (max(1, round(height * scale)), max(1, round(width * scale)))
    # antialias: without it, downscaling by 2x or more aliases fine textures
    resized = tf.image.resize(image, new_size, method="bilinear", antialias=True)
    resized = tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8)
    encoded = tf.io.encode_jpeg(resized, quality=quality, chroma_downsampling=True)
    return encoded.numpy(), new_size[0], new_size[1]


# ---------------------------------------------------------------------------------------------
# NumPy: one .npz, one .npy, or a folder of .npy files with the same first dimension


@dataclasses.dataclass(frozen=True)
class _ArrayRef:
    """Where one array lives, so a worker can memory-map it instead of loading it."""

    key: str
    file: str
    member: str | None  # the .npz member, or None for a .npy file
    shape: tuple
    dtype: str
    fortran_order: bool
    data_offset: int | None  # byte offset of the array data when it can be memory-mapped


def _read_npy_header(handle, where: str) -> tuple[tuple, np.dtype, bool]:
    try:
        version = np.lib.format.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
    except ValueError as error:
        raise SourceError(where, f"not a valid .npy array ({error})") from None
    return tuple(shape), dtype, fortran


def _require_data(where: str, shape: tuple, dtype: np.dtype, available: int) -> None:
    """Refuse an array whose file holds less data than its header says (a copy cut short):
    memory-mapping it would fail later, in a worker, with a bare ValueError."""
    if dtype.hasobject:
        return  # pickled: no fixed size, and refused as Python objects anyway
    needed = math.prod(shape) * dtype.itemsize
    if available < needed:
        raise SourceError(where, f"truncated: its header says {dtype} of shape {shape} "
                          f"({needed:,} bytes of data), the file holds {max(available, 0):,}")


def _npz_refs(path: Path) -> list[_ArrayRef]:
    refs = []
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as error:
        raise SourceError(path, f"not a readable .npz archive ({error})") from None
    with archive, open(path, "rb") as raw:
        for info in archive.infolist():
            if not info.filename.endswith(".npy"):
                continue
            key = info.filename[: -len(".npy")]
            where = f"{path} [key {key!r}]"
            try:
                with archive.open(info) as member:
                    shape, dtype, fortran = _read_npy_header(member, where)
                    header_length = member.tell()
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as error:
                # zipfile reads a small member whole and checks its CRC-32 at once; a damaged
                # compressed stream shows here too
                raise SourceError(where, f"damaged, cannot be read ({error}); copy the file "
                                  "again or save it anew") from None
            _require_data(where, shape, dtype, info.file_size - header_length)
            offset = None
            if info.compress_type == zipfile.ZIP_STORED:
                # local file header: 30 bytes, then the name and an extra field of its own length
                raw.seek(info.header_offset + 26)
                name_length, extra_length = np.frombuffer(raw.read(4), "<u2")
                start = info.header_offset + 30 + int(name_length) + int(extra_length)
                offset = start + header_length
                _check_stored_crc(raw, start, info, where)
            refs.append(_ArrayRef(key, str(path), info.filename, shape, dtype.str, fortran, offset))
    return refs


_CRC_CHUNK = 16 << 20


def _check_stored_crc(raw, start: int, info: zipfile.ZipInfo, where: str) -> None:
    """Check an uncompressed member's CRC-32, as np.load's read through zipfile would: the
    member is memory-mapped instead, which bypasses zipfile's check, and damage would
    otherwise be stored silently (compressed members are checked as they are inflated)."""
    raw.seek(start)
    crc, left = 0, info.compress_size
    while left > 0:
        chunk = raw.read(min(_CRC_CHUNK, left))
        if not chunk:
            break  # cut short: _require_data has named it already, or the zip index is off
        crc = zlib.crc32(chunk, crc)
        left -= len(chunk)
    if left > 0 or crc != info.CRC:
        raise SourceError(where, f"damaged: its CRC-32 is {crc:08x}, the archive says "
                          f"{info.CRC:08x}; copy the file again or save it anew")


def _npy_ref(path: Path) -> _ArrayRef:
    with open(path, "rb") as handle:
        shape, dtype, fortran = _read_npy_header(handle, str(path))
        offset = handle.tell()
        _require_data(str(path), shape, dtype, os.fstat(handle.fileno()).st_size - offset)
    return _ArrayRef(path.stem, str(path), None, shape, dtype.str, fortran, offset)


def _array_feature(ref: _ArrayRef, where: str) -> FeatureSpec:
    """Choose how an array's per-example slices are stored."""
    dtype = np.dtype(ref.dtype)
    example_shape = list(ref.shape[1:])
    size = math.prod(example_shape)
    if dtype.kind == "O":
        raise SourceError(
            where, "holds Python objects (a pickled object array); tfopt never unpickles input. "
            "Save numbers or strings instead (e.g. np.asarray(x, dtype=str))"
        )
    if dtype.kind == "U":
        return FeatureSpec(ref.key, FeatureKind.BYTES, "string", example_shape, Encoding.TEXT)
    if dtype.kind == "S":
        return FeatureSpec(ref.key, FeatureKind.BYTES, "bytes", example_shape, Encoding.BYTES)
    if dtype.kind in "biu":
        # one byte per value as raw bytes beats a varint list 2-4x in size and parse time
        if dtype.itemsize == 1 and size > 1:
            return FeatureSpec(ref.key, FeatureKind.BYTES, dtype.name, example_shape, Encoding.RAW)
        # uint64 too goes into the int64 list (tf.io.decode_raw has no uint64 to read raw bytes
        # back); _check_uint64 refuses the values beyond int64 that the list would wrap
        return FeatureSpec(ref.key, FeatureKind.INT64, dtype.name, example_shape, Encoding.VALUES)
    if dtype.kind == "f":
        if dtype.itemsize <= 4:  # float16 and float32 are exact in a float list
            return FeatureSpec(ref.key, FeatureKind.FLOAT, dtype.name, example_shape, Encoding.VALUES)
        if dtype.itemsize == 8:
            # float64 would lose precision in a float (32-bit) list: keep its bytes
            return FeatureSpec(ref.key, FeatureKind.BYTES, dtype.name, example_shape, Encoding.RAW)
        raise SourceError(where, f"dtype {dtype.name} (long double) is wider than any float "
                          "TensorFlow reads; save it as float64 (x.astype(np.float64)), which "
                          "keeps 15-17 significant digits")
    raise SourceError(where, f"unsupported dtype {dtype} (numbers, bools and strings are)")


_UINT64_CHUNK = 1 << 22  # values per pass: 32 MB of a memory-mapped array at a time


def _check_uint64(ref: _ArrayRef, where: str) -> None:
    """Refuse a uint64 array with a value beyond int64: the int64 list would wrap it
    (2**64-1 would come back as -1). One pass over the memory-mapped data, rows in chunks."""
    array = _load_array(ref)
    per_row = max(1, math.prod(ref.shape[1:]))
    rows = max(1, _UINT64_CHUNK // per_row)
    limit = np.uint64(_INT64.max)
    for start in range(0, ref.shape[0], rows):
        beyond = (np.asarray(array[start:start + rows]) > limit).reshape(-1, per_row).any(axis=1)
        if beyond.any():
            row = start + int(np.argmax(beyond))
            value = int(np.asarray(array[row]).max())
            raise SourceError(where, f"uint64 value {value} (row {row}) is beyond int64 (at most "
                              f"{_INT64.max}), the largest integer a TFRecord stores; save IDs "
                              "or hashes as x.view(np.int64) (same bits, reversible), "
                              "magnitudes as x.astype(np.float64)")


def _scan_numpy(src: Path, *, label, skip_bad, max_size, quality, check) -> ScannedSource:
    if src.is_file() and src.suffix.lower() == ".npz":
        refs = _npz_refs(src)
    elif src.is_file():
        refs = [_npy_ref(src)]
    else:
        refs = [_npy_ref(path) for path in sorted(src.iterdir())
                if path.suffix.lower() == ".npy" and not path.name.startswith(".")]
    if not refs:
        raise SourceError(src, "no arrays (.npy files or .npz members) in it")
    features = []
    for ref in refs:
        where = _where(ref)
        if not ref.shape:
            raise SourceError(where, "is a 0-d array: each array needs a first (example) dimension")
        features.append(_array_feature(ref, where))
    counts = {ref.key: ref.shape[0] for ref in refs}
    if len(set(counts.values())) > 1:
        listing = ", ".join(f"{key}: {count}" for key, count in counts.items())
        raise SourceError(src, f"arrays disagree in their first dimension ({listing}); "
                          "every array needs one row per example")
    count = next(iter(counts.values()))
    if count == 0:
        raise SourceError(src, "arrays have no rows")

    label_key = _choose_label(label, [ref.key for ref in refs], src, "array")
    for ref in refs:
        dtype = np.dtype(ref.dtype)
        if dtype.kind == "u" and dtype.itemsize == 8:
            _check_uint64(ref, _where(ref))
    items = list(range(count))
    labels = class_names = None
    skipped: list[SkippedItem] = []
    reader_config = {"refs": [dataclasses.asdict(ref) for ref in refs], "label_key": label_key,
                     "label_map": None}
    if label_key is not None:
        label_ref = next(ref for ref in refs if ref.key == label_key)
        where = _where(label_ref)
        label_values = _load_array(label_ref)
        labels, class_names, label_spec = _labels_from_values(
            label_values, label_key, where, next(f for f in features if f.name == label_key))
        if class_names is not None:
            reader_config["label_map"] = class_names
        features = [label_spec if spec.name == label_key else spec for spec in features]
        if label_values.dtype.kind == "f":
            # a NaN or inf regression target would make the loss NaN from its first batch on
            bad_rows = np.flatnonzero(~np.isfinite(label_values)).tolist()
            for row in bad_rows:
                reason = (f"label {label_key!r} is {label_values[row]} at row {row}; a "
                          "regression target must be a finite number")
                if not skip_bad:
                    raise SourceError(where, f"{reason}; drop such rows, or convert with "
                                      "on_error 'skip' to leave them out")
                skipped.append(SkippedItem(f"{where} row {row}", reason))
            if bad_rows:
                dropped = set(bad_rows)
                items = [row for row in items if row not in dropped]
                if not items:
                    raise SourceError(where, "every label is NaN or inf; nothing to convert")
    row_bytes = sum(np.dtype(ref.dtype).itemsize * math.prod(ref.shape[1:]) for ref in refs)
    return ScannedSource(
        kind=SourceKind.NUMPY, path=str(src), items=items, labels=labels,
        item_bytes=[row_bytes + 16 * len(refs)] * len(items), features=features,
        class_names=class_names, image_key=None, label_key=label_key, skipped=skipped,
        reader_config=reader_config,
    )


def _where(ref: _ArrayRef) -> str:
    """How messages name an array: its file, and its key inside a .npz."""
    return f"{ref.file} [key {ref.key!r}]" if ref.member else ref.file


def _load_array(ref: _ArrayRef) -> np.ndarray:
    """Memory-map the array where the file allows it; load it otherwise."""
    order = "F" if ref.fortran_order else "C"
    if ref.data_offset is not None and math.prod(ref.shape) > 0:
        return np.memmap(ref.file, dtype=np.dtype(ref.dtype), mode="r", offset=ref.data_offset,
                         shape=ref.shape, order=order)
    if ref.member is None:
        return np.load(ref.file, allow_pickle=False)
    # a compressed .npz member: it has to be inflated into memory
    logger.info("%s: %s is compressed; loading it into memory", ref.file, ref.member)
    try:
        with zipfile.ZipFile(ref.file) as archive, archive.open(ref.member) as member:
            return np.lib.format.read_array(io.BufferedReader(member), allow_pickle=False)
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError) as error:
        # damaged compressed data shows only here, when inflated (a bad CRC, a cut stream)
        raise SourceError(_where(ref), f"cannot be read, corrupt archive ({error})") from None


def _labels_from_values(values, key: str, where, value_spec: FeatureSpec):
    """The labels of a label array or column: ``(class labels, class names, stored spec)``.

    Integers are class indices as they are; strings become class indices into their sorted
    names; floats are regression targets, stored as ``value_spec`` says, with no class labels
    (so the validation split is a plain seeded random one, not stratified).
    """
    if values.ndim != 1:
        raise SourceError(where, f"label {key!r} must hold one value per example, "
                          f"got shape {values.shape}")
    class_spec = FeatureSpec(key, FeatureKind.INT64, "int64", [], Encoding.VALUES)
    if values.dtype.kind in "US":
        if values.dtype.kind == "S":
            texts = []
            for row, value in enumerate(values.tolist()):
                try:
                    texts.append(value.decode("utf-8"))
                except UnicodeDecodeError:
                    raise SourceError(where, f"label {key!r} holds {value!r} at row {row}, bytes "
                                      "that are not UTF-8 text; class names must be text: save "
                                      "the labels as str or as integer class indices") from None
        else:
            texts = values.tolist()
        names = sorted(set(texts))
        index = {name: i for i, name in enumerate(names)}
        return [index[text] for text in texts], names, class_spec
    if values.dtype.kind in "biu":
        labels = [int(v) for v in values.tolist()]
        negative = [(row, label) for row, label in enumerate(labels) if label < 0]
        if negative:
            # kept (-1 often marks "unlabelled"), but Keras's sparse losses fail on them
            row, label = negative[0]
            logger.warning("%s: label %r holds %d negative value(s), e.g. %d at row %d: class "
                           "indices start at 0 (SparseCategoricalCrossentropy fails on them; rows count "
                           "from 0); "
                           "filter those examples out or shift the labels",
                           where, key, len(negative), label, row)
        return labels, None, class_spec
    if values.dtype.kind == "f":
        return None, None, value_spec.replace(name=key)
    raise SourceError(where, f"label {key!r} must hold integers, class names or (for "
                      f"regression) floats, got {values.dtype}")


def _choose_label(label: str | None, names: list[str], src: Path, what: str) -> str | None:
    if label is not None:
        if label not in names:
            raise InvalidArgumentError(
                f"label {label!r}: no such {what} in {src}; it has: {', '.join(names)}"
            )
        return label
    return next((name for name in DEFAULT_LABEL_NAMES if name in names), None)


def _numpy_reader(config: dict):
    refs = [_ArrayRef(**{**ref, "shape": tuple(ref["shape"])}) for ref in config["refs"]]
    arrays = {ref.key: _load_array(ref) for ref in refs}
    label_map = config["label_map"]
    label_index = {name: i for i, name in enumerate(label_map)} if label_map else None

    def read(row: int) -> dict:
        values = {}
        for key, array in arrays.items():
            value = np.asarray(array[row])
            if label_index is not None and key == config["label_key"]:
                text = value.item().decode() if value.dtype.kind == "S" else str(value.item())
                value = label_index[text]
            values[key] = value
        return values

    return read


# ---------------------------------------------------------------------------------------------
# CSV with a header row


def _csv_rows(path: Path, start: int = 0) -> Iterator[tuple[int, int, list[str]]]:
    """Yield ``(line number, byte offset, fields)`` for each row from byte ``start``.

    Offsets let workers seek straight to their rows, so no process holds the whole file. Quoted
    fields with line breaks are handled by csv.reader; the offset is that of the row's first line.
    """
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    with open(path, "rb") as handle:
        handle.seek(start)
        position = start
        lines_read = 0

        def lines():
            nonlocal position, lines_read
            for raw in handle:
                position += len(raw)
                lines_read += 1
                try:
                    yield raw.decode("utf-8-sig" if position == len(raw) else "utf-8")
                except UnicodeDecodeError as error:
                    raise SourceError(path, f"line {lines_read}: not UTF-8 text ({error.reason})") from None

        reader = csv.reader(lines(), delimiter=delimiter)
        while True:
            row_start = position
            first_line = lines_read + 1
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                raise SourceError(path, f"line {first_line}: malformed CSV ({error})") from None
            yield first_line, row_start, fields


# A number in a CSV cell is plain ASCII decimal notation: optional sign, digits, decimal point,
# exponent, or a spelling of nan/inf (any case), with spaces or tabs around it. int() and float()
# alone would also take Python's '1_000' and digits of other scripts ('١٢٣' is 123).
_INT_TEXT = re.compile(r"[ \t]*[+-]?[0-9]+[ \t]*")
_DECIMAL_TEXT = re.compile(r"[ \t]*[+-]?(?:(?P<whole>[0-9]+)(?P<point>\.(?P<fraction>[0-9]*))?"
                           r"|\.(?P<only_fraction>[0-9]+))(?P<exponent>[eE][+-]?[0-9]+)?[ \t]*")
_SHORT_DECIMAL_TEXT = re.compile(r"[ \t]*[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)[ \t]*")  # no exponent
_NAN_INF_TEXT = re.compile(r"[ \t]*[+-]?(?:nan|inf|infinity)[ \t]*", re.IGNORECASE)

_FLOAT32 = np.finfo(np.float32)
_FLOAT32_MAX = float(_FLOAT32.max)
_FLOAT32_TINY = float(_FLOAT32.smallest_normal)  # below it float32 loses digits (subnormal)
_FLOAT32_DIGITS = 6  # FLT_DIG: every decimal of 6 significant digits survives float32 and back


def _float32_keeps(value: float, significant: int) -> bool:
    """Whether storing a cell's number as float32 keeps it: the float32's shortest repr reads
    back as the same float64 as the cell's text, and the float32 is finite and normal.

    So '0.1' is kept (float32 prints it as 0.1), '0.75795440294030247', '123456789' (float32
    has 123456792) and '1e39' (inf in float32) are not.

    Args:
        value: The float64 value of the cell's text (finite: nan and inf are kept anyway).
        significant: The text's count of significant digits; 6 or fewer need no repr.
    """
    magnitude = abs(value)
    if magnitude == 0:
        return True
    if not _FLOAT32_TINY <= magnitude <= _FLOAT32_MAX:
        return False
    if significant <= _FLOAT32_DIGITS:
        return True
    return float(str(np.float32(value))) == value


def _float64_holds(integer: int) -> bool:
    """Whether float64 holds an integer exactly (all up to 2**53 in magnitude, some beyond)."""
    try:
        return float(integer) == integer
    except OverflowError:  # beyond float64's range
        return False


class _Column:
    """What the cells of one CSV column allow it to be stored as, updated chunk by chunk.

    A column is int64 when every cell is an integer (and none is empty: int64 has no NaN),
    a float column when every cell is a number or empty (empty cells become NaN): float32 when
    float32 keeps every number (see :func:`_float32_keeps`), float64 otherwise; text otherwise.
    A float column whose number float64 itself would change (an integer beyond 2**53 that it
    cannot hold, a value beyond its range, a non-zero value below it) is refused, never rounded.
    """

    __slots__ = ("name", "is_int", "is_float", "float32_keeps", "has_empty", "numbers",
                 "too_large", "changed", "first_text")

    def __init__(self, name: str):
        self.name = name
        self.is_int = True  # every non-empty cell so far an integer
        self.is_float = True  # every non-empty cell so far a number (integers included)
        self.float32_keeps = True  # float32 keeps every number so far
        self.has_empty = False
        self.numbers = 0  # numbers before the first cell that is none (for a warning)
        self.too_large: tuple[int, str] | None = None  # first integer beyond int64 (line, text)
        self.changed: tuple[int, str, str] | None = None  # first number float64 changes, why
        self.first_text: tuple[int, str] | None = None  # first cell that is not a number

    def see(self, lines: list[int], texts: tuple[str, ...]) -> None:
        """Take in a chunk of the column's cells, ``texts``, read from lines ``lines``.

        A chunk at a time, with the usual cells settled by one regex and a length (the scan
        of a 300,000-row, 10-column CSV takes about 2 s either way).
        """
        if not self.is_float:
            return  # text already: nothing more to learn
        if "" in texts:
            self.has_empty = True
        is_int = self.is_int
        int_text, short_decimal = _INT_TEXT.fullmatch, _SHORT_DECIMAL_TEXT.fullmatch
        for position, (line, text) in enumerate(zip(lines, texts, strict=True)):
            if not text:
                continue
            if is_int:
                if int_text(text):
                    if len(text) > 7:  # up to 7 characters, within +-2**24: exact everywhere
                        self._see_integer(line, text, int(text))
                    continue
                is_int = self.is_int = False
            if len(text) <= 7 and short_decimal(text):
                continue  # at most 6 digits, from 1e-6 to 1e6: exact enough everywhere
            match = _DECIMAL_TEXT.fullmatch(text)
            if match is not None:
                self._see_decimal(line, text, match)
            elif not _NAN_INF_TEXT.fullmatch(text):  # nan and inf are the same in every float
                self.is_float = False
                self.first_text = (line, text)
                self.numbers += position - texts[:position].count("")
                return
        self.numbers += len(texts) - texts.count("")

    def _see_decimal(self, line: int, text: str, match: re.Match) -> None:
        if match["point"] is None and match["only_fraction"] is None and match["exponent"] is None:
            self._see_integer(line, text, int(text))  # an integer in a column of decimals
            return
        value = float(text)
        whole, fraction = match["whole"] or "", match["fraction"] or match["only_fraction"] or ""
        significant = len((whole + fraction).strip("0"))
        if self.changed is None:
            if math.isinf(value):
                self.changed = (line, text, "is beyond float64's range (about 1.8e308); write "
                                "inf if that is meant")
            elif value == 0 and significant:
                self.changed = (line, text, "is too small for float64 and would become 0; "
                                "write 0 if that is meant")
        if self.float32_keeps and not _float32_keeps(value, significant):
            self.float32_keeps = False

    def _see_integer(self, line: int, text: str, value: int) -> None:
        """An integer that may be beyond 2**24: float32 may not keep it, nor float64 one
        beyond 2**53, nor int64 one beyond 2**63."""
        if self.too_large is None and not _INT64.min <= value <= _INT64.max:
            self.too_large = (line, text)
        exact = _float64_holds(value)
        if self.changed is None and not exact:
            self.changed = (line, text, "float64, the type of a float column, cannot hold "
                            "exactly (it holds every integer up to 2**53)")
        if self.float32_keeps and not (exact and _float32_keeps(float(value), 99)):
            self.float32_keeps = False

    def feature(self, src: Path, label: bool) -> tuple[str, FeatureSpec]:
        """The column's reader kind and stored feature; refuses a column that would change."""
        name = self.name
        if self.is_int and not self.has_empty:
            if self.too_large is not None:
                line_number, text = self.too_large
                raise SourceError(src, f"line {line_number}: column {name!r} holds {text[:40]}, "
                                  f"outside int64 ({_INT64.min} to {_INT64.max}), the integer "
                                  "type a TFRecord stores")
            return "int", FeatureSpec(name, FeatureKind.INT64, "int64", [], Encoding.VALUES)
        if self.is_float:
            if self.changed is not None:
                line_number, text, why = self.changed
                message = f"line {line_number}: column {name!r} holds {text[:40]}, which {why}"
                if self.is_int:
                    message += ("; the column's empty cells make it a float column (int64 has "
                                "no NaN): fill them to keep it int64")
                raise SourceError(src, message)
            if self.float32_keeps:
                return "float32", FeatureSpec(name, FeatureKind.FLOAT, "float32", [],
                                              Encoding.VALUES)
            # float64 as raw bytes, as NumPy float64 arrays are: exact, read by tf.io.decode_raw
            return "float64", FeatureSpec(name, FeatureKind.BYTES, "float64", [], Encoding.RAW)
        if self.numbers:
            line_number, text = self.first_text
            hint = ("if the labels are numbers, fix that cell" if label else
                    "if the column holds numbers, fix that cell (an empty cell becomes NaN)")
            logger.warning("%s: column %r is read as text: line %d holds %r after %d number(s); "
                           "%s", src, name, line_number, text[:40], self.numbers, hint)
        return "text", FeatureSpec(name, FeatureKind.BYTES, "string", [], Encoding.TEXT)


_CSV_CHUNK = 4096  # rows whose cells are typed together, column by column


def _scan_csv(src: Path, *, label, skip_bad, max_size, quality, check) -> ScannedSource:
    rows = _csv_rows(src)
    try:
        _, _, header = next(rows)
    except StopIteration:
        raise SourceError(src, "empty file: a CSV source needs a header row") from None
    header = [name.strip() for name in header]
    if any(not name for name in header):
        raise SourceError(src, f"line 1: empty column name in the header {header}")
    duplicates = sorted({name for name in header if header.count(name) > 1})
    if duplicates:
        raise SourceError(src, f"line 1: duplicate column names {duplicates}")
    label_key = _choose_label(label, header, src, "column")
    label_column = header.index(label_key) if label_key is not None else None
    width = len(header)
    columns = [_Column(name) for name in header]
    label_values: list[str] = []
    items, sizes, skipped = [], [], []

    def bad(line_number: int, reason: str) -> None:
        if not skip_bad:
            raise SourceError(src, f"line {line_number}: {reason}")
        skipped.append(SkippedItem(f"{src}:{line_number}", reason))

    chunk_lines: list[int] = []
    chunk_rows: list[list[str]] = []

    def take_chunk() -> None:
        # a chunk of rows, transposed: one tuple of cells per column (none when empty)
        for column, texts in zip(columns, zip(*chunk_rows, strict=True), strict=False):
            column.see(chunk_lines, texts)
        chunk_lines.clear()
        chunk_rows.clear()

    for line_number, offset, fields in rows:
        if not fields:
            continue  # blank line
        if len(fields) != width:
            reason = f"row at line {line_number} has {len(fields)} fields; the header has {width}"
            if not skip_bad:
                raise SourceError(src, reason)
            skipped.append(SkippedItem(f"{src}:{line_number}", reason))
            continue
        if label_column is not None and not fields[label_column]:
            bad(line_number, f"empty label: column {label_key!r} needs a value in every row")
            continue
        chunk_lines.append(line_number)
        chunk_rows.append(fields)
        if len(chunk_rows) == _CSV_CHUNK:
            take_chunk()
        if label_column is not None:
            label_values.append(fields[label_column])
        items.append((line_number, offset))
        sizes.append(sum(map(len, fields)) + 4 * width)
    take_chunk()
    if not items:
        raise SourceError(src, "no data rows after the header")

    kinds, features = [], []
    for column in columns:
        kind, spec = column.feature(src, label=column.name == label_key)
        kinds.append(kind)
        features.append(spec)

    labels = class_names = None
    if label_key is not None:
        kind = kinds[label_column]
        if kind in ("float32", "float64"):
            # a regression target: a NaN or inf one would make the loss NaN
            keep = []
            for index, text in enumerate(label_values):
                if math.isfinite(float(text)):
                    keep.append(index)
                else:
                    bad(items[index][0], f"label {label_key!r} is {text.strip()}; a regression "
                        "target must be a finite number")
            if len(keep) < len(items):
                items = [items[index] for index in keep]
                sizes = [sizes[index] for index in keep]
                if not items:
                    raise SourceError(src, f"every label in column {label_key!r} is nan or inf")
        else:
            values = (np.asarray([int(v) for v in label_values], dtype=np.int64)
                      if kind == "int" else np.asarray(label_values, dtype=str))
            labels, class_names, features[label_column] = _labels_from_values(
                values, label_key, src, features[label_column])
            if class_names is not None:
                kinds[label_column] = "class"
    return ScannedSource(
        kind=SourceKind.CSV, path=str(src), items=items, labels=labels, item_bytes=sizes,
        features=features, class_names=class_names, image_key=None, label_key=label_key,
        skipped=skipped,
        reader_config={"path": str(src), "header": header, "kinds": kinds,
                       "class_names": class_names},
    )


def _csv_reader(config: dict):
    path = Path(config["path"])
    header = config["header"]
    kinds = config["kinds"]
    class_index = {name: i for i, name in enumerate(config["class_names"] or [])}

    def convert_field(kind: str, text: str):
        if kind == "int":
            return int(text)
        if kind in ("float32", "float64"):  # the writer stores the dtype; both parse as float64
            return float(text) if text != "" else math.nan
        if kind == "class":
            return class_index[text]
        return text.encode("utf-8")

    def read(item) -> dict:
        line_number, offset = item
        _, _, fields = next(_csv_rows(path, offset))
        if len(fields) != len(header):  # the file changed since the scan
            raise BadItem(f"{path}:{line_number}", "row changed since the scan")
        return {
            name: convert_field(kind, text)
            for name, kind, text in zip(header, kinds, fields, strict=True)
        }

    return read


_SCANNERS = {
    SourceKind.IMAGES: _scan_images,
    SourceKind.NUMPY: _scan_numpy,
    SourceKind.CSV: _scan_csv,
}
_READERS = {
    SourceKind.IMAGES: _image_reader,
    SourceKind.NUMPY: _numpy_reader,
    SourceKind.CSV: _csv_reader,
}
