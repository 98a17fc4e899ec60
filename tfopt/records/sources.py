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
        labels: The class label of each item (for a stratified validation split), or None.
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
            src, f"unknown source file type {suffix!r}: expected .npz, .npy, .csv or a folder"
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
            f"--label {label!r}: labels of an image folder come from its class folders; "
            "--label applies to NumPy and CSV sources"
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
        raise SourceError(src, "no class folders: an image folder is laid out as SRC/<class>/<image>")

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
            with archive.open(info) as member:
                shape, dtype, fortran = _read_npy_header(member, where)
                header_length = member.tell()
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
        # one byte per value as raw bytes beats a varint list 2-4x in size and parse time;
        # uint64 does not fit int64, so it travels as raw bytes too
        if (dtype.itemsize == 1 and size > 1) or dtype == np.uint64:
            return FeatureSpec(ref.key, FeatureKind.BYTES, dtype.name, example_shape, Encoding.RAW)
        return FeatureSpec(ref.key, FeatureKind.INT64, dtype.name, example_shape, Encoding.VALUES)
    if dtype.kind == "f":
        if dtype.itemsize <= 4:  # float16 and float32 are exact in a float list
            return FeatureSpec(ref.key, FeatureKind.FLOAT, dtype.name, example_shape, Encoding.VALUES)
        # float64 would lose precision in a float (32-bit) list: keep its bytes
        return FeatureSpec(ref.key, FeatureKind.BYTES, dtype.name, example_shape, Encoding.RAW)
    raise SourceError(where, f"unsupported dtype {dtype} (numbers, bools and strings are)")


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
        where = f"{ref.file} [key {ref.key!r}]" if ref.member else ref.file
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
    labels = class_names = None
    reader_config = {"refs": [dataclasses.asdict(ref) for ref in refs], "label_key": label_key,
                     "label_map": None}
    if label_key is not None:
        label_ref = next(ref for ref in refs if ref.key == label_key)
        label_values = _load_array(label_ref)
        labels, class_names, label_spec = _labels_from_values(label_values, label_key, src)
        if class_names is not None:
            reader_config["label_map"] = class_names
        features = [label_spec if spec.name == label_key else spec for spec in features]
    row_bytes = sum(np.dtype(ref.dtype).itemsize * math.prod(ref.shape[1:]) for ref in refs)
    return ScannedSource(
        kind=SourceKind.NUMPY, path=str(src), items=list(range(count)), labels=labels,
        item_bytes=[row_bytes + 16 * len(refs)] * count, features=features,
        class_names=class_names, image_key=None, label_key=label_key, skipped=[],
        reader_config=reader_config,
    )


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
        raise SourceError(f"{ref.file} [key {ref.key!r}]",
                          f"cannot be read, corrupt archive ({error})") from None


def _labels_from_values(values: np.ndarray, key: str, where: Path):
    """Class labels from a label array or column: integers as they are, strings as classes."""
    if values.ndim != 1:
        raise SourceError(where, f"label {key!r} must hold one value per example, "
                          f"got shape {values.shape}")
    if values.dtype.kind in "US":
        names = sorted({str(v) if values.dtype.kind == "U" else v.decode() for v in values})
        index = {name: i for i, name in enumerate(names)}
        as_text = values.astype(str) if values.dtype.kind == "U" else [v.decode() for v in values]
        labels = [index[str(v)] for v in as_text]
        spec = FeatureSpec(key, FeatureKind.INT64, "int64", [], Encoding.VALUES)
        return labels, names, spec
    if values.dtype.kind in "biu":
        spec = FeatureSpec(key, FeatureKind.INT64, "int64", [], Encoding.VALUES)
        return [int(v) for v in values], None, spec
    raise SourceError(where, f"label {key!r} must hold integers or class names, got {values.dtype}")


