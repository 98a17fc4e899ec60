"""NumPy sources: one ``.npz``, one ``.npy``, or a folder of ``.npy`` files (one per feature).

Every array holds one row per example (the same first dimension); workers memory-map them
instead of loading them. A compressed ``.npz`` member cannot be memory-mapped: every process
that reads it inflates it whole, so compressed members that inflate past
:data:`MAX_INFLATED_NPZ_BYTES` together are refused from the archive's index, before a byte is
inflated. ``np.load`` never unpickles (object arrays are refused).

Example:
    >>> np.savez("data.npz", x=np.zeros((10, 3), np.float32), label=np.arange(10) % 2)
    >>> scan_numpy(Path("data.npz"), label=None, skip_bad=False, max_size=None, quality=90,
    ...            check="structure").label_key
    'label'
"""

from __future__ import annotations

import dataclasses
import io
import logging
import math
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from tfopt.errors import SourceError
from tfopt.records.manifest import SkippedItem
from tfopt.records.schema import INT64_MAX, Encoding, FeatureKind, FeatureSpec
from tfopt.records.sources.labels import choose_label, labels_from_values
from tfopt.records.sources.paths import (
    UnreadableFile,
    is_utf8_name,
    list_folder,
    path_problem,
    shown_name,
)
from tfopt.records.sources.shared import ScannedSource, SourceKind, require_memory_for_rows

logger = logging.getLogger("tfopt")

# The most bytes the compressed members of one .npz may inflate to. Each shard-writing process
# of convert (one per core by default) inflates them all into its memory, as zipfile cannot
# seek in a deflate stream: at this limit 8 workers hold 8 GiB. The arrays people save with
# np.savez_compressed sit well below it (MNIST's inflate to 55 MB, CIFAR-10's to 184 MB); a
# deflate bomb, zeros a thousand times larger than its file, had every process inflate all of
# it (docs/records.md, "Memory"). Larger arrays belong uncompressed (np.savez, or .npy files),
# which convert memory-maps.
MAX_INFLATED_NPZ_BYTES = 1 << 30


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
        _require_inflatable(path, archive)  # before a byte is inflated
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


def _require_inflatable(path: Path, archive: zipfile.ZipFile) -> None:
    """Refuse an archive whose compressed arrays inflate past MAX_INFLATED_NPZ_BYTES, judged by
    the sizes its index states (zipfile inflates a member to its stated size, no further)."""
    compressed = [info for info in archive.infolist()
                  if info.filename.endswith(".npy") and info.compress_type != zipfile.ZIP_STORED]
    inflated = sum(info.file_size for info in compressed)
    if inflated > MAX_INFLATED_NPZ_BYTES:
        raise SourceError(path, f"its {len(compressed)} compressed array(s) inflate to "
                          f"{inflated:,} bytes, more than the {MAX_INFLATED_NPZ_BYTES:,} convert "
                          "inflates into each process's memory (MAX_INFLATED_NPZ_BYTES); save "
                          "them uncompressed (np.savez, or one .npy file each), which convert "
                          "memory-maps")


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
    # the stem is a feature key, text in the manifest and in each record: one not UTF-8 is
    # written with \xNN (a record's key must be UTF-8 for protobuf)
    return _ArrayRef(shown_name(path.stem), str(path), None, shape, dtype.str, fortran, offset)


def _array_feature(ref: _ArrayRef, where: str) -> FeatureSpec:
    """Choose how an array's per-example slices are stored."""
    return array_feature(ref.key, np.dtype(ref.dtype), list(ref.shape[1:]), where)


