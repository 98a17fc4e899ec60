"""Train an image classifier the tfopt way: one tfopt.Run picks the strategy, precision,
pipeline, batch norm and steps_per_execution, and keeps backups in the workdir.

    python examples/train_image_classifier.py [--shards DIR] [--workdir DIR] [--epochs N]

Without --shards it makes demo images and converts them (10 % validation) under the workdir.
Kill it and run the same command again: training resumes from the last finished epoch.
"""
import argparse
import os

import keras

import tfopt
from tfopt.models import build_model

parser = argparse.ArgumentParser(description="train the built-in CNN with tfopt.Run")
parser.add_argument("--shards", help="a dataset from 'tfopt convert' [default: demo data]")
parser.add_argument("--workdir", default="runs/image-classifier")
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--demo-images", type=int, default=1000)
args = parser.parse_args()
shards, workdir, epochs = args.shards, args.workdir, args.epochs
if shards is None and not os.path.exists(f"{workdir}/shards/manifest.json"):
    tfopt.make_demo_data(f"{workdir}/images", count=args.demo_images, min_size=160,
                         max_size=240, overwrite=True)
    tfopt.convert(f"{workdir}/images", f"{workdir}/shards", val_fraction=0.1, overwrite=True)
shards = shards or f"{workdir}/shards"

run = tfopt.Run(shards, image_size=96, batch_size=64, workdir=workdir)
print(run.describe())  # strategy, precision, pipeline, steps_per_execution: what and why
with run.scope():  # the strategy's scope and the precision policy
    model = build_model("cnn", image_size=96, classes=run.num_classes)
run.compile(model, "adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"])
history = run.fit(model, epochs=epochs)  # run it again after a crash: it resumes
print("last epoch:", {key: round(values[-1], 4) for key, values in history.history.items()})
