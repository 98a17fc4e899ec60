"""HDF5 sources: the datasets of one group of an ``.h5`` file (the root, or ``group``), one
feature each, sharing their first dimension (one row per example).

Datasets are stored as NumPy arrays of their dtype are (``numpy_arrays.array_feature``):
numbers and bools with their per-example shape, variable-length strings as UTF-8 text,
fixed-length strings as bytes, variable-length sequences (``h5py.vlen_dtype``) as
variable-length lists, and variable-length uint8 sequences that all hold JPEG, PNG, GIF or
BMP files as images. Compound, opaque, reference and other object types are refused naming
the dataset and its type. Subgroups are not read (``group`` picks one).

Nothing outside the source file is read: an external link (to another file), a virtual
dataset (whose rows live in other files, zero-filled by HDF5 where a file is missing) and a
dataset with external raw storage (its bytes in a file beside it, any file) are refused,
named with the dataset and where it points. A soft link (inside the file) is followed; one
that loops or points nowhere is refused by name.

Rows are read a block of whole chunks at a time (see :mod:`.tables`). Needs h5py
(``pip install 'tfopt[hdf5]'``), imported here only once an HDF5 source is read.

Example:
    >>> scanned = scan_hdf5(Path("data.h5"), label="y", skip_bad=False, max_size=None,
    ...                     quality=90, check="structure", group=None)
    >>> scanned.label_key
    'y'
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from tfopt.errors import SourceError
from tfopt.records.schema import Encoding, FeatureKind, FeatureSpec
from tfopt.records.sources.labels import choose_label
from tfopt.records.sources.numpy_arrays import array_feature
from tfopt.records.sources.shared import ScannedSource, SourceKind, require_memory_for_rows
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

_BLOCK_BYTES = 8 << 20  # rows read at a time: whole chunks, about this many bytes


def _h5py(src):
    return import_extra("h5py", "hdf5", src, "HDF5")


def _open(h5py, path):
    try:
        return h5py.File(path, "r")
    except OSError as error:
        raise SourceError(path, f"not a readable HDF5 file ({error})") from None


_OUTSIDE = ("tfopt reads only the source file, never a file it points to; copy the data into "
            "it (h5py: f[name] = other[name][()]) and convert that")


def _outside_problem(handle, item) -> str | None:
    """Why ``item`` (a group or dataset opened from ``handle``) would be read from outside the
    source file, or None. A virtual dataset reads other files' rows (and HDF5 zero-fills those
    of a missing file without a word); external raw storage is any file's bytes."""
    import h5py

    if item.file.filename != handle.filename:  # reached through an external link on its path
        return f"is in another file, {item.file.filename!r} (an external link)"
    if isinstance(item, h5py.Dataset):
        if item.is_virtual:
            files = sorted({source.file_name for source in item.virtual_sources()})
            return (f"is a virtual dataset, whose rows are read from "
                    f"{', '.join(repr(f) for f in files[:3])}")
        if item.external:
            files = sorted({str(entry[0]) for entry in item.external})
            return (f"has external raw storage: its bytes are read from "
                    f"{', '.join(repr(f) for f in files[:3])}")
    return None


def _resolve(handle, node, name: str, where: str):
    """``node[name]``, refused by name where its link points outside the file, loops or
    points nowhere, or where the object would read other files."""
    import h5py

    link = node.get(name, getlink=True)
    if isinstance(link, h5py.ExternalLink):
        raise SourceError(where, f"is an external link to {link.path!r} in "
                          f"{link.filename!r}: {_OUTSIDE}")
    try:
        item = node[name]
    except (KeyError, OSError, RuntimeError) as error:
        # RuntimeError: HDF5's "too many links" of a soft link that loops
        what = (f"a soft link to {link.path!r} that " if isinstance(link, h5py.SoftLink) else "")
        loops = "too many links" in str(error)
        raise SourceError(where, f"is {what or 'a link that '}"
                          f"{'loops' if loops else 'cannot be opened'} ({error})") from None
    problem = _outside_problem(handle, item)
    if problem:
        raise SourceError(where, f"{problem}: {_OUTSIDE}")
    return item


def _group(handle, group: str | None, path):
    if group is None:
        return handle
    import h5py

    node = handle
    # step by step: any part of the path could be an external link or a looping soft link
    for part in [part for part in group.split("/") if part]:
        if not isinstance(node, h5py.Group) or part not in node:
            node = None
            break
        node = _resolve(handle, node, part, f"{path} [group {group!r}]")
    if node is None:
        groups = sorted(name for name, item in handle.items() if isinstance(item, h5py.Group))
        raise SourceError(path, f"no group {group!r} in it; its groups: "
                          f"{', '.join(groups) or 'none'}")
    if not isinstance(node, h5py.Group):
        raise SourceError(path, f"{group!r} is a dataset, not a group; --group names a group "
                          "whose datasets are the features")
    return node


