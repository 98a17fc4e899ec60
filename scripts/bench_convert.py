#!/usr/bin/env python
"""Benchmark: `tfopt convert` against the plain way of writing TFRecords, in one run.

The plain way is what the Model Garden's and most users' conversion scripts do: one process
reads each image file, decodes it once to check it and learn its size, and writes a
tf.train.Example with tf.io.TFRecordWriter. tfopt converts the same folder with all cores (its
durability work included: fsync, SHA-256, manifest), with its default JPEG check (every
marker to the end-of-image marker) and with --check decode (a decode at 1/8 scale). Runs
alternate (plain, tfopt, tfopt --check decode, plain, ...)
so that disk cache and CPU clocks treat both alike; medians are reported with the spread.
Peak memory is measured per process on the full folder and on a quarter of it.

Usage:
    python scripts/bench_convert.py [--images 20000] [--data bench-data] [--repeat 2] [--json F]

The demo images are made once (deterministic, 320-480 px JPEGs) and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def plain_convert(src: Path, dst: Path, shard_bytes: int = 128 << 20) -> int:
    """The plain way, as a user would write it: one process, decode to check, write."""
    import random

    import tensorflow as tf

    classes = sorted(p.name for p in src.iterdir() if p.is_dir())
    items = [(path, label) for label, name in enumerate(classes)
             for path in sorted((src / name).iterdir()) if not path.name.startswith(".")]
    random.Random(0).shuffle(items)
    dst.mkdir(parents=True)
    shard, written, writer = 0, 0, None
    for path, label in items:
        if writer is None or written >= shard_bytes:
            if writer is not None:
                writer.close()
            writer = tf.io.TFRecordWriter(str(dst / f"train-{shard:05d}.tfrecord"))
            shard, written = shard + 1, 0
        data = path.read_bytes()
        image = tf.io.decode_image(data, channels=3, expand_animations=False)  # check + size
        height, width = int(image.shape[0]), int(image.shape[1])
        feature = {
            "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
            "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"jpeg"])),
            "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[height])),
            "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[width])),
            "image/filename": tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[str(path.relative_to(src)).encode()])),
            "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        }
        record = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        writer.write(record)
        written += len(record)
    writer.close()
    return len(items)


def run_one(method: str, src: Path, dst: Path) -> dict:
    """Run one conversion in this process (called in a fresh subprocess per measurement)."""
    from tfopt._tf import import_tensorflow

    import_tensorflow()
    started = time.perf_counter()
    if method == "plain":
        count = plain_convert(src, dst)
    else:
        import tfopt

        check = "decode" if method == "tfopt-decode" else "structure"
        count = tfopt.convert(src, dst, check=check).num_records
    seconds = time.perf_counter() - started
    return {
        "method": method,
        "records": count,
        "seconds": seconds,
        "records_per_second": count / seconds,
        # ru_maxrss is in KiB on Linux; CHILDREN is the largest worker process
        "peak_main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def measure(method: str, src: Path, scratch: Path) -> dict:
    dst = scratch / f"out-{method}"
    shutil.rmtree(dst, ignore_errors=True)
    output = subprocess.run([sys.executable, __file__, "--run", method, str(src), str(dst)],
                            check=True, capture_output=True, text=True).stdout
    shutil.rmtree(dst, ignore_errors=True)
    return json.loads(output.strip().splitlines()[-1])


def subset(src: Path, fraction: float, dst: Path) -> Path:
    """Hard links to the first `fraction` of each class folder: same files, no copy."""
    if dst.exists():
        return dst
    for class_dir in sorted(p for p in src.iterdir() if p.is_dir()):
        files = sorted(p for p in class_dir.iterdir() if not p.name.startswith("."))
        (dst / class_dir.name).mkdir(parents=True)
        for path in files[: max(1, int(len(files) * fraction))]:
            os.link(path, dst / class_dir.name / path.name)
    return dst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--data", type=Path, default=Path("bench-data"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--run", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        method, src, dst = args.run
        print(json.dumps(run_one(method, Path(src), Path(dst))))
        return

    import tfopt

    images = args.data / f"images-{args.images}"
    if not (images / ".complete").exists():
        print(f"making {args.images} demo images in {images} ...", file=sys.stderr)
        tfopt.make_demo_data(images, count=args.images, overwrite=True, progress=None)
        (images / ".complete").write_text("")
    runs = {"plain": [], "tfopt": [], "tfopt-decode": []}
    with tempfile.TemporaryDirectory(dir=args.data) as scratch:
        scratch = Path(scratch)
        for repeat in range(args.repeat):
            for method in runs:
                result = measure(method, images, scratch)
                runs[method].append(result)
                print(f"run {repeat + 1} {method:12s} {result['records_per_second']:8.1f} rec/s "
                      f"({result['seconds']:.1f} s)", file=sys.stderr)
        quarter = measure("tfopt", subset(images, 0.25, args.data / f"images-{args.images}-q"),
                          scratch)
    median = {m: statistics.median(r["records_per_second"] for r in rs) for m, rs in runs.items()}
    spread = {m: (min(r["records_per_second"] for r in rs), max(r["records_per_second"] for r in rs))
              for m, rs in runs.items()}
    full = runs["tfopt"][-1]
    report = {
        "images": args.images,
        "cores": len(os.sched_getaffinity(0)),
        "records_per_second": median,
        "spread": spread,
        "ratio_tfopt_over_plain": median["tfopt"] / median["plain"],
        "ratio_tfopt_decode_over_plain": median["tfopt-decode"] / median["plain"],
        "peak_memory_mb": {
            "tfopt_main": {"full": full["peak_main_mb"], "quarter": quarter["peak_main_mb"]},
            "tfopt_worker": {"full": full["peak_worker_mb"], "quarter": quarter["peak_worker_mb"]},
            "plain": runs["plain"][-1]["peak_main_mb"],
        },
    }
    print(f"\nconvert {args.images} JPEGs (320-480 px) on {report['cores']} cores, "
          f"median of {args.repeat}:")
    print(f"  plain (1 process, decode check)  {median['plain']:8.1f} records/s "
          f"(spread {spread['plain'][0]:.1f}-{spread['plain'][1]:.1f})")
    print(f"  tfopt convert (all cores)        {median['tfopt']:8.1f} records/s "
          f"(spread {spread['tfopt'][0]:.1f}-{spread['tfopt'][1]:.1f})  "
          f"{report['ratio_tfopt_over_plain']:.2f}x plain")
    print(f"  tfopt convert --check decode     {median['tfopt-decode']:8.1f} records/s "
          f"(spread {spread['tfopt-decode'][0]:.1f}-{spread['tfopt-decode'][1]:.1f})  "
          f"{report['ratio_tfopt_decode_over_plain']:.2f}x plain")
    memory = report["peak_memory_mb"]
    print(f"  peak RSS, tfopt main process: {memory['tfopt_main']['quarter']:.0f} MB at "
          f"{args.images // 4} images, {memory['tfopt_main']['full']:.0f} MB at {args.images}; "
          f"largest worker: {memory['tfopt_worker']['quarter']:.0f} / "
          f"{memory['tfopt_worker']['full']:.0f} MB")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
