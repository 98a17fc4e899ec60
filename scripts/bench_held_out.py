"""tfopt's pipeline beside the tf.data guide's recipe on held-out data written by another tool:
the four bars of issue 32 in one run.

    python scripts/bench_held_out.py [--work bench-held-out] [--count 3200] [--repeats 3]

The data is made once in --work (kept for later runs): ``tfopt demo-data`` images drawn with a
seed no other benchmark uses (--count of them, 320-480 px), the same images resized to 320 px
on their longer side and written with ``tf.io.TFRecordWriter`` under Model Garden's keys
without a tfopt manifest (``garden/train-0000N-of-00008``: the foreign shards), and the images
stored small by ``tfopt convert --max-size 160``. Then, each a ``tfopt bench pipeline`` run
(:func:`tfopt.bench.pipeline.run_pipeline_bench`) in this one process, the guide and tfopt
alternating, --repeats runs each, every epoch one whole pass:

- eval: central crops at 224 px of the foreign shards, ``--cache on``, epoch 1: the pass that
  fills tfopt's cache (of final images; what ``--cache auto`` plans for a run of more than one
  pass); the bar is 1.0x the guide.
- eval-uncached: the same with ``--cache off``: the guide's work and no more (it caches
  nothing); the bar is 1.0x.
- stored-small: 112-px training, tfopt on the copy stored at 160 px, the guide on the foreign
  shards, cache off; the bar is 2.5x.
- training: random-resized crops at 224 px of the foreign shards, ``--cache auto``, 3
  epochs: epoch 1 (tfopt fills its cache of whole decoded images, which must decode every
  image whole: docs/benchmarks.md gives its ceiling) and epochs 2-3 (cached; bar 3x).
- one-epoch: the same, one epoch (``--cache auto``): a cache would serve none of it, so tfopt
  reads without one, as ``tfopt.Run`` reads a fit of one epoch, and decodes only each crop's
  window (``decode_and_crop_jpeg``); the bar is 1.3x.

It prints each set's medians and the ratios against the bars, and writes them with every run's
figures to --work/held_out.json. The same sets from the command line (the folder is read as the
foreign dataset it is; ``--split train``: its files name no validation split)::

    tfopt bench pipeline garden --eval --split train --cache on --methods guide,tfopt
    tfopt bench pipeline garden --eval --split train --cache off --methods guide,tfopt
    tfopt bench pipeline garden --image-size 112 --cache off --tfopt-source small-160 --methods guide,tfopt
    tfopt bench pipeline garden --cache auto --epochs 3 --methods guide,tfopt
    tfopt bench pipeline garden --cache auto --methods guide,tfopt
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfopt  # noqa: E402
from tfopt._system import usable_cores  # noqa: E402
from tfopt.bench.demo import write_foreign_shards  # noqa: E402
from tfopt.bench.pipeline import BenchSettings, run_pipeline_bench  # noqa: E402

SEED = 32  # the demo images' seed: data no other benchmark or test draws
SMALL_SIDE = 160  # convert --max-size for the stored-small set
SMALL_IMAGE = 112  # its training side
METHODS = ("guide", "tfopt")


@dataclasses.dataclass(frozen=True)
class Bar:
    """One acceptance figure: tfopt's median over the guide's in ``epochs`` of a set."""

    name: str
    set_name: str
    epochs: tuple[int, ...]  # 0-based; several: the median of their ratios
    at_least: float


BARS = (Bar("eval, cache filling", "eval", (0,), 1.0),
        Bar("eval, cache off", "eval-uncached", (0,), 1.0),
        Bar("stored-small", "stored-small", (0,), 2.5),
        Bar("one epoch", "one-epoch", (0,), 1.3),
        Bar("epoch 1 of 3 (filling)", "training", (0,), 1.3),
        Bar("cached (epochs 2-3)", "training", (1, 2), 3.0))


def make_data(work: Path, count: int) -> dict[str, Path]:
    """The images, the foreign shards and the small copy under ``work`` (each made once)."""
    work.mkdir(parents=True, exist_ok=True)
    images, garden, small = work / "images", work / "garden", work / f"small-{SMALL_SIDE}"
    if not images.exists():
        tfopt.make_demo_data(images, count=count, classes=10, seed=SEED)
    if not garden.exists():
        write_foreign_shards(images, garden, side=320, shards=8)
    if not small.exists():
        tfopt.convert(str(images), str(small), max_size=SMALL_SIDE, val_fraction=0.0)
    return {"images": images, "garden": garden, "small": small}


def bench_sets(data: dict[str, Path], repeats: int) -> dict[str, BenchSettings]:
    garden = str(data["garden"])
    return {
        "eval": BenchSettings(garden, training=False, split="train", cache=True,
                              repeats=repeats, stages=False),
        "eval-uncached": BenchSettings(garden, training=False, split="train", cache=False,
                                       repeats=repeats, stages=False),
        "stored-small": BenchSettings(garden, image_size=SMALL_IMAGE, cache=False,
                                      tfopt_source=str(data["small"]), repeats=repeats,
                                      stages=False),
        "training": BenchSettings(garden, cache="auto", epochs=3, repeats=repeats,
                                  stages=False),
        "one-epoch": BenchSettings(garden, cache="auto", repeats=repeats, stages=False),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="bench-held-out", type=Path)
    parser.add_argument("--count", type=int, default=3200, help="demo images [3200]")
    parser.add_argument("--repeats", type=int, default=3, help="alternating runs per method [3]")
    parser.add_argument("--sets", default="eval,eval-uncached,stored-small,training,"
                                          "one-epoch",
                        help="which sets, in this order [all]")
    args = parser.parse_args(argv)
    data = make_data(args.work, args.count)
    sets = bench_sets(data, args.repeats)
    chosen = [name.strip() for name in args.sets.split(",") if name.strip()]
    unknown = set(chosen) - set(sets)
    if unknown:
        parser.error(f"--sets: unknown {', '.join(sorted(unknown))}; choose from "
                     f"{', '.join(sets)}")
    reports = {}
    for name in chosen:
        started = time.perf_counter()
        report = run_pipeline_bench(sets[name], list(METHODS),
                                    progress=lambda line, name=name: print(
                                        f"[{name}] {line}", file=sys.stderr, flush=True))
        reports[name] = report
        print(f"\n== {name} ({time.perf_counter() - started:.0f} s)\n{report.describe()}",
              flush=True)
    print(f"\nheld-out foreign shards ({args.count:,} images), median of {args.repeats} "
          f"alternating runs per method, one process, {usable_cores()} cores:")
    bars = []
    for bar in BARS:
        if bar.set_name not in reports:
            continue
        report = reports[bar.set_name]
        ratios = [report.ratio("tfopt", "guide", epoch) for epoch in bar.epochs]
        ratio = statistics.median(ratios)
        holds = ratio >= bar.at_least
        rates = ", ".join(f"tfopt {report.results['tfopt'].median(e):,.0f} / guide "
                          f"{report.results['guide'].median(e):,.0f}" for e in bar.epochs)
        print(f"  {bar.name:24s} {ratio:5.2f}x the guide (bar {bar.at_least}x: "
              f"{'holds' if holds else 'does not hold'}); examples/s {rates}")
        bars.append({"bar": bar.name, "set": bar.set_name, "epochs": [e + 1 for e in bar.epochs],
                     "ratio": ratio, "at_least": bar.at_least, "holds": holds})
    out = args.work / "held_out.json"
    out.write_text(json.dumps({"count": args.count, "repeats": args.repeats, "bars": bars,
                               "sets": {name: report.to_json()
                                        for name, report in reports.items()}}, indent=1))
    print(f"figures: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