def _choose_label(label: str | None, names: list[str], src: Path, what: str) -> str | None:
    if label is not None:
        if label not in names:
            raise InvalidArgumentError(
                f"--label {label!r}: no such {what} in {src}; it has: {', '.join(names)}"
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


def _parses_as(convert, text: str) -> bool:
    """Whether ``convert(text)`` (int or float) accepts the text."""
    try:
        convert(text)
    except ValueError:
        return False
    return True


_INT64 = np.iinfo(np.int64)


def _fits_int64(text: str) -> bool:
    return _INT64.min <= int(text) <= _INT64.max


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
    width = len(header)
    # per column: could every value so far be an int / a float? any empty cells?
    is_int = [True] * width
    is_float = [True] * width
    has_empty = [False] * width
    # the first integer per column beyond int64 (line, text): an int64 feature cannot hold it
    too_large: list[tuple[int, str] | None] = [None] * width
    # per column: numbers before its first cell that is not one (line, text); one stray cell
    # ("n/a", "1,5") turns a column of numbers into text, which is worth a warning
    numbers = [0] * width
    first_text: list[tuple[int, str] | None] = [None] * width
    label_values = []
    items, sizes, skipped = [], [], []
    for line_number, offset, fields in rows:
        if not fields:
            continue  # blank line
        if len(fields) != width:
            reason = f"row at line {line_number} has {len(fields)} fields; the header has {width}"
            if not skip_bad:
                raise SourceError(src, reason)
            skipped.append(SkippedItem(f"{src}:{line_number}", reason))
            continue
        for column, text in enumerate(fields):
            if text == "":
                has_empty[column] = True
                continue
            if is_int[column] and not _parses_as(int, text):
                is_int[column] = False
            elif is_int[column] and too_large[column] is None and not _fits_int64(text):
                too_large[column] = (line_number, text)
            if is_float[column] and not is_int[column] and not _parses_as(float, text):
                is_float[column] = False
                first_text[column] = (line_number, text)
            if is_float[column]:
                numbers[column] += 1
        if label_key is not None:
            label_values.append(fields[header.index(label_key)])
        items.append((line_number, offset))
        sizes.append(sum(len(text) for text in fields) + 4 * width)
    if not items:
        raise SourceError(src, "no data rows after the header")

    kinds = []
    features = []
    for column, name in enumerate(header):
        if is_int[column] and not has_empty[column]:
            if too_large[column] is not None:
                line_number, text = too_large[column]
                raise SourceError(src, f"line {line_number}: column {name!r} holds {text[:40]}, "
                                  f"outside int64 ({_INT64.min} to {_INT64.max}), the integer "
                                  "type a TFRecord stores")
            kinds.append("int")
            features.append(FeatureSpec(name, FeatureKind.INT64, "int64", [], Encoding.VALUES))
        elif is_float[column] or is_int[column]:
            kinds.append("float")  # empty cells become NaN
            features.append(FeatureSpec(name, FeatureKind.FLOAT, "float32", [], Encoding.VALUES))
        else:
            if numbers[column]:
                line_number, text = first_text[column]
                logger.warning("%s: column %r is read as text: line %d holds %r after %d "
                               "number(s); if the column holds numbers, fix that cell (an empty "
                               "cell becomes NaN)", src, name, line_number, text[:40],
                               numbers[column])
            kinds.append("text")
            features.append(FeatureSpec(name, FeatureKind.BYTES, "string", [], Encoding.TEXT))

    labels = class_names = None
    if label_key is not None:
        column = header.index(label_key)
        if kinds[column] == "text":
            values = np.asarray(label_values, dtype=str)
        elif kinds[column] == "int":
            values = np.asarray([int(v) for v in label_values], dtype=np.int64)
        else:
            raise SourceError(src, f"label column {label_key!r} must hold integers or class "
                              "names, not decimals or empty cells")
        labels, class_names, label_spec = _labels_from_values(values, label_key, src)
        features[column] = label_spec
        if class_names is not None:
            kinds[column] = "class"
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
        if kind == "float":
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
