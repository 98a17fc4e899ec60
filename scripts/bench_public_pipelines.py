"""tfopt.optimize on pipelines other people wrote (the public tutorials and examples of
tests/analysis/public_pipelines.py, each citing its source), side by side with the pipeline
as written and with the tf.data guide's hand fix of it ("expert").

    python scripts/bench_public_pipelines.py [--work bench-public] [--scale 4] [--rounds 3]
                                             [--seconds 4] [--measure 2] [--only WORDS]

The synthetic data is written into --work (the same bytes every run), ``--scale`` times the test
suite's counts. Every round builds each pipeline anew (a cache must not survive into the next
round): the original, the expert fix, and optimize's result on a fresh original (called with
``--seconds``). It times whole epochs of each, every one from a new iterator drained in-graph
to its end (measure.whole_passes), the three taking turns epoch by epoch in an order that
rotates with the round: epoch 1 apart (it fills a cache where one is written or added), then
later epochs, in 4 turns, until each has run ``--measure`` seconds of them (elements over
seconds). Each ratio is the median over the rounds of that round's ratio; the table prints as
markdown.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "analysis"))

import public_pipelines  # noqa: E402

import tfopt  # noqa: E402
from tfopt.analysis import measure  # noqa: E402

NAMES = ("original", "expert", "optimize")
SLICES = 4  # turns the three take at the later epochs of a round


def epoch_seconds(dataset) -> tuple[int, float]:
    """Elements and seconds of one epoch of ``dataset`` from a new iterator to its end."""
    measured = measure.whole_passes(dataset, 0.0)
    return measured.elements, measured.seconds


def one_round(pipeline, data, round_: int, seconds: float, measure_s: float) -> dict:
    """Epoch 1 and later-epoch rates (elements/s) of each of the three, and optimize's report."""
    given = pipeline.original(data)
    started = time.perf_counter()
    result = tfopt.optimize(given, seconds=seconds, report=True)
    spent = time.perf_counter() - started
    datasets = {"original": pipeline.original(data), "expert": pipeline.expert(data),
                "optimize": result.dataset if result.dataset is not given
                else pipeline.original(data)}
    order = list(NAMES[round_ % 3:] + NAMES[:round_ % 3])
    first, later = {}, {name: [0, 0.0] for name in NAMES}
    for name in order:
        count, took = epoch_seconds(datasets[name])
        first[name] = count / took
    # in SLICES turns, each runs later epochs until it has spent its share of the time so far:
    # a cached pipeline's 10-ms epochs run many times, an uncached one's 1-s epochs a few
    for turn in range(1, SLICES + 1):
        for name in order:
            while later[name][1] < measure_s * turn / SLICES or later[name][0] == 0:
                count, took = epoch_seconds(datasets[name])
                later[name][0] += count
                later[name][1] += took
        order.reverse()
    return {"first": first, "later": {n: c / s for n, (c, s) in later.items()},
            "result": result, "unchanged": result.dataset is given, "optimize_s": spent}


def run(pipeline, data, rounds: int, seconds: float, measure_s: float) -> dict:
    rounds_ = [one_round(pipeline, data, r, seconds, measure_s) for r in range(rounds)]

    def median(phase, top, bottom):
        return statistics.median(r[phase][top] / r[phase][bottom] for r in rounds_)

    last = rounds_[-1]["result"]
    return {
        "name": pipeline.name,
        "bottlenecks": [r["result"].analysis.bottleneck for r in rounds_],
        "bottleneck_op": last.analysis.stage(last.analysis.bottleneck).op,
        "changes": sorted({f"{c.kind}({c.stage})" for r in rounds_ for c in r["result"].changes}),
        "recommendations": sorted({k for r in rounds_ for k in r["result"].analysis.kinds()}),
        "unchanged": all(r["unchanged"] for r in rounds_),
        "original_per_s": (statistics.median(r["first"]["original"] for r in rounds_),
                           statistics.median(r["later"]["original"] for r in rounds_)),
        "optimize_vs_original": (median("first", "optimize", "original"),
                                 median("later", "optimize", "original")),
        "optimize_vs_expert": (median("first", "optimize", "expert"),
                               median("later", "optimize", "expert")),
        "expert_vs_original": (median("first", "expert", "original"),
                               median("later", "expert", "original")),
        "optimize_s": statistics.median(r["optimize_s"] for r in rounds_),
    }


def pair(values, unchanged=False) -> str:
    if unchanged:
        return "1.00x (the original itself)"
    return " / ".join(f"{v:.2f}x" for v in values)


def table(rows: list[dict]) -> str:
    lines = ["| pipeline | bottleneck named (its op) | recommendations | optimize's changes | "
             "original elements/s | optimize / original | optimize / expert | "
             "expert / original | optimize s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        named = sorted(set(row["bottlenecks"]))
        lines.append(
            f"| {row['name']} | {', '.join(named)} ({row['bottleneck_op']}) | "
            f"{', '.join(row['recommendations']) or 'none'} | "
            f"{', '.join(row['changes']) or 'none'} | "
            + " / ".join(f"{v:,.0f}" for v in row["original_per_s"]) + " | "
            f"{pair(row['optimize_vs_original'], row['unchanged'])} | "
            f"{pair(row['optimize_vs_expert'])} | {pair(row['expert_vs_original'])} | "
            f"{row['optimize_s']:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("bench-public"))
    parser.add_argument("--scale", type=int, default=4, help="times the suite's data")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="optimize's budget")
    parser.add_argument("--measure", type=float, default=2.0,
                        help="seconds of later epochs each pipeline runs a round")
    parser.add_argument("--only", help="run the pipelines whose name holds one of these "
                                       "comma-separated words")
    args = parser.parse_args(argv)
    if args.scale < 1 or args.rounds < 1 or args.seconds <= 0 or args.measure <= 0:
        parser.error("--scale and --rounds must be >= 1, --seconds and --measure > 0")
    words = [w.strip().lower() for w in args.only.split(",")] if args.only else None
    chosen = [p for p in public_pipelines.PIPELINES
              if words is None or any(w in p.name.lower() for w in words)]
    if not chosen:
        parser.error(f"--only {args.only!r}: no pipeline's name holds one of those words")
    data_root = args.work / f"scale-{args.scale}"
    data_root.mkdir(parents=True, exist_ok=True)
    data = public_pipelines.make_data(data_root, scale=args.scale)
    rows = []
    for pipeline in chosen:
        print(f"{pipeline.name} ...", file=sys.stderr, flush=True)
        # Keras's *_dataset_from_directory print what they found: stdout is the table's
        with contextlib.redirect_stdout(sys.stderr):
            rows.append(run(pipeline, data, args.rounds, args.seconds, args.measure))
    print(f"{args.rounds} rounds, scale {args.scale}, optimize(seconds={args.seconds}), "
          f"{args.measure} s of later epochs each; "
          "figures: epoch 1 / later epochs, medians of the rounds' ratios")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
