"""Train an image classifier the tfopt way: shards, tuned pipeline, precision, callbacks, backups.

    python examples/train_image_classifier.py [SHARDS_DIR] [--epochs N]

SHARDS_DIR is a dataset written by `tfopt convert` with a validation split (`--val-fraction
0.1`). Without it the script makes 1,000 demo images and converts them first; on a 2-core CPU
the whole run takes about a minute. Each step is the one to copy into your own training script:

1. convert images to TFRecord shards (once),
2. a pipeline that decodes in parallel, caches and prefetches (`tfopt.PipelineBuilder`),
3. the precision policy for this hardware (`tfopt.choose_policy`, `tfopt.enable_policy`) and
   fused batch normalisation (`tfopt.fuse_batch_norm`),
4. the distribution strategy (`tfopt.select_strategy`),
5. callbacks that log examples/s and the input-bound share every epoch, and backups that let a
   killed run resume where it stopped (run the script again with the same folders),
6. `model.fit`.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import keras
import tensorflow as tf

import tfopt
from tfopt.models import build_model

IMAGE_SIZE = 96
BATCH_SIZE = 64


def train(shards: Path, work: Path, epochs: int) -> dict:
    # 4. strategy first: it decides the global batch. select_strategy picks TPU, several
    #    workers (TF_CONFIG, Slurm), mirrored GPUs or one GPU, and the default strategy on a
    #    CPU-only machine; tf.distribute.get_strategy() is that default strategy
    plan = tfopt.plan_strategy()  # what and why, decided without building anything
    strategy = tfopt.select_strategy(plan)
    print(plan.describe(strategy))
    global_batch = plan.global_batch(BATCH_SIZE, strategy)  # BATCH_SIZE per replica

    # 2. pipelines: training shuffles, decodes in parallel and caches what fits in RAM;
    #    evaluation reads every record once, in order
    train_data = tfopt.PipelineBuilder(shards, batch_size=global_batch, training=True,
                                       image_size=IMAGE_SIZE, seed=0)
    print(train_data.choices.describe())
    validation = tfopt.build_pipeline(shards, global_batch, image_size=IMAGE_SIZE,
                                      split="validation")
    classes = len(tfopt.read_manifest(shards).class_names)

    # the probe measures, inside the pipeline, how long training waits for each batch
    # (made outside strategy.scope(): its counters are plain CPU variables)
    probe = tfopt.InputProbe()
    dataset = probe.instrument(train_data.build())

    # 3. precision: mixed_bfloat16 on CPUs with AMX/AVX512-BF16, mixed_float16 on NVIDIA GPUs
    #    of compute capability 7.0+, float32 otherwise
    choice = tfopt.choose_policy()
    print(f"precision policy {choice.name}: {choice.reason}")

    # layers take the policy in force when they are built: build and compile inside the block
    with tfopt.enable_policy(choice), strategy.scope():
        model = build_model("cnn", image_size=IMAGE_SIZE, classes=classes)
        # batch norm on TensorFlow's fused kernel, which Keras 3 does not use (1.7x a step here)
        tfopt.fuse_batch_norm(model)
        for warning in tfopt.check_model_precision(model):
            print("precision check:", warning)
        model.compile(keras.optimizers.Adam(1e-3),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"],
                      # several steps per call: less Python and callback overhead per step
                      steps_per_execution=4)

        # 5. callbacks: examples/s and input stalls (GPU stats too when there is a GPU), then
        #    backups: BackupAndRestore plus the best model by val_loss
        gpu = bool(tf.config.list_physical_devices("GPU"))
        callbacks = [
            *tfopt.training_callbacks(global_batch, probe, gpu=gpu, pipeline=train_data),
            *tfopt.backup_callbacks(work / "checkpoints"),
            keras.callbacks.CSVLogger(str(work / "history.csv")),
        ]
        # 6. fit: the training dataset repeats, so an epoch is steps_per_epoch batches
        history = model.fit(dataset, epochs=epochs, steps_per_epoch=train_data.steps_per_epoch,
                            validation_data=validation, callbacks=callbacks, verbose=2)
    # the policy is float32 again here; the model keeps the policy it was built with
    last = {key: values[-1] for key, values in history.history.items()}
    print(f"last epoch: {last['examples_per_second']:.1f} examples/s, "
          f"{last['input_bound_percent']:.1f} % waiting for input, "
          f"val_accuracy {last['val_accuracy']:.3f}; history in {work / 'history.csv'}, best "
          f"model in {work / 'checkpoints'}")
    return last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shards", nargs="?", type=Path, help="a dataset from 'tfopt convert'")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--work", type=Path, help="folder for checkpoints and history "
                        "[default: a new temporary folder]")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # tfopt's per-epoch lines
    work = args.work or Path(tempfile.mkdtemp(prefix="tfopt-example-"))
    shards = args.shards
    if shards is None:
        # 1. convert: demo images into shards with a 10 % validation split
        tfopt.make_demo_data(work / "images", count=1000, min_size=160, max_size=240)
        tfopt.convert(work / "images", work / "shards", val_fraction=0.1)
        shards = work / "shards"
    train(shards, work, args.epochs)


if __name__ == "__main__":  # convert spawns worker processes, which import this script again
    main()
