"""Parquet sources: one ``.parquet`` file, or a folder of part files as Spark and pandas write
them (``part-*.parquet``; ``_SUCCESS``, ``_metadata`` and hidden ``.crc`` files are ignored).

Every column becomes a feature, typed from the file's schema, never from its values: integers,
float16/float32 and bools as value lists, float64 and decimals of up to 15 digits as float64
raw bytes (exact), strings as UTF-8 text, binary as bytes, or as images where every value is
an encoded JPEG, PNG, GIF or BMP; fixed-size lists and fixed-shape tensors keep their shape,
lists are variable-length features; naive timestamps, dates and durations are int64 counts
of their unit (the manifest's dtype names it, e.g. ``datetime64[us]``). Anything else
(structs, maps, lists of lists, time zones, wider decimals) is refused naming the column and
its type. A null is refused naming its row and column, or skipped with ``on_error="skip"``.

Rows are read a row group at a time, streamed in batches of about :data:`_BATCH_BYTES`
(see :mod:`.tables`). Needs pyarrow (``pip install 'tfopt[parquet]'``), imported here only
once a Parquet source is read.

Example:
    >>> scanned = scan_parquet(Path("table.parquet"), label="y", skip_bad=False,
    ...                        max_size=None, quality=90, check="structure")
    >>> [spec.dtype for spec in scanned.features]
    ['float32', 'int64']
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import numpy as np

from tfopt.errors import SourceError
from tfopt.records.schema import Encoding, FeatureKind, FeatureSpec
from tfopt.records.sources.labels import choose_label
from tfopt.records.sources.numpy_arrays import array_feature
from tfopt.records.sources.paths import UnreadableFile, is_folder, list_folder, path_problem
from tfopt.records.sources.shared import (
    PARQUET_SUFFIXES,
    ScannedSource,
    SourceKind,
    require_memory_for_rows,
)
from tfopt.records.sources.tables import (
    SNIFF_BYTES,
    BlockReader,
    ImageSniff,
    LoadedRows,
    checked,
    image_spec,
    import_extra,
    refuse_image_options,
    table_labels,
)

logger = logging.getLogger("tfopt")

_BATCH_BYTES = 4 << 20  # rows streamed from a row group at a time: about this many bytes
_READ_BUFFER = 1 << 20  # a column chunk is read through a buffer this size, never whole
_LARGE_ROW_GROUP = 512 << 20  # beyond this, a row group shared by shards is read by each
_PANDAS_INDEX = re.compile(r"__index_level_\d+__")  # pandas' name for an unnamed index


def _arrow(src):
    pa = import_extra("pyarrow", "parquet", src, "Parquet")
    import_extra("pyarrow.parquet", "parquet", src, "Parquet")
    import_extra("pyarrow.compute", "parquet", src, "Parquet")
    return pa


def _open(pa, path):
    """A Parquet file opened for streaming: column chunks read through a buffer."""
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=_READ_BUFFER)
    except (pa.ArrowException, OSError) as error:
        raise SourceError(path, f"not a readable Parquet file ({error})") from None


def _part_files(src: Path) -> list[Path]:
    """The file, or the part files of a folder."""
    if src.is_file():
        return [src]
    files, others, folders = [], [], []
    try:
        entries = list_folder(src)
    except UnreadableFile as unreadable:
        raise SourceError(src, unreadable.reason) from None
    for entry in entries:  # sorted by name
        if entry.name.startswith((".", "_")):
            continue  # _SUCCESS, _metadata, _temporary/, .part-*.crc
        if is_folder(entry.path):
            folders.append(entry.name)
        elif entry.name.lower().endswith(PARQUET_SUFFIXES):
            # a pipe would block the open, a looping link raise: name it instead
            problem = path_problem(entry.path)
            if problem is not None:
                raise SourceError(entry.path, problem)
            files.append(Path(entry.path))
        else:
            others.append(entry.name)
    if folders:
        raise SourceError(src, f"holds folders ({', '.join(folders[:3])}"
                          f"{', ...' if len(folders) > 3 else ''}): a partitioned dataset is "
                          "not read, since its folder names would have to be guessed into "
                          "typed columns; convert one Parquet file or a flat folder of part "
                          "files (write without partition_cols / partitionBy)")
    if others:
        logger.warning("%s: ignoring %d file(s) that are not .parquet, e.g. %s",
                       src, len(others), others[0])
    if not files:
        raise SourceError(src, "no .parquet files in it")
    return files


def _unsupported(pa, arrow_type) -> str:
    """Why a type cannot be kept, and what to store instead."""
    types = pa.types
    if types.is_struct(arrow_type):
        return ("nested fields: store each as a column of its own (pyarrow: table.flatten(); "
                "pandas: pd.json_normalize)")
    if types.is_map(arrow_type):
        return "a map: store its keys and its values as two list columns"
    if (types.is_list(arrow_type) or types.is_large_list(arrow_type)
            or types.is_fixed_size_list(arrow_type) or types.is_list_view(arrow_type)
            or types.is_large_list_view(arrow_type)):
        return ("a list inside a list: a record holds one flat list per feature; use "
                "fixed_size_list for a fixed shape, or flatten it")
    if types.is_time(arrow_type):
        return "a time of day: cast it to int64 (its unit since midnight) or to a string"
    if types.is_null(arrow_type):
        return "no values at all (every one is null)"
    if types.is_timestamp(arrow_type):
        return (f"a timestamp with the time zone {arrow_type.tz!r}, which a record cannot keep: "
                f"convert it to UTC without a zone (pandas: s.dt.tz_convert(None); pyarrow: "
                f"cast to timestamp('{arrow_type.unit}')) or to int64")
    if types.is_decimal(arrow_type):
        return (f"up to {arrow_type.precision} significant digits, beyond the 15 that float64 "
                "keeps: cast it to float64 if its values need no more, or to a string")
    return "a type a record cannot hold (numbers, bools, strings, bytes and lists of them are)"


def _leaf(pa, arrow_type) -> tuple[str, str] | None:
    """How the values of a (leaf) type are read, and their dtype; None when not kept.

    Read kinds: ``number`` (to NumPy as they are), ``int32``/``int64`` (a date or time as the
    integer count of its unit), ``decimal`` (to float64), ``text``, ``bytes``.
    """
    types = pa.types
    if types.is_integer(arrow_type) or types.is_floating(arrow_type) or types.is_boolean(arrow_type):
        return "number", np.dtype(arrow_type.to_pandas_dtype()).name
    if types.is_timestamp(arrow_type):
        return None if arrow_type.tz else ("int64", f"datetime64[{arrow_type.unit}]")
    if types.is_date32(arrow_type):
        return "int32", "datetime64[D]"
    if types.is_date64(arrow_type):
        return "int64", "datetime64[ms]"
    if types.is_duration(arrow_type):
        return "int64", f"timedelta64[{arrow_type.unit}]"
    if types.is_decimal(arrow_type):
        # every decimal of up to 15 significant digits survives float64 and back (DBL_DIG)
        return ("decimal", "float64") if arrow_type.precision <= 15 else None
    if types.is_string(arrow_type) or types.is_large_string(arrow_type) or types.is_string_view(arrow_type):
        return "text", "string"
    if (types.is_binary(arrow_type) or types.is_large_binary(arrow_type)
            or types.is_binary_view(arrow_type) or types.is_fixed_size_binary(arrow_type)):
        return "bytes", "bytes"
    return None


def _column(pa, field, where: str) -> tuple[FeatureSpec, dict]:
    """A column's stored feature and how a worker reads it (a picklable dict).

    Raises:
        SourceError: A type that cannot be kept, named with the column.
    """
    name, arrow_type = field.name, field.type
    config = {"name": name, "dictionary": False, "structure": "scalar", "shape": [],
              "tensor": False}
    if pa.types.is_dictionary(arrow_type):  # pandas categoricals: stored as their values
        config["dictionary"] = True
        arrow_type = arrow_type.value_type
    value_type = arrow_type
    if isinstance(arrow_type, pa.FixedShapeTensorType):
        permutation = arrow_type.permutation
        if permutation is not None and list(permutation) != sorted(permutation):
            raise SourceError(where, f"column {name!r} has type {field.type}: a tensor with "
                              f"permuted dimensions {list(permutation)}; store it in row-major "
                              "order (no permutation)")
        config.update(structure="fixed", tensor=True, shape=list(arrow_type.shape))
        value_type = arrow_type.value_type
    elif isinstance(arrow_type, pa.BaseExtensionType):
        raise SourceError(where, f"column {name!r} has type {field.type}: an extension type "
                          "tfopt does not know; cast it to its storage type")
    elif pa.types.is_fixed_size_list(arrow_type):
        shape = []
        while pa.types.is_fixed_size_list(value_type):
            shape.append(value_type.list_size)
            value_type = value_type.value_type
        config.update(structure="fixed", shape=shape)
    elif pa.types.is_list_view(arrow_type) or pa.types.is_large_list_view(arrow_type):
        raise SourceError(where, f"column {name!r} has type {field.type}: a list view; cast "
                          "it to a list (pyarrow: pa.list_)")
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        config.update(structure="ragged", shape=None)
        value_type = arrow_type.value_type
    leaf = _leaf(pa, value_type)
    if leaf is None:
        raise SourceError(where, f"column {name!r} has type {field.type}: "
                          f"{_unsupported(pa, value_type)}")
    config["leaf"], dtype = leaf
    shape = config["shape"]
    if dtype == "string":
        spec = FeatureSpec(name, FeatureKind.BYTES, "string", shape, Encoding.TEXT)
    elif dtype == "bytes":
        spec = FeatureSpec(name, FeatureKind.BYTES, "bytes", shape, Encoding.BYTES)
    elif dtype.startswith(("datetime64", "timedelta64")):
        spec = FeatureSpec(name, FeatureKind.INT64, dtype, shape, Encoding.VALUES)
    else:
        spec = array_feature(name, np.dtype(dtype), shape, f"{where} [column {name!r}]")
    config["uint64"] = dtype == "uint64"
    return spec, config


def _leaf_values(pa, leaf, kind: str):
    """The values of a leaf array: a NumPy array (numbers) or a list of bytes; nulls become a
    placeholder (their rows are refused)."""
    import pyarrow.compute as pc

    if kind in ("text", "bytes"):
        return [b"" if value is None else value for value in leaf.cast(pa.large_binary()).to_pylist()]
    if kind == "decimal":  # Python's float() of a Decimal is correctly rounded
        return np.array([0.0 if value is None else float(value) for value in leaf.to_pylist()],
                        dtype=np.float64)
    if kind in ("int32", "int64"):
        leaf = leaf.view(pa.int32() if kind == "int32" else pa.int64()).cast(pa.int64())
    if leaf.null_count:
        # before to_numpy, which would turn an integer column with nulls into floats
        leaf = pc.fill_null(leaf, pa.array([0], pa.int8()).cast(leaf.type)[0])
    return leaf.to_numpy(zero_copy_only=False)


@dataclasses.dataclass
class _Values:
    """One column's values for some rows, out of Arrow: ``values`` (a NumPy array, or a list
    of bytes for text and binary), for variable-length lists the ``offsets`` of each row's
    values in it, and ``nulls``, per row, whether it is or holds a null (None: none does)."""

    count: int
    values: object
    offsets: np.ndarray | None
    nulls: np.ndarray | None


def _column_values(pa, config: dict, column) -> _Values:
    """A column's values for the rows of an Arrow array."""
    if config["dictionary"]:
        column = column.dictionary_decode()
    nulls = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
    if config["tensor"]:
        column = column.storage
    count, offsets, size = len(column), None, 1
    if config["structure"] == "ragged":
        offsets = column.offsets.to_numpy()
        leaf = column.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
        offsets = offsets - offsets[0]
    else:
        leaf = column
        levels = 1 if config["tensor"] else len(config["shape"])
        for _ in range(levels):  # the values of every row, row after row
            width = leaf.type.list_size
            leaf = leaf.values.slice(leaf.offset * width, len(leaf) * width)
            size *= width
    if leaf.null_count:  # a null inside a list: its row is refused
        null_values = np.flatnonzero(leaf.is_null().to_numpy(zero_copy_only=False))
        rows = (np.searchsorted(offsets, null_values, side="right") - 1
                if offsets is not None else null_values // size)
        nulls = np.zeros(count, dtype=bool) if nulls is None else nulls.copy()
        nulls[rows] = True
    return _Values(count, _leaf_values(pa, leaf, config["leaf"]), offsets, nulls)


def _joined(parts: list[_Values]) -> _Values:
    """The values of consecutive runs of rows, as one."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0].values, list):
        values = [value for part in parts for value in part.values]
    else:
        values = np.concatenate([part.values for part in parts])
    offsets = None
    if parts[0].offsets is not None:
        starts = np.cumsum([0] + [len(part.values) for part in parts[:-1]])
        offsets = np.concatenate([parts[0].offsets[:1]] + [
            part.offsets[1:] + start for part, start in zip(parts, starts, strict=True)])
    nulls = None
    if any(part.nulls is not None for part in parts):
        nulls = np.concatenate([part.nulls if part.nulls is not None
                                else np.zeros(part.count, dtype=bool) for part in parts])
    return _Values(sum(part.count for part in parts), values, offsets, nulls)


def _getter(config: dict, column: _Values, class_index: dict | None):
    """``position -> value`` for one column of a block's rows."""
    values, offsets, shape = column.values, column.offsets, config["shape"]
    as_objects = isinstance(values, list)
    if config["structure"] == "scalar":
        get = values.__getitem__
    elif offsets is not None:
        if as_objects:
            def get(position):
                return np.array(values[offsets[position]:offsets[position + 1]], dtype=object)
        else:
            def get(position):
                return values[offsets[position]:offsets[position + 1]]
    elif as_objects:
        size = int(np.prod(shape))

        def get(position):
            part = values[position * size:(position + 1) * size]
            return np.array(part, dtype=object).reshape(shape)
    else:
        get = values.reshape(column.count, *shape).__getitem__
    return checked(get, nulls=column.nulls, uint64=config["uint64"], image=config["image"],
                   class_index=class_index)


def _batch_rows(group) -> int:
    """Rows per streamed batch of a row group: about _BATCH_BYTES of its (uncompressed) data."""
    per_row = group.total_byte_size / max(1, group.num_rows)
    return max(1, min(group.num_rows, int(_BATCH_BYTES / max(per_row, 1.0))))


def scan_parquet(src: Path, *, label, skip_bad, max_size, quality, check) -> ScannedSource:
    pa = _arrow(src)
    refuse_image_options(max_size, check, "Parquet")
    files = _part_files(src)
    schemas, metadata = [], []
    for path in files:  # one open at a time: Spark writes thousands of part files
        with _open(pa, path) as handle:
            schemas.append(handle.schema_arrow)
            metadata.append(handle.metadata)
    return _scan(pa, src, files, schemas, metadata, label, skip_bad)


def _scan(pa, src: Path, files: list[Path], schemas, metadata, label, skip_bad) -> ScannedSource:
    import pyarrow.compute as pc

    schema = schemas[0]
    for path, other in zip(files[1:], schemas[1:], strict=True):
        _require_same_columns(files[0], schema, path, other)
    fields = [field for field in schema if not _PANDAS_INDEX.fullmatch(field.name)]
    if len(fields) < len(schema):
        logger.info("%s: leaving out pandas' index column(s) %s (a DataFrame's unnamed index)",
                    src, [field.name for field in schema if _PANDAS_INDEX.fullmatch(field.name)])
    names = [field.name for field in fields]
    if not names:
        raise SourceError(src, "no columns")
    if any(not name for name in names):
        raise SourceError(src, "a column without a name; every column becomes a named feature")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SourceError(src, f"duplicate column names {duplicates}")
    specs, configs = zip(*(_column(pa, field, str(files[0])) for field in fields), strict=True)
    specs, configs = list(specs), list(configs)
    label_key = choose_label(label, names, src, "column")

    # the row counts are the footers' word: checked before a list of that length is made
    require_memory_for_rows(sum(part.num_rows for part in metadata), src)
    # blocks: every non-empty row group of every file, in order
    blocks, starts, row_bytes, file_starts = [], [], [], []
    total = 0
    largest = 0
    for file_index, part in enumerate(metadata):
        file_starts.append(total)
        for group_index in range(part.num_row_groups):
            group = part.row_group(group_index)
            if not group.num_rows:
                continue
            blocks.append([file_index, group_index, total, group.num_rows, _batch_rows(group)])
            starts.append(total)
            # a row's share of its row group's data (one int object for the whole group)
            row_bytes.extend([int(group.total_byte_size / group.num_rows)] * group.num_rows)
            largest = max(largest, group.total_byte_size)
            total += group.num_rows
    if not total:
        raise SourceError(src, "no rows")
    if largest > _LARGE_ROW_GROUP:
        logger.warning("%s: row groups of up to %.0f MiB: each shard drawing rows from one "
                       "streams all of it, so a row group shared by several shards is read "
                       "several times; row groups of 64-256 MiB convert faster (pyarrow: "
                       "row_group_size=; Spark: parquet.block.size)", src, largest / 2**20)

    def where_of(row: int) -> str:
        file_index = int(np.searchsorted(file_starts, row, side="right") - 1)
        return f"{files[file_index]} row {row - file_starts[file_index]}"

    sniffs = {config["name"]: ImageSniff(config["name"]) for config in configs
              if config["leaf"] == "bytes" and config["structure"] == "scalar"
              and config["name"] != label_key}
    label_config = next((c for c in configs if c["name"] == label_key), None)
    if label_config is not None and label_config["structure"] != "scalar":
        raise SourceError(files[0], f"label {label_key!r} must hold one value per example; "
                          f"column {label_key!r} has type {schema.field(label_key).type}")

    blocks_of_file: dict[int, list] = {}
    for block in blocks:
        blocks_of_file.setdefault(block[0], []).append(block)

    def column_batches(name: str):
        """``(first row, array)`` of one column over every row group, streamed."""
        for file_index, file_blocks in blocks_of_file.items():
            with _open(pa, files[file_index]) as handle:
                for _, group_index, start, _, batch_rows in file_blocks:
                    row = start
                    for batch in _batches(pa, handle, files[file_index], group_index,
                                          batch_rows, [name], start - file_starts[file_index]):
                        yield row, _decoded(batch.column(0))
                        row += batch.num_rows

    # one column at a time: a binary column is read only until a value that is no image
    for name, sniff in sniffs.items():
        for row, column in column_batches(name):
            sniff.see(pc.binary_slice(column, 0, SNIFF_BYTES).to_pylist(), where_of, row)
            if sniff.done:
                break
    label_chunks, null_labels = [], {}
    for row, column in column_batches(label_key) if label_key else ():
        if column.null_count:
            for offset in np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False)):
                null_labels[row + int(offset)] = f"label {label_key!r} is null"
        label_chunks.append(_leaf_values(pa, column, label_config["leaf"]))

    for index, config in enumerate(configs):
        sniff = sniffs.get(config["name"])
        encoding = sniff.encoding("column") if sniff is not None else None
        config["image"] = encoding is not None
        if encoding is not None:
            specs[index] = image_spec(config["name"], encoding)
    image_key = next((config["name"] for config in configs if config["image"]), None)

    skipped = []
    items = list(range(total))
    labels = class_names = None
    if label_key is not None:
        values = (np.concatenate(label_chunks) if label_config["leaf"] not in ("text", "bytes")
                  else np.array([value for chunk in label_chunks for value in chunk], dtype=bytes))
        index = names.index(label_key)
        items, labels, class_names, specs[index] = table_labels(
            values, label_key, specs[index], null_labels, f"{src} [column {label_key!r}]",
            where_of, skip_bad, skipped)
    return ScannedSource(
        kind=SourceKind.PARQUET, path=str(src), items=items, labels=labels,
        item_bytes=row_bytes if len(items) == total else [row_bytes[row] for row in items],
        features=specs, class_names=class_names, image_key=image_key, label_key=label_key,
        skipped=skipped, blocks=starts,
        reader_config={"files": [str(path) for path in files], "file_starts": file_starts,
                       "blocks": blocks, "columns": configs, "label_key": label_key,
                       "class_names": class_names},
    )


