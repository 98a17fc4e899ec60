"""How long a preempted training takes to stop: SIGTERM sent to a ``tfopt.Run`` fit mid-epoch,
the time until its process exits (the step under way, the backup, its write), and what the
same signal costs a plain Keras fit (``keras.callbacks.BackupAndRestore``, epoch backups).

The model is keras.io's "Simple MNIST convnet" (https://keras.io/examples/vision/mnist_convnet/)
on 20,480 random 28x28 images (160 steps of 128 an epoch), 4 steps per call; the signal comes
from outside, after the script has printed its 30th call's end. Each arm runs ``--repeats``
times, alternating; the medians are printed as one JSON line per arm.

    python scripts/bench_preemption.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import keras
    import tfopt

    how, workdir = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(0)
    x = rng.random((20480, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 20480)

    def model():
        return keras.Sequential([
            keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dropout(0.5),
            keras.layers.Dense(10, activation="softmax")])

    class Steps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            print("STEP", batch, time.time(), flush=True)

    if how == "tfopt":
        run = tfopt.Run((x, y), batch_size=128, validation=None, workdir=workdir,
                        steps_per_execution=4)
        with run.scope():
            built = model()
        run.compile(built, optimizer="adam", loss="sparse_categorical_crossentropy")
        run.fit(built, epochs=50, callbacks=[Steps()], verbose=0)
    else:
        built = model()
        built.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      steps_per_execution=4)
        built.fit(x, y, batch_size=128, epochs=50, verbose=0,
                  callbacks=[keras.callbacks.BackupAndRestore(workdir), Steps()])
""")


def one(script: Path, how: str) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        process = subprocess.Popen([sys.executable, str(script), how, workdir],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        calls = 0
        for line in process.stdout:
            if line.startswith("STEP"):
                calls += 1
                if calls == 30:
                    break
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=300)
        seconds = time.monotonic() - sent
        return {"seconds": seconds, "status": process.returncode, "calls": calls,
                "kept": _steps_kept(Path(workdir))}


def _steps_kept(workdir: Path) -> int:
    """Steps of the epoch under way that a rerun would not train again."""
    record = workdir / "backup" / "latest.json"  # tfopt's
    if record.exists():
        return int(json.loads(record.read_text()).get("steps", 0))
    return 0  # Keras's BackupAndRestore(save_freq="epoch") holds none mid-epoch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "train.py"
        script.write_text(SCRIPT)
        results = {"keras": [], "tfopt": []}
        for repeat in range(args.repeats):
            for how in (("keras", "tfopt") if repeat % 2 == 0 else ("tfopt", "keras")):
                results[how].append(one(script, how))
    for how, runs in results.items():
        seconds = [run["seconds"] for run in runs]
        print(json.dumps({"arm": how, "median_s": round(statistics.median(seconds), 3),
                          "min_s": round(min(seconds), 3), "max_s": round(max(seconds), 3),
                          "statuses": sorted({run["status"] for run in runs}),
                          "calls_seen": [run["calls"] for run in runs],
                          "steps_kept": [run["kept"] for run in runs]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
