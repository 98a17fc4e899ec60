#!/usr/bin/env python
"""Benchmark: `tfopt convert` against the plain way of writing TFRecords, in one run.

The plain way is what the Model Garden's and most users' conversion scripts do: one Python
process imports TensorFlow, reads each image file, decodes it once to check it and learn its
size, and writes a tf.train.Example with tf.io.TFRecordWriter. tfopt converts the same folder as
a user runs it, `tfopt convert SRC DST` (all cores, its durability work included: fsync,
SHA-256, manifest), with its default JPEG check (every marker to the end-of-image marker) and
with --check decode (a decode at 1/8 scale, with TensorFlow). Every figure is a whole process,
start-up included, timed from outside: what a user waits for. Runs alternate (plain, tfopt,
tfopt --check decode, plain, ...) so that disk cache and CPU clocks treat all alike; medians are
reported with the spread. After each tfopt run, `tfopt verify` and `tfopt inspect --fast` of
its output are timed too. Peak memory is that of the largest process of each command (a
convert's workers included), in runs of their own.

Usage:
    python scripts/bench_convert.py [--images 20000] [--data bench-data] [--repeat 2] [--json F]

The demo images are made once (deterministic, 320-480 px JPEGs) and reused.
"""

from __future__ import annotations

import argparse
import json
import os
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


def run_plain(src: Path, dst: Path) -> None:
    """The plain script's whole run, in the process the benchmark started for it."""
    count = plain_convert(src, dst)
    print(json.dumps({"records": count}))


def timed(command: list[str]) -> dict:
    """Run ``command`` to its end: wall seconds from its start, and its stdout."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate()
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n"
                         f"{stderr.decode()[-3000:]}")
    return {"seconds": seconds, "stdout": stdout.decode()}


def peak_mb(command: list[str]) -> float:
    """The peak RSS of ``command``'s largest process (MB): run in a fresh child, whose own
    children's peak is all that RUSAGE_CHILDREN holds."""
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
             "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)")
    output = subprocess.run([sys.executable, "-c", probe, *command], check=True,
                            capture_output=True, text=True).stdout
    return float(output.strip().splitlines()[-1])


def convert_command(method: str, src: Path, dst: Path) -> list[str]:
    if method == "plain":
        return [sys.executable, __file__, "--run", "plain", str(src), str(dst)]
    check = ["--check", "decode"] if method == "tfopt-decode" else []
    return [sys.executable, "-m", "tfopt", "convert", str(src), str(dst), "-q", "--json", *check]


def measure(method: str, src: Path, scratch: Path, records: int) -> dict:
    dst = scratch / f"out-{method}"
    shutil.rmtree(dst, ignore_errors=True)
    result = timed(convert_command(method, src, dst))
    result["records_per_second"] = records / result["seconds"]
    if method == "tfopt":
        result["verify_s"] = timed([sys.executable, "-m", "tfopt", "verify", str(dst),
                                    "-q"])["seconds"]
        result["inspect_fast_s"] = timed([sys.executable, "-m", "tfopt", "inspect", str(dst),
                                          "--fast"])["seconds"]
        result["dataset_mb"] = sum(p.stat().st_size for p in dst.iterdir()) / 1e6
    shutil.rmtree(dst, ignore_errors=True)
    return result


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
        _, src, dst = args.run
        run_plain(Path(src), Path(dst))
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
                result = measure(method, images, scratch, args.images)
                runs[method].append(result)
                print(f"run {repeat + 1} {method:12s} {result['records_per_second']:8.1f} rec/s "
                      f"({result['seconds']:.2f} s)", file=sys.stderr)
        quarter_src = subset(images, 0.25, args.data / f"images-{args.images}-q")
        memory = {}
        for method in runs:
            for name, src in (("full", images), ("quarter", quarter_src)):
                dst = scratch / f"peak-{method}-{name}"
                memory[f"{method}_{name}"] = peak_mb(convert_command(method, src, dst))
                if method == "tfopt" and name == "full":
                    memory["verify_full"] = peak_mb([sys.executable, "-m", "tfopt", "verify",
                                                     str(dst), "-q"])
                shutil.rmtree(dst, ignore_errors=True)
    median = {m: statistics.median(r["records_per_second"] for r in rs) for m, rs in runs.items()}
    spread = {m: (min(r["records_per_second"] for r in rs), max(r["records_per_second"] for r in rs))
              for m, rs in runs.items()}
    verify_s = [r["verify_s"] for r in runs["tfopt"]]
    inspect_s = [r["inspect_fast_s"] for r in runs["tfopt"]]
    report = {
        "images": args.images,
        "cores": len(os.sched_getaffinity(0)),
        "records_per_second": median,
        "spread": spread,
        "ratio_tfopt_over_plain": median["tfopt"] / median["plain"],
        "ratio_tfopt_decode_over_plain": median["tfopt-decode"] / median["plain"],
        "dataset_mb": runs["tfopt"][-1]["dataset_mb"],
        "verify_s": {"median": statistics.median(verify_s), "spread": [min(verify_s), max(verify_s)]},
        "inspect_fast_s": {"median": statistics.median(inspect_s),
                           "spread": [min(inspect_s), max(inspect_s)]},
        "peak_memory_mb": memory,
    }
    print(f"\nconvert {args.images} JPEGs (320-480 px) on {report['cores']} cores, whole "
          f"processes (start-up included), median of {args.repeat}:")
    print(f"  plain (1 process, decode check)  {median['plain']:8.1f} records/s "
          f"(spread {spread['plain'][0]:.1f}-{spread['plain'][1]:.1f})")
    print(f"  tfopt convert                    {median['tfopt']:8.1f} records/s "
          f"(spread {spread['tfopt'][0]:.1f}-{spread['tfopt'][1]:.1f})  "
          f"{report['ratio_tfopt_over_plain']:.2f}x plain")
    print(f"  tfopt convert --check decode     {median['tfopt-decode']:8.1f} records/s "
          f"(spread {spread['tfopt-decode'][0]:.1f}-{spread['tfopt-decode'][1]:.1f})  "
          f"{report['ratio_tfopt_decode_over_plain']:.2f}x plain")
    print(f"  tfopt verify of its {report['dataset_mb']:.0f} MB output: "
          f"{report['verify_s']['median']:.2f} s (spread {min(verify_s):.2f}-{max(verify_s):.2f}), "
          f"peak {memory['verify_full']:.0f} MB; inspect --fast "
          f"{report['inspect_fast_s']['median']:.2f} s")
    print(f"  peak RSS, largest process: plain {memory['plain_quarter']:.0f} / "
          f"{memory['plain_full']:.0f} MB, tfopt {memory['tfopt_quarter']:.0f} / "
          f"{memory['tfopt_full']:.0f} MB, --check decode {memory['tfopt-decode_quarter']:.0f} / "
          f"{memory['tfopt-decode_full']:.0f} MB ({args.images // 4} / {args.images} images)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