def _decoded(column):
    """A column with dictionary encoding undone (pandas categoricals)."""
    import pyarrow as pa

    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _require_same_columns(first: Path, schema, path: Path, other) -> None:
    """Part files of one table share their columns and types (nullability aside)."""
    types = {field.name: field.type for field in schema}
    theirs = {field.name: field.type for field in other}
    for name, arrow_type in types.items():
        if name not in theirs:
            raise SourceError(path, f"has no column {name!r}, which {first.name} has; the part "
                              "files of a table share their columns")
        if theirs[name] != arrow_type:
            raise SourceError(path, f"column {name!r} has type {theirs[name]}, {first.name} "
                              f"has {arrow_type}; the part files of a table share their types")
    extra = [name for name in theirs if name not in types]
    if extra:
        raise SourceError(path, f"has column {extra[0]!r}, which {first.name} has not; the part "
                          "files of a table share their columns")


def _batches(pa, handle, path, group_index: int, batch_rows: int, columns, first_row: int):
    """Stream a row group's columns in batches; damage is named with the file and rows."""
    try:
        yield from handle.iter_batches(batch_size=batch_rows, row_groups=[group_index],
                                       columns=columns, use_threads=False)
    except (pa.ArrowException, OSError) as error:
        rows = handle.metadata.row_group(group_index).num_rows
        raise SourceError(path, f"row group {group_index} (rows {first_row} to "
                          f"{first_row + rows - 1}) cannot be read, the file is damaged "
                          f"({error})") from None


