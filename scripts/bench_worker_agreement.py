"""What watching for preemption costs a multi-worker training: under several workers the
backup callback sums one flag over the workers at every step boundary (a scalar all-reduce,
:class:`tfopt.train.preemption.WorkerAgreement`), so that a signal stops them all at one
step. Here the same two-worker ``tfopt launch`` job trains with ``backup_callbacks(...,
preemption=True)`` and ``preemption=False``, alternating, and the median time per step of
each is printed as one JSON line per arm, with their ratio.

The model is keras.io's "Simple MNIST convnet" (https://keras.io/examples/vision/mnist_convnet/)
on random 28x28 images, a global batch of 128, one step per call (the most boundaries, so the
most agreements, a training can have); the first epoch (tracing, warm-up) is not timed.

    python scripts/bench_worker_agreement.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import keras
    import tfopt
    from tfopt.train.backup import backup_callbacks

    preemption, workdir, steps = sys.argv[1] == "on", sys.argv[2], int(sys.argv[3])
    strategy = tfopt.select_strategy()
    rng = np.random.default_rng(0)
    x = rng.random((128 * steps, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 128 * steps)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dropout(0.5),
            keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            if epoch:  # the first epoch traces and warms up
                print("EPOCH_S", time.perf_counter() - self.start, flush=True)

    model.fit(x, y, batch_size=128, epochs=3, verbose=0, shuffle=False,
              callbacks=[*backup_callbacks(workdir, monitor="loss", preemption=preemption),
                         Timer()])
""")


def _job(script: Path, arm: str, workdir: Path, steps: int) -> list[float]:
    """Seconds per step of each timed epoch, as worker 0 measured them."""
    done = subprocess.run(
        [sys.executable, "-m", "tfopt", "launch", "-n", "2", sys.executable, str(script), arm,
         str(workdir), str(steps)], capture_output=True, text=True, timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if done.returncode != 0:
        raise SystemExit(f"the {arm} job failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return [float(line.split()[-1]) / steps for line in done.stdout.splitlines()
            if line.startswith("[worker 0] EPOCH_S ")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="jobs per arm, alternating")
    parser.add_argument("--steps", type=int, default=60, help="steps per epoch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        script = Path(scratch) / "train.py"
        script.write_text(SCRIPT)
        times: dict[str, list[float]] = {"on": [], "off": []}
        for repeat in range(args.repeats):
            for arm in ("on", "off"):
                times[arm] += _job(script, arm, Path(scratch) / f"{arm}-{repeat}", args.steps)
    medians = {arm: statistics.median(values) for arm, values in times.items()}
    for arm in ("on", "off"):
        print(json.dumps({"preemption": arm == "on", "workers": 2, "steps_per_epoch": args.steps,
                          "epochs_timed": len(times[arm]),
                          "ms_per_step_median": round(1000 * medians[arm], 2)}))
    print(json.dumps({"step_time_ratio_on_over_off": round(medians["on"] / medians["off"], 3)}))


if __name__ == "__main__":
    main()
