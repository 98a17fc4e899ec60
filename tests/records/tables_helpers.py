"""Helpers of the table source tests (Parquet, HDF5): records read back without TensorFlow and
decoded as the manifest says, small encoded images, a package made unimportable in a
subprocess, and the small sources the other records tests convert too."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tfopt.records.format.example_pb import example_classes
from tfopt.records.format.framing import read_records
from tfopt.records.manifest import read_manifest
from tfopt.records.schema import Encoding, FeatureKind

REPO = Path(__file__).resolve().parents[2]


def decoded_records(dataset: Path) -> list[dict]:
    """Every record of every split, each feature decoded by its manifest spec (TensorFlow-free):
    raw bytes into their dtype and shape (1-D where variable), value lists into the dtype, a
    scalar or an encoded image as its one value."""
    manifest = read_manifest(dataset)
    specs = {spec.name: spec for spec in manifest.features}
    example_class = example_classes().Example
    rows = []
    for shard in manifest.shards:
        for record in read_records(dataset / shard.file, manifest.compression):
            example = example_class.FromString(record)
            row = {}
            for name, feature in example.features.feature.items():
                spec = specs[name]
                kind = feature.WhichOneof("kind")
                values = list(getattr(feature, kind).value)
                if spec.encoding is Encoding.RAW:
                    value = np.frombuffer(values[0], np.dtype(spec.dtype).newbyteorder("<"))
                    row[name] = value.reshape(spec.shape) if spec.shape is not None else value
                    continue
                if spec.kind is not FeatureKind.BYTES:
                    dtype = np.int64 if spec.dtype.startswith(("datetime", "timedelta")) else spec.dtype
                    values = np.asarray(values, dtype=dtype)
                    if spec.shape:
                        values = values.reshape(spec.shape)
                one_value = spec.shape == [] or spec.encoding.is_image
                row[name] = values[0] if one_value else values
            rows.append(row)
    return rows


def image_bytes(seed: int, image_format: str = "PNG", height: int = 12, width: int = 10) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, image_format)
    return buffer.getvalue()


# A sitecustomize.py whose finder on sys.meta_path refuses every import of one package.
_BLOCKER = '''
import sys


class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == {name!r} or name.startswith({name!r} + "."):
            raise ImportError(f"{{name}} is made unimportable for this test")
        return None


sys.meta_path.insert(0, _Blocked())
'''


def without_package_env(tmp_path: Path, package: str) -> dict:
    """An environment for subprocesses in which ``import package`` fails."""
    hook = tmp_path / f"no_{package}_site"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(_BLOCKER.format(name=package))
    paths = [str(hook), str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                       if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def run_tfopt(args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    if env is None:
        paths = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-m", "tfopt", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def write_parquet_source(folder: Path) -> Path:
    """A small Parquet file of several row groups: numbers, text, a fixed shape, a list."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(9)
    rows = 80
    table = pa.table({
        "x": pa.array(list(rng.normal(size=(rows, 4)).astype(np.float32)),
                      pa.list_(pa.float32(), 4)),
        "score": rng.normal(size=rows),
        "ids": np.arange(rows, dtype=np.int64),
        "tags": pa.array([[f"t{j}" for j in range(i % 3)] for i in range(rows)]),
        "label": pa.array([["a", "b", "c"][i % 3] for i in range(rows)]),
    })
    path = folder / "table.parquet"
    pq.write_table(table, path, row_group_size=16)
    return path


def write_hdf5_source(folder: Path) -> Path:
    """A small HDF5 file: a chunked array, float64, strings, variable-length integers."""
    import h5py

    rng = np.random.default_rng(10)
    rows = 70
    path = folder / "data.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("x", data=rng.normal(size=(rows, 3)).astype(np.float32),
                              chunks=(10, 3))
        handle["z"] = rng.normal(size=rows)
        handle["ids"] = np.arange(rows, dtype=np.int64)
        names = handle.create_dataset("name", (rows,), dtype=h5py.string_dtype())
        names[:] = [f"row {i} é" for i in range(rows)]
        seq = handle.create_dataset("seq", (rows,), dtype=h5py.vlen_dtype(np.int32))
        for i in range(rows):
            seq[i] = np.arange(i % 4, dtype=np.int32)
        handle["y"] = rng.integers(0, 3, rows)
    return path
