"""Train a small classifier from TFRecord shards with tfopt's pipeline and on-device augmentation.

    python examples/train_with_pipeline.py SHARDS_DIR

SHARDS_DIR is a dataset written by `tfopt convert` (with a validation split, e.g.
`--val-fraction 0.1`). Without an argument the script makes and converts a small demo dataset
first. The pipeline ships whole central squares (random_crop="device") and the model's first
layer draws the random-resized crops and normalises on the accelerator; the decoded images are
cached when they fit the RAM budget, so every epoch after the first costs the host little.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import keras

import tfopt

IMAGE_SIZE = 96


def main(shards: Path) -> None:
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
    model.fit(train.build(), steps_per_epoch=train.steps_per_epoch, epochs=5,
              validation_data=validation)


if __name__ == "__main__":  # convert spawns worker processes, which import this script again
    if len(sys.argv) == 2:
        main(Path(sys.argv[1]))
    else:
        workspace = Path(tempfile.mkdtemp(prefix="tfopt-example-"))
        tfopt.make_demo_data(workspace / "images", count=1000, min_size=128, max_size=160)
        tfopt.convert(workspace / "images", workspace / "shards", val_fraction=0.1)
        main(workspace / "shards")
