"""A fit of one epoch: ``tfopt.Run`` as it plans (``cache="auto"``: no cache for one pass),
the same Run made to cache (``cache=True``: what a one-epoch fit did before), and
``model.fit`` on the tf.data guide's recipe, alternating, in one process.

    python scripts/bench_one_epoch.py [--work bench-one-epoch] [--count 3200] [--rounds 4]

The data is made once in --work: ``tfopt demo-data`` images drawn with their own seed (--count
of them, 320-480 px), converted at ``--max-size 320``. The model is as small as a classifier
gets (rescale, global average pooling, one dense layer) so that the fit is input-bound and
the figure is the input pipeline's: a real model's step time adds the same to each. Each fit
is timed whole (``Run.fit`` or ``model.fit``: start-up counts), 224-px random-resized crops,
batches of 64.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

import tfopt  # noqa: E402
from tfopt.bench.baselines import guide_dataset  # noqa: E402
from tfopt.data.source import resolve_source  # noqa: E402

SEED = 41  # the demo images' seed: data no other benchmark or test draws
SIDE = 320  # convert --max-size
IMAGE = 224
BATCH = 64
CLASSES = 10


def make_data(work: Path, count: int) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    images, shards = work / "images", work / f"shards-{SIDE}"
    if not images.exists():
        tfopt.make_demo_data(images, count=count, classes=CLASSES, seed=SEED)
    if not shards.exists():
        tfopt.convert(str(images), str(shards), max_size=SIDE, val_fraction=0.0)
    return shards


def small_model():
    return keras.Sequential([keras.Input((IMAGE, IMAGE, 3)), keras.layers.Rescaling(1 / 255),
                             keras.layers.GlobalAveragePooling2D(),
                             keras.layers.Dense(CLASSES)])


def loss():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def fit_run(shards: Path, cache) -> float:
    run = tfopt.Run(shards, image_size=IMAGE, batch_size=BATCH, seed=0, cache=cache,
                    steps_per_execution=1, precision="float32")
    with run.scope():
        model = small_model()
    run.compile(model, "adam", loss())
    started = time.perf_counter()
    run.fit(model, epochs=1, verbose=0)
    return time.perf_counter() - started


def fit_guide(shards: Path) -> float:
    source = resolve_source(shards, split="train")
    steps = -(-source.num_records // BATCH)
    model = small_model()
    model.compile("adam", loss())
    started = time.perf_counter()
    model.fit(guide_dataset(source, IMAGE, BATCH, crop="random"), epochs=1,
              steps_per_epoch=steps, shuffle=False, verbose=0)
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="bench-one-epoch", type=Path)
    parser.add_argument("--count", type=int, default=3200, help="demo images [3200]")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds [4]")
    args = parser.parse_args(argv)
    shards = make_data(args.work, args.count)
    methods = {"Run (cache auto)": lambda: fit_run(shards, "auto"),
               "Run (cache=True)": lambda: fit_run(shards, True),
               "guide + model.fit": lambda: fit_guide(shards)}
    seconds = {name: [] for name in methods}
    for round_ in range(args.rounds):
        for name, fit in methods.items():
            seconds[name].append(fit())
            print(f"round {round_ + 1}/{args.rounds} {name:18s} {seconds[name][-1]:6.2f} s",
                  file=sys.stderr, flush=True)
    median = {name: statistics.median(times) for name, times in seconds.items()}
    print(f"fit(epochs=1), {args.count:,} images at {SIDE} px, {IMAGE}-px crops, batch {BATCH}, "
          f"median of {args.rounds} alternating rounds:")
    guide = median["guide + model.fit"]
    for name, value in median.items():
        print(f"  {name:18s} {value:6.2f} s  {guide / value:4.2f}x the guide")
    print(f"cache auto / cache=True: {median['Run (cache=True)'] / median['Run (cache auto)']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
