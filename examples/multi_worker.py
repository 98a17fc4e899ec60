"""Train the demo model with several workers: MultiWorkerMirroredStrategy, Keras 3 `fit`.

    tfopt launch -n 2 -- python examples/multi_worker.py [--shards DIR] [--epochs N]

`tfopt launch` starts the workers on this machine, each with a `TF_CONFIG` naming all of them;
on a real cluster start the same script on every machine with the `TF_CONFIG` that
`tfopt launch --print-tf-config --hosts host1:2222,host2:2222` prints. Run it as one plain
process (`python examples/multi_worker.py`) and it trains alone, the same way.

What each worker does:

1. the demo dataset: without `--shards`, worker 0 makes 1,200 demo images and converts them
   (`--work` must then be a folder every worker sees); the others wait for its manifest, which
   `tfopt convert` writes last;
2. `tfopt.select_strategy()`: `MultiWorkerMirroredStrategy` under `TF_CONFIG`, with tfopt's fix
   that makes Keras 3 `fit` work under it (keras-team/keras#20585), and batch normalisation
   over the global batch (`tfopt.train.sync_batch_norm.synchronize_batch_norm`);
3. the pipeline for the global batch (per-worker batch x workers): each worker reads its own
   shards (the builder shards the file list by the worker's place in `TF_CONFIG`; with fewer
   shards than workers, DATA auto-sharding) and the strategy splits every global batch over
   the replicas;
4. `fit` with throughput logging and backups in the chief's folder: kill a worker and launch
   again with the same `--work`, and training resumes from the last finished epoch.

Every worker ends with the same weights: the script prints a checksum of them per worker.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import tempfile
import time
import zlib
from pathlib import Path

# TensorFlow's C++ INFO lines (gRPC servers, the coordination service) when run alone: set
# before it loads (tfopt launch sets it for its workers, unless it is set)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

# No Keras (so no TensorFlow) at the top: make_demo_data and convert spawn worker processes,
# which import this script again, and would each load TensorFlow for nothing (3 s, 600 MB and
# its start-up lines apiece). train() imports it.
import numpy as np  # noqa: E402

import tfopt  # noqa: E402
from tfopt.models import build_model  # noqa: E402
from tfopt.records.manifest import MANIFEST_NAME  # noqa: E402

IMAGE_SIZE = 64
PER_REPLICA_BATCH = 32
DEMO_IMAGES = 1200
WAIT_FOR_DATA_S = 600


def task() -> tuple[str, int]:
    """This process's (task type, index) in TF_CONFIG; ("worker", 0) when run alone."""
    spec = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    return spec.get("type", "worker"), int(spec.get("index", 0))


def demo_shards(work: Path, preparing: bool, images: int = DEMO_IMAGES) -> Path:
    """The demo dataset under ``work``: made by one worker, awaited by the others."""
    shards = work / "shards"
    if (shards / MANIFEST_NAME).exists():
        return shards
    if preparing:
        tfopt.make_demo_data(work / "images", count=images, min_size=96, max_size=128,
                             overwrite=True)
        # four training shards: each of two workers reads its own two
        tfopt.convert(work / "images", shards, val_fraction=0.1, shards=4, overwrite=True)
        return shards
    deadline = time.monotonic() + WAIT_FOR_DATA_S
    while not (shards / MANIFEST_NAME).exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no dataset in {shards} after {WAIT_FOR_DATA_S} s: worker 0 makes "
                             "it; is --work a folder all workers share?")
        time.sleep(1)
    return shards


def train(shards: Path, work: Path, epochs: int) -> None:
    import keras

    from tfopt.distribute.strategy import plan_strategy
    from tfopt.train.callbacks import ThroughputCallback
    from tfopt.train.sync_batch_norm import synchronize_batch_norm

    plan = plan_strategy()
    # before any other TensorFlow work: it sets up the cluster
    strategy = tfopt.select_strategy(plan)
    print(plan.describe(strategy), flush=True)
    global_batch = plan.global_batch(PER_REPLICA_BATCH, strategy)

    train_data = tfopt.PipelineBuilder(shards, batch_size=global_batch, training=True,
                                       image_size=IMAGE_SIZE, seed=0)
    print(train_data.choices.describe(), flush=True)
    validation = tfopt.build_pipeline(shards, global_batch, image_size=IMAGE_SIZE,
                                      split="validation")
    classes = len(tfopt.read_manifest(shards).class_names)

    with tfopt.enable_policy(tfopt.choose_policy()), strategy.scope():
        keras.utils.set_random_seed(0)  # the same initial weights on every worker
        model = build_model("cnn", image_size=IMAGE_SIZE, classes=classes)
        # batch-norm statistics over the global batch: without it Keras 3 keeps them per
        # replica, and each worker would end with its own moving means and variances
        synchronize_batch_norm(model)
        model.compile(keras.optimizers.Adam(1e-3),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=2)
        callbacks = [ThroughputCallback(global_batch),
                     *tfopt.backup_callbacks(work / "checkpoints", monitor="val_loss")]
        history = model.fit(train_data.build(), epochs=epochs,
                            steps_per_epoch=train_data.steps_per_epoch,
                            validation_data=validation, callbacks=callbacks, verbose=2)

    weights = b"".join(np.asarray(w, dtype=np.float32).tobytes() for w in model.get_weights())
    last = {key: values[-1] for key, values in history.history.items()}
    accuracy = last.get("val_accuracy", float("nan"))  # absent when no validation batch came
    rate = last["examples_per_second"]
    # NaN when the epoch had no step left after the callback's warm-up steps
    speed = "n/a (epoch too short to time)" if math.isnan(rate) else f"{rate:.0f}"
    print(f"done: {strategy.num_replicas_in_sync} replica(s), val_accuracy {accuracy:.3f}, "
          f"{speed} examples/s (global), "
          f"weights crc32 {zlib.crc32(weights):08x}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=Path, help="a dataset from 'tfopt convert' with a "
                        "validation split [default: demo data made under --work]")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--demo-images", type=int, default=DEMO_IMAGES,
                        help="demo images to make when there is no --shards [default: %(default)s]")
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "tfopt-multi-worker-example",
                        help="folder for the demo data and the checkpoints, shared by all "
                        "workers [default: %(default)s]")
    args = parser.parse_args()
    # tfopt's lines (strategy, per-epoch throughput) without TensorFlow's INFO chatter
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("tfopt").setLevel(logging.INFO)
    _, index = task()
    shards = args.shards or demo_shards(args.work, preparing=index == 0,
                                             images=args.demo_images)
    train(shards, args.work, args.epochs)


if __name__ == "__main__":  # convert spawns processes, which import this script again
    main()