def _column(h5py, dataset, where: str) -> tuple[FeatureSpec, dict]:
    """A dataset's stored feature and how a worker reads it (a picklable dict).

    Raises:
        SourceError: A type that cannot be kept, named with the dataset.
    """
    name = dataset.name.rsplit("/", 1)[-1]
    dtype, shape = dataset.dtype, list(dataset.shape[1:])
    if dtype.subdtype is not None:  # an HDF5 array type: its dimensions are the example's
        dtype, inner = dtype.subdtype
        shape += list(inner)
    config = {"name": name, "path": dataset.name, "vlen": False, "text": False,
              "uint64": False, "image": False}
    string = h5py.check_string_dtype(dtype)
    vlen = h5py.check_vlen_dtype(dtype)
    if string is not None:
        config["text"] = True
        if string.length is None or string.encoding == "utf-8":
            return FeatureSpec(name, FeatureKind.BYTES, "string", shape, Encoding.TEXT), config
        return FeatureSpec(name, FeatureKind.BYTES, "bytes", shape, Encoding.BYTES), config
    refused = None
    if h5py.check_ref_dtype(dtype) is not None:
        refused = "object references, which a record cannot hold"
    elif vlen is not None:
        if not isinstance(vlen, np.dtype) or vlen.kind not in "biuf":
            refused = "variable-length sequences of a type a record cannot hold"
        elif shape:
            refused = ("variable-length sequences in a multi-dimensional dataset: a record "
                       "holds one flat list per feature")
        else:
            config.update(vlen=True, uint64=vlen == np.dtype(np.uint64))
            return array_feature(name, vlen, None, where), config
    elif dtype.names:
        refused = "a compound type: store each field as a dataset of its own"
    elif dtype.kind == "V":
        refused = ("opaque data: store binary blobs as variable-length uint8 "
                   "(h5py.vlen_dtype(np.uint8))")
    elif dtype.kind == "O":
        refused = "Python objects, which a record cannot hold"
    if refused:
        raise SourceError(where, f"has type {dtype}: {refused}")
    config["uint64"] = dtype == np.dtype(np.uint64)
    return array_feature(name, dtype, shape, where), config


def _read(dataset, start: int, stop: int, path):
    """Rows ``start:stop`` of a dataset; damage (or a compression filter missing here) is
    named with the file, dataset and rows."""
    try:
        return dataset[start:stop]
    except (OSError, ValueError, RuntimeError) as error:
        raise SourceError(path, f"dataset {dataset.name!r} rows {start} to {stop - 1} cannot "
                          f"be read ({error})") from None


def scan_hdf5(src: Path, *, label, skip_bad, max_size, quality, check, group=None) -> ScannedSource:
    h5py = _h5py(src)
    refuse_image_options(max_size, check, "HDF5")
    with _open(h5py, src) as handle:
        return _scan(h5py, src, _group(handle, group, src), label, skip_bad, group)


def _scan(h5py, src: Path, node, label, skip_bad, group) -> ScannedSource:
    datasets, subgroups = [], []
    handle = node.file
    for name in node:
        item = _resolve(handle, node, name, f"{src} [{node.name.rstrip('/')}/{name}]")
        if isinstance(item, h5py.Dataset):
            datasets.append(item)
        elif isinstance(item, h5py.Group):
            subgroups.append(name)
    if not datasets:
        hint = (f"; pass --group to convert one of its groups ({', '.join(subgroups[:5])})"
                if subgroups else "")
        raise SourceError(src, f"no datasets in group {node.name!r}{hint}")
    if subgroups:
        logger.info("%s: the subgroups of %s are not read (%s); --group converts one",
                    src, node.name, ", ".join(subgroups[:5]))

    def where(dataset) -> str:
        return f"{src} [dataset {dataset.name!r}]"

    for dataset in datasets:
        if not dataset.shape:
            raise SourceError(where(dataset), "is a scalar (0-d): each dataset needs a first "
                              "(example) dimension")
    counts = {dataset.name: dataset.shape[0] for dataset in datasets}
    if len(set(counts.values())) > 1:
        listing = ", ".join(f"{name}: {count}" for name, count in counts.items())
        raise SourceError(src, f"datasets disagree in their first dimension ({listing}); "
                          "every dataset needs one row per example")
    total = next(iter(counts.values()))
    if not total:
        raise SourceError(src, "datasets have no rows")
    # a dataset's shape is all the count rests on: unwritten chunks read as the fill value
    require_memory_for_rows(total, src)
    specs, configs = [], []
    for dataset in datasets:
        spec, config = _column(h5py, dataset, where(dataset))
        specs.append(spec)
        configs.append(config)
    names = [config["name"] for config in configs]
    label_key = choose_label(label, names, src, "dataset")

    block_rows, row_bytes = _block_rows(datasets)
    starts = list(range(0, total, block_rows))

    def where_of(row: int) -> str:
        return f"{src} row {row}"

    sniffs = {config["name"]: ImageSniff(config["name"]) for config in configs
              if config["vlen"] and specs[names.index(config["name"])].dtype == "uint8"
              and config["name"] != label_key}
    for name, sniff in sniffs.items():
        dataset = datasets[names.index(name)]
        for start in starts:
            values = _read(dataset, start, start + block_rows, src)
            sniff.see([value[:SNIFF_BYTES].tobytes() for value in values], where_of, start)
            if sniff.done:
                break
    for index, config in enumerate(configs):
        sniff = sniffs.get(config["name"])
        encoding = sniff.encoding("dataset") if sniff is not None else None
        config["image"] = encoding is not None
        if encoding is not None:
            specs[index] = image_spec(config["name"], encoding)
    image_key = next((config["name"] for config in configs if config["image"]), None)

    skipped = []
    items = list(range(total))
    labels = class_names = None
    if label_key is not None:
        index = names.index(label_key)
        label_set = datasets[index]
        if configs[index]["vlen"] or specs[index].shape:
            raise SourceError(where(label_set), f"label {label_key!r} must hold one value per "
                              f"example, got shape {label_set.shape} of {label_set.dtype}")
        values = _read(label_set, 0, total, src)
        if values.dtype.kind == "O":  # variable-length strings, read as bytes
            values = np.array(values.tolist(), dtype=bytes)
        items, labels, class_names, specs[index] = table_labels(
            values, label_key, specs[index], {}, where(label_set), where_of, skip_bad, skipped)
    return ScannedSource(
        kind=SourceKind.HDF5, path=str(src), items=items, labels=labels,
        item_bytes=[row_bytes] * len(items), features=specs, class_names=class_names,
        image_key=image_key, label_key=label_key, skipped=skipped, blocks=starts,
        reader_config={"path": str(src), "group": group, "block_rows": block_rows,
                       "total": total, "columns": configs, "label_key": label_key,
                       "class_names": class_names},
    )


