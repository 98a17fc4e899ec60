"""Train a small classifier from TFRecord shards with tfopt's pipeline and on-device augmentation.

    python examples/train_with_pipeline.py SHARDS_DIR [--epochs N]
    python examples/train_with_pipeline.py [--demo-images N] [--epochs N]

SHARDS_DIR is a dataset written by `tfopt convert` (with a validation split, e.g.
`--val-fraction 0.1`: the evaluation pipeline reads it). Without SHARDS_DIR the script makes
and converts a small demo dataset first (1,000 images, or N) in a new temporary folder. The pipeline ships whole central squares (random_crop="device") and the model's first
layer draws the random-resized crops and normalises on the accelerator; the decoded images are
cached when they fit the RAM budget, so every epoch after the first costs the host little.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import keras

import tfopt

IMAGE_SIZE = 96


def main(shards: Path, epochs: int = 5) -> None:
    train = tfopt.PipelineBuilder(shards, batch_size=64, training=True, image_size=IMAGE_SIZE,
                                  random_crop="device", seed=0)
    print(train.choices.describe())
    validation = tfopt.build_pipeline(shards, 64, image_size=IMAGE_SIZE)
    classes = len(tfopt.read_manifest(shards).class_names)

    # validation batches are IMAGE_SIZE already: the layer's inference path only normalises
    model = keras.Sequential([
        keras.Input((None, None, 3), dtype="uint8"),
        tfopt.Augment(output_size=IMAGE_SIZE, random_crop=True, horizontal_flip=0.5, seed=0),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(128, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(classes, dtype="float32"),  # logits in float32 under mixed precision
    ])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(train.build(), steps_per_epoch=train.steps_per_epoch, epochs=epochs,
                        validation_data=validation)
    print(f"validation accuracy after {epochs} epoch(s): "
          f"{history.history['val_accuracy'][-1]:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shards", nargs="?", type=Path, help="a tfopt dataset folder")
    parser.add_argument("--epochs", type=int, default=5, help="[default: 5]")
    parser.add_argument("--demo-images", type=int, default=1000,
                        help="images of the demo dataset made without SHARDS_DIR [default: 1000]")
    args = parser.parse_args()
    if args.shards is None:
        workspace = Path(tempfile.mkdtemp(prefix="tfopt-example-"))
        tfopt.make_demo_data(workspace / "images", count=args.demo_images, min_size=128,
                             max_size=160)
        tfopt.convert(workspace / "images", workspace / "shards", val_fraction=0.1)
        args.shards = workspace / "shards"
    main(args.shards, args.epochs)