def parquet_reader(config: dict, items):
    files, blocks, file_starts = config["files"], config["blocks"], config["file_starts"]
    pa = _arrow(files[0])
    columns = config["columns"]
    names = [column["name"] for column in columns]
    class_index = ({name.encode("utf-8"): index
                    for index, name in enumerate(config["class_names"])}
                   if config["class_names"] else None)
    opened: dict[int, object] = {}

    def handle_of(file_index: int):
        if file_index not in opened:
            for handle in opened.values():  # a shard reads few blocks: one file open at a time
                handle.close()
            opened.clear()
            opened[file_index] = _open(pa, files[file_index])
        return opened[file_index]

    def where_of(row: int) -> str:
        file_index = int(np.searchsorted(file_starts, row, side="right") - 1)
        return f"{files[file_index]} row {row - file_starts[file_index]}"

    def load(block: int, rows: np.ndarray) -> LoadedRows:
        file_index, group_index, start, _, batch_rows = blocks[block]
        wanted = rows - start
        parts: list[list[_Values]] = [[] for _ in columns]
        offset = 0
        for batch in _batches(pa, handle_of(file_index), files[file_index], group_index,
                              batch_rows, names, start - file_starts[file_index]):
            low, high = np.searchsorted(wanted, [offset, offset + batch.num_rows])
            if high > low:
                # out of Arrow batch by batch: a block's rows are held once, as NumPy arrays
                # and bytes, never also as the batches they came in
                piece = batch.take(pa.array(wanted[low:high] - offset))
                for index, column in enumerate(columns):
                    parts[index].append(_column_values(pa, column, piece.column(index)))
            offset += batch.num_rows
            if high == len(wanted):
                break  # every row this shard needs from the group: stop streaming it
        getters = [
            (column["name"],
             _getter(column, _joined(parts[index]),
                     class_index if column["name"] == config["label_key"] else None))
            for index, column in enumerate(columns)
        ]
        return LoadedRows(rows, getters, where_of, "column")

    return BlockReader(items, [block[2] for block in blocks], load)