def array_feature(name: str, dtype: np.dtype, example_shape: list[int] | None,
                  where: str) -> FeatureSpec:
    """How values of ``dtype`` and per-example shape ``example_shape`` are stored.

    The rule of NumPy arrays, and of the table sources' columns (Parquet, HDF5), whose values
    are NumPy arrays once read. ``example_shape`` None is a variable-length list.
    """
    size = math.prod(example_shape) if example_shape is not None else None
    if dtype.kind == "O":
        raise SourceError(
            where, "holds Python objects (a pickled object array); tfopt never unpickles input. "
            "Save numbers or strings instead (e.g. np.asarray(x, dtype=str))"
        )
    if dtype.kind == "U":
        return FeatureSpec(name, FeatureKind.BYTES, "string", example_shape, Encoding.TEXT)
    if dtype.kind == "S":
        return FeatureSpec(name, FeatureKind.BYTES, "bytes", example_shape, Encoding.BYTES)
    if dtype.kind in "biu":
        # one byte per value as raw bytes: smaller than a varint list (2 bytes a value from
        # 128 up, 10 for a negative one) and parsed as one copy, not a varint per value
        if dtype.itemsize == 1 and (size is None or size > 1):
            return FeatureSpec(name, FeatureKind.BYTES, dtype.name, example_shape, Encoding.RAW)
        # uint64 too goes into the int64 list (tf.io.decode_raw has no uint64 to read raw bytes
        # back); _check_uint64 refuses the values beyond int64 that the list would wrap
        return FeatureSpec(name, FeatureKind.INT64, dtype.name, example_shape, Encoding.VALUES)
    if dtype.kind == "f":
        if dtype.itemsize <= 4:  # float16 and float32 are exact in a float list
            return FeatureSpec(name, FeatureKind.FLOAT, dtype.name, example_shape, Encoding.VALUES)
        if dtype.itemsize == 8:
            # float64 would lose precision in a float (32-bit) list: keep its bytes
            return FeatureSpec(name, FeatureKind.BYTES, dtype.name, example_shape, Encoding.RAW)
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
    limit = np.uint64(INT64_MAX)
    for start in range(0, ref.shape[0], rows):
        beyond = (np.asarray(array[start:start + rows]) > limit).reshape(-1, per_row).any(axis=1)
        if beyond.any():
            row = start + int(np.argmax(beyond))
            value = int(np.asarray(array[row]).max())
            raise SourceError(where, f"uint64 value {value} (row {row}) is beyond int64 (at most "
                              f"{INT64_MAX}), the largest integer a TFRecord stores; save IDs "
                              "or hashes as x.view(np.int64) (same bits, reversible), "
                              "magnitudes as x.astype(np.float64)")


def _npy_files(src: Path) -> list[Path]:
    """The .npy files of a folder source; one that is not a regular file (a named pipe would
    block the read for good) is refused, named, before any is opened."""
    try:
        entries = list_folder(src)
    except UnreadableFile as unreadable:
        raise SourceError(src, unreadable.reason) from None
    paths = [Path(entry.path) for entry in entries
             if entry.name.lower().endswith(".npy") and not entry.name.startswith(".")]
    for path in paths:
        problem = path_problem(path)
        if problem:
            raise SourceError(path, problem)
    return paths


def scan_numpy(src: Path, *, label, skip_bad, max_size, quality, check) -> ScannedSource:
    if src.is_file() and src.suffix.lower() == ".npz":
        refs = _npz_refs(src)
    elif src.is_file():
        refs = [_npy_ref(src)]
    else:
        refs = [_npy_ref(path) for path in _npy_files(src)]
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
    # a header's shape is all the row count rests on: rows of zero values need no data
    empty_rows = all(not math.prod(ref.shape[1:]) for ref in refs)
    require_memory_for_rows(count, src, f" (of shape {refs[0].shape}, rows that hold no "
                            "values)" if empty_rows else "")

    label_key = choose_label(label, [ref.key for ref in refs], src, "array")
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
        labels, class_names, label_spec = labels_from_values(
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
    escaped = [ref.key for ref in refs if ref.member is None
               and not is_utf8_name(Path(ref.file).stem)]
    return ScannedSource(
        kind=SourceKind.NUMPY, path=str(src), items=items, labels=labels, escaped_names=escaped,
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


def numpy_reader(config: dict):
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
