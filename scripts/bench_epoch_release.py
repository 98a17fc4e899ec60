"""What Keras's model.fit waits for between epochs on a finite tf.data pipeline, against the same
pipeline repeated and read with steps_per_epoch (one iterator for the whole fit, as tfopt's
PipelineBuilder builds it), measured side by side in one run.

    python scripts/bench_epoch_release.py [--work bench-epoch-release] [--runs 3] [--epochs 6]

Keras opens a new iterator for every epoch of a finite dataset and releases the previous one
as the next epoch starts. With autotuning on, TensorFlow (2.21 here) now and then holds that
release until the autotuning thread's current sleep ends; the sleeps double from 10 ms up to a
minute, so the wait can reach the length of an epoch. This times, for every epoch, the gap from
``on_epoch_begin`` to the first batch (the release and the new iterator's start), and the gap
from ``on_train_end`` to ``fit`` returning (the last release). The pipeline is the way users
write it: list_files, a decoding map with AUTOTUNE, batch, prefetch; the model is small, so that
the epochs are short and the input pipeline is what the fit waits on.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tfopt._tf import import_tensorflow  # noqa: E402

tf = import_tensorflow()
import keras  # noqa: E402

import tfopt  # noqa: E402
from tfopt.train.timing import EpochStartClock  # noqa: E402

SIZE = 96
BATCH = 32


def load(path, label):
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    return tf.image.resize(image, (SIZE, SIZE)) / 255.0, label


def pipeline(images: Path, repeat: bool):
    files = sorted(str(p) for p in images.glob("*/*.jpg"))
    classes = sorted({Path(f).parent.name for f in files})
    labels = [classes.index(Path(f).parent.name) for f in files]
    dataset = (tf.data.Dataset.from_tensor_slices((files, labels)).shuffle(len(files))
               .map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH)
               .prefetch(tf.data.AUTOTUNE))
    return (dataset.repeat() if repeat else dataset), -(-len(files) // BATCH), len(classes)


class Gaps(keras.callbacks.Callback):
    """Seconds from each epoch's start to its first batch (timed as tfopt's InputStallCallback
    times it), and when the fit ended (read by the caller)."""

    def __init__(self):
        super().__init__()
        self.starts = EpochStartClock()
        self.first_batch, self.train_end = [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.starts.start_epoch()

    def on_train_batch_begin(self, batch, logs=None):
        self.starts.batch_begins()

    def on_epoch_end(self, epoch, logs=None):
        start = self.starts.end_epoch()
        if start is not None:
            self.first_batch.append(start.seconds)

    def on_train_end(self, logs=None):
        self.train_end = time.perf_counter()


def one_fit(images: Path, repeat: bool, epochs: int) -> dict:
    dataset, steps, classes = pipeline(images, repeat)
    model = keras.Sequential([keras.Input((SIZE, SIZE, 3)), keras.layers.Conv2D(8, 3, 2),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(classes)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    gaps = Gaps()
    start = time.perf_counter()
    model.fit(dataset, epochs=epochs, steps_per_epoch=steps if repeat else None, verbose=0,
              callbacks=[gaps])
    end = time.perf_counter()
    # epoch 1's gap is the first iterator's start and the first trace: the same in both ways
    waits = gaps.first_batch[1:] + [end - gaps.train_end]
    return {"fit_s": end - start, "waits": waits, "epoch_s": (end - start) / epochs}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("bench-epoch-release"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args(argv)
    images = args.work / "images"
    if not images.exists():
        tfopt.make_demo_data(images, count=1500, classes=10)
    results = {"finite": [], "repeat": []}
    for run in range(args.runs):
        for way in (("finite", "repeat") if run % 2 == 0 else ("repeat", "finite")):
            out = one_fit(images, way == "repeat", args.epochs)
            results[way].append(out)
            print(f"run {run + 1} {way}: fit {out['fit_s']:.1f} s, waits "
                  + ", ".join(f"{w:.2f}" for w in out["waits"]), file=sys.stderr, flush=True)
    print("| how the fit reads the pipeline | fit s (median) | waits between epochs, s "
          "(sum over the fit, median) | largest wait s | share of the fit | fit time / finite |")
    print("|---|---|---|---|---|---|")
    finite_fit = statistics.median(r["fit_s"] for r in results["finite"])
    labels = {"finite": "finite dataset, a new iterator each epoch (plain Keras)",
              "repeat": ".repeat() + steps_per_epoch: one iterator (tfopt's PipelineBuilder)"}
    for way, runs in results.items():
        fit = statistics.median(r["fit_s"] for r in runs)
        waited = statistics.median(sum(r["waits"]) for r in runs)
        largest = max(max(r["waits"]) for r in runs)
        print(f"| {labels[way]} | {fit:.1f} | {waited:.2f} | {largest:.2f} | "
              f"{waited / fit:.0%} | {fit / finite_fit:.2f}x |")
    print(f"\n{args.runs} runs of each, alternating, {args.epochs} epochs each; "
          f"{len(list(images.glob('*/*.jpg')))} images at {SIZE} px, batch {BATCH}. "
          f"Waits: from each epoch's start to its first batch (epochs 2 on) and from the fit's "
          f"end to its return. TensorFlow {tf.__version__}, Keras {keras.__version__}, "
          f"{os.cpu_count()} CPUs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