def _block_rows(datasets) -> tuple[int, int]:
    """Rows per block (whole chunks of every chunked dataset, about _BLOCK_BYTES) and the
    estimated bytes of a row (variable-length data from the mean of the first rows': an
    estimate for sizing shards, which draw their rows at random from their blocks)."""
    row_bytes = 0
    for dataset in datasets:
        if dataset.dtype.kind == "O":  # variable-length: sequences or strings
            sample = dataset[:min(64, dataset.shape[0])].ravel()
            sizes = [value.nbytes if isinstance(value, np.ndarray) else len(value)
                     for value in sample]
            row_bytes += int((np.mean(sizes) + 8) * math.prod(dataset.shape[1:]))
        else:
            row_bytes += dataset.dtype.itemsize * math.prod(dataset.shape[1:])
    chunk_rows = max((dataset.chunks[0] for dataset in datasets if dataset.chunks), default=1)
    rows = max(1, _BLOCK_BYTES // max(row_bytes, 1))
    return max(chunk_rows, math.ceil(rows / chunk_rows) * chunk_rows), row_bytes


def _getter(values: np.ndarray, config: dict, class_index):
    """``position -> value`` for one dataset's rows of a block."""
    if config["image"]:
        def get(position):
            return values[position].tobytes()
    elif config["text"] and values.dtype.kind == "O" and values.ndim == 1:
        def get(position):  # a variable-length string, read as bytes
            value = values[position]
            return value.encode("utf-8") if isinstance(value, str) else value
    else:
        get = values.__getitem__
    return checked(get, uint64=config["uint64"], image=config["image"], class_index=class_index)


def hdf5_reader(config: dict, items):
    path = config["path"]
    h5py = _h5py(path)
    handle = _open(h5py, path)
    node = _group(handle, config["group"], path)
    columns = config["columns"]
    datasets = []
    for column in columns:
        # checked again where the rows are read: the file may have been replaced since the scan
        dataset = node[column["path"]]
        problem = _outside_problem(handle, dataset)
        if problem:
            raise SourceError(f"{path} [dataset {column['path']!r}]", f"{problem}: {_OUTSIDE}")
        datasets.append(dataset)
    block_rows, total = config["block_rows"], config["total"]
    class_index = ({name.encode("utf-8"): index
                    for index, name in enumerate(config["class_names"])}
                   if config["class_names"] else None)
    starts = list(range(0, total, block_rows))

    def where_of(row: int) -> str:
        return f"{path} row {row}"

    def load(block: int, rows: np.ndarray) -> LoadedRows:
        start = starts[block]
        local = rows - start
        getters = []
        for column, dataset in zip(columns, datasets, strict=True):
            values = _read(dataset, start, min(start + block_rows, total), path)[local]
            mapping = class_index if column["name"] == config["label_key"] else None
            getters.append((column["name"], _getter(values, column, mapping)))
        return LoadedRows(rows, getters, where_of, "dataset")

    return BlockReader(items, starts, load)
