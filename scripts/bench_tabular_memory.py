"""Peak memory of `tfopt convert` on Parquet and HDF5 files several times a memory cap.

Writes, for each format, a file the size of the cap and one ``--multiple`` times the cap
(row groups and chunks alike in both, written a piece at a time so that writing them needs
little memory), converts each in a child process and reports the peak resident memory of the
conversion's whole process tree (VmRSS sampled from /proc every 20 ms, summed over the tree)
and the largest peak of one of its processes (VmHWM, the kernel's own high-water mark; the
child's ru_maxrss would include the memory of this process at the fork). Reading by row group
/ chunk keeps the peak flat in the file's size: the large file's peak should be about the
smaller one's, and under the cap.

    python scripts/bench_tabular_memory.py --cap-mib 256 --multiple 4

Needs pyarrow and h5py (``pip install 'tfopt[parquet,hdf5]'``). A benchmark, not a test:
it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FLOATS = 512  # float32 values per row: 2 KiB
BLOB = 2048  # bytes of random (incompressible) binary per row
ROW_BYTES = FLOATS * 4 + BLOB + 16
WRITE_ROWS = 16384  # rows generated and written at a time (64 MiB)


def write_parquet(path: Path, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int64()), ("x", pa.list_(pa.float32(), FLOATS)),
                        ("blob", pa.binary()), ("label", pa.int64())])
    rng = np.random.default_rng(0)
    with pq.ParquetWriter(path, schema, compression="none") as writer:
        for start in range(0, rows, WRITE_ROWS):
            count = min(WRITE_ROWS, rows - start)
            floats = rng.normal(size=count * FLOATS).astype(np.float32)
            blob = rng.integers(0, 256, count * BLOB, dtype=np.uint8).tobytes()
            offsets = np.arange(0, (count + 1) * BLOB, BLOB, dtype=np.int32)
            table = pa.table({
                "id": np.arange(start, start + count, dtype=np.int64),
                "x": pa.FixedSizeListArray.from_arrays(pa.array(floats), FLOATS),
                "blob": pa.Array.from_buffers(pa.binary(), count,
                                              [None, pa.py_buffer(offsets), pa.py_buffer(blob)]),
                "label": np.arange(start, start + count, dtype=np.int64) % 10,
            }, schema=schema)
            writer.write_table(table)  # one row group per write: 64 MiB


def write_hdf5(path: Path, rows: int) -> None:
    import h5py

    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as handle:
        x = handle.create_dataset("x", (rows, FLOATS), dtype=np.float32, chunks=(256, FLOATS))
        blob = handle.create_dataset("blob", (rows, BLOB), dtype=np.uint8, chunks=(256, BLOB))
        ids = handle.create_dataset("id", (rows,), dtype=np.int64)
        label = handle.create_dataset("label", (rows,), dtype=np.int64)
        for start in range(0, rows, WRITE_ROWS):
            stop = min(rows, start + WRITE_ROWS)
            x[start:stop] = rng.normal(size=(stop - start, FLOATS)).astype(np.float32)
            blob[start:stop] = rng.integers(0, 256, (stop - start, BLOB), dtype=np.uint8)
            ids[start:stop] = np.arange(start, stop)
            label[start:stop] = np.arange(start, stop) % 10


def _status_bytes(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def _tree_memory(root: int) -> tuple[int, int]:
    """Bytes resident now in ``root`` and every process under it, and the largest high-water
    mark (VmHWM) among them, read from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    total, highest, todo = 0, 0, [root]
    while todo:
        pid = todo.pop()
        try:
            total += _status_bytes(pid, "VmRSS:")
            highest = max(highest, _status_bytes(pid, "VmHWM:"))
        except OSError:
            continue  # ended meanwhile
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return total, highest


def convert_peak(src: Path, dst: Path, workers: int, shard_size: str) -> tuple[float, int, int]:
    """Seconds, the peak RSS of the process tree and the largest VmHWM in it, in bytes."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    command = [sys.executable, "-m", "tfopt", "convert", str(src), str(dst), "--label", "label",
               "--workers", str(workers), "--shard-size", shard_size, "-q", "--overwrite"]
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    peak = highest = 0
    while child.poll() is None:
        tree, largest = _tree_memory(child.pid)
        peak, highest = max(peak, tree), max(highest, largest)
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"convert of {src} failed")
    return seconds, peak, highest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap-mib", type=int, default=256, help="the memory cap, MiB")
    parser.add_argument("--multiple", type=float, default=4.0,
                        help="large file size as a multiple of the cap")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--shard-size", default="32MiB")
    parser.add_argument("--dir", type=Path, help="where to write the files [default: a temp dir]")
    args = parser.parse_args()
    cap = args.cap_mib << 20
    work = Path(tempfile.mkdtemp(prefix="tfopt-bench-tabular-", dir=args.dir))
    print(f"cap {args.cap_mib} MiB, workers {args.workers}, shard size {args.shard_size}, "
          f"rows of {ROW_BYTES} bytes; files in {work}")
    print(f"{'format':8} {'file MiB':>9} {'rows':>9} {'seconds':>8} {'peak tree MiB':>14} "
          f"{'VmHWM MiB':>10} {'peak/cap':>9}")
    try:
        for name, write, suffix in (("parquet", write_parquet, ".parquet"),
                                    ("hdf5", write_hdf5, ".h5")):
            for size in (cap, int(cap * args.multiple)):
                rows = max(1, size // ROW_BYTES)
                src = work / f"{name}-{rows}{suffix}"
                write(src, rows)
                seconds, peak, highest = convert_peak(src, work / f"out-{name}-{rows}",
                                                      args.workers, args.shard_size)
                print(f"{name:8} {src.stat().st_size / 2**20:9.0f} {rows:9,} {seconds:8.1f} "
                      f"{peak / 2**20:14.0f} {highest / 2**20:10.0f} {peak / cap:9.2f}",
                      flush=True)
                src.unlink()
                shutil.rmtree(work / f"out-{name}-{rows}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
