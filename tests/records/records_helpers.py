"""Helpers shared by the records tests: today's TensorFlow writer path (the reference the
TensorFlow-free writer must match byte for byte), TensorFlow's own parser, and a Python start-up
hook that makes TensorFlow unimportable in a process and every process it starts."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np

# A sitecustomize.py: on the PYTHONPATH of a process it puts a finder on sys.meta_path that
# refuses every import of tensorflow; spawned children inherit the PYTHONPATH, so they run it too
NO_TENSORFLOW_SITECUSTOMIZE = '''
import sys


class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError(f"TensorFlow is made unimportable for this test: {name}")
        return None


sys.meta_path.insert(0, _NoTensorFlow())
'''


def no_tensorflow_env(tmp_path: Path) -> dict:
    """An environment for subprocesses in which ``import tensorflow`` fails."""
    hook = tmp_path / "no_tensorflow_site"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(NO_TENSORFLOW_SITECUSTOMIZE)
    repo = Path(__file__).resolve().parents[2]
    path = [str(hook), str(repo)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                      if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


class _TensorFlowRecordWriter:
    """``tf.io.TFRecordWriter`` behind the interface of tfopt's RecordWriter."""

    def __init__(self, path, compression=None):
        import tensorflow as tf

        options = tf.io.TFRecordOptions(compression_type="GZIP" if compression == "gzip" else "")
        self._writer = tf.io.TFRecordWriter(str(path), options)

    def write(self, data: bytes) -> None:
        self._writer.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._writer.close()


class _TensorFlowClasses:
    def __init__(self):
        import tensorflow as tf

        self.Example = tf.train.Example


@contextlib.contextmanager
def tensorflow_writer_path(monkeypatch):
    """Shards written as before TensorFlow was dropped: ``tf.train.Example`` and
    ``tf.io.TFRecordWriter`` (in this process: convert with ``workers=1``)."""
    from tfopt.records import writer

    with monkeypatch.context() as patch:
        patch.setattr(writer, "RecordWriter", _TensorFlowRecordWriter)
        patch.setattr(writer, "example_classes", _TensorFlowClasses)
        yield


def parse_with_tensorflow(dataset: Path) -> list[dict]:
    """Every record of every shard, read by ``tf.data.TFRecordDataset`` and parsed by
    ``tf.io.parse_single_example`` with the manifest's features (as NumPy values)."""
    import tensorflow as tf

    from tfopt.records.manifest import read_manifest
    from tfopt.records.schema import FeatureKind

    manifest = read_manifest(dataset)
    dtypes = {FeatureKind.BYTES: tf.string, FeatureKind.INT64: tf.int64,
              FeatureKind.FLOAT: tf.float32}
    spec = {feature.name: tf.io.VarLenFeature(dtypes[feature.kind])
            for feature in manifest.features}
    files = [str(dataset / shard.file) for shard in manifest.shards]
    reader = tf.data.TFRecordDataset(files, "GZIP" if manifest.compression == "gzip" else "")
    rows = []
    for raw in reader:
        parsed = tf.io.parse_single_example(raw, spec)
        rows.append({name: tf.sparse.to_dense(value).numpy() for name, value in parsed.items()})
    return rows


def shard_bytes(dataset: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(dataset.glob("*.tfrecord*"))}


def write_numpy_source(folder: Path) -> Path:
    rng = np.random.default_rng(7)
    path = folder / "arrays.npz"
    np.savez(path, x=rng.normal(size=(90, 3, 4)).astype(np.float32),
             z=rng.normal(size=90), ids=np.arange(90, dtype=np.int64),
             small=rng.integers(0, 200, (90, 2), dtype=np.uint8),
             y=rng.integers(0, 3, 90))
    return path


def write_csv_source(folder: Path) -> Path:
    rng = np.random.default_rng(8)
    path = folder / "table.csv"
    lines = ["name,count,score,label"]
    for row in range(75):
        lines.append(f"item {row} é,{int(rng.integers(-5, 1000))},{rng.normal():.17g},"
                     f"{['a', 'b', 'c'][row % 3]}")
    path.write_text("\n".join(lines) + "\n")
    return path


# Run as `python -c KILL_DURING_SWAP PHASE MOVES tfopt-args...`: tfopt's CLI in a process that
# SIGKILLs itself when convert --overwrite's swap has moved MOVES files, old ones out of the
# dataset folder (PHASE "old-out") or new ones into it ("new-in"): a kill -9 at that moment,
# with the files on disk exactly as the swap's renames leave them.
KILL_DURING_SWAP = '''
import os, runpy, signal, sys
from pathlib import Path

phase, moves = sys.argv[1], int(sys.argv[2])
sys.argv = ["tfopt", *sys.argv[3:]]
real_replace, moved = os.replace, []


def replace(source, target, *args, **kwargs):
    source, target = Path(source), Path(target)
    swapped = (target.parent.name.endswith(".tfopt-old") if phase == "old-out"
               else source.parent.name.endswith(".tfopt-new") and source.parent != target.parent)
    if swapped:
        if len(moved) == moves:
            os.kill(os.getpid(), signal.SIGKILL)
        moved.append(source.name)
    return real_replace(source, target, *args, **kwargs)


os.replace = replace
runpy.run_module("tfopt", run_name="__main__", alter_sys=True)
'''


def kill_overwrite_during_swap(src: Path, dst: Path, phase: str, moves: int, *options: str):
    """``tfopt convert SRC DST --overwrite OPTIONS`` killed with SIGKILL in its swap (see
    ``KILL_DURING_SWAP``); returns the finished process, asserted killed."""
    import subprocess
    import sys

    process = subprocess.run(
        [sys.executable, "-c", KILL_DURING_SWAP, phase, str(moves), "convert", str(src),
         str(dst), "--overwrite", "--workers", "1", "-q", *options],
        capture_output=True, text=True, timeout=120)
    assert process.returncode == -9, process.stderr  # killed, not finished or failed
    return process
