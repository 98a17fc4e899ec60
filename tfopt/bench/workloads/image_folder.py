"""An image folder: TensorFlow's "Image classification" tutorial (the flowers CNN).

Source: https://www.tensorflow.org/tutorials/images/classification
(https://github.com/tensorflow/docs/blob/master/site/en/tutorials/images/classification.ipynb).

As the tutorial's first model: a folder of JPEGs, one sub-folder per class, read by
``keras.utils.image_dataset_from_directory`` twice (``validation_split=0.2``, subsets
"training" and "validation", seed 123, 180x180, batches of 32), then ``cache().shuffle(1000)
.prefetch(AUTOTUNE)`` for training and ``cache().prefetch(AUTOTUNE)`` for validation; the model:
Rescaling(1/255), three Conv2D (16, 32, 64; 3x3, same, relu) each with max pooling, Flatten,
Dense(128, relu), Dense(5) logits; Adam, sparse categorical cross-entropy from logits, accuracy;
``model.fit(train_ds, validation_data=val_ds, epochs=10)``.

Data: five classes named as the tutorial's flowers, drawn locally as JPEGs of 200-320 px per
side: each holds one to three flowers of its class (petal count, petal and heart colours and
sizes the class's own, each jittered) at random places and scales over a noisy green-brown
background, so that the model has to find colour and shape.

Scaled: 600 images instead of the 3,670 flower photos (``scale`` multiplies); the image size,
batch, model and epochs are the tutorial's.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfopt.bench.workloads._base import Data, Workload, fresh_folder, majority_share, scaled_count

NAME = "image_folder"
BATCH = 32
IMG_HEIGHT = IMG_WIDTH = 180
SPLIT_SEED = 123
CLASS_NAMES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")
# per class: petals, petal RGB, heart RGB, heart radius (share of the flower's radius), petal depth
_FLOWERS = {
    "daisy": (13, (245, 245, 240), (235, 190, 40), 0.25, 0.35),
    "dandelion": (40, (250, 215, 30), (230, 170, 20), 0.15, 0.15),
    "roses": (5, (200, 25, 45), (140, 10, 30), 0.45, 0.25),
    "sunflowers": (21, (250, 200, 20), (90, 50, 20), 0.5, 0.3),
    "tulips": (3, (230, 90, 170), (120, 160, 60), 0.1, 0.6),
}


def draw_image(rng: np.random.Generator, class_name: str) -> np.ndarray:
    """One RGB image (uint8) of one to three flowers of ``class_name``."""
    height, width = (int(side) for side in rng.integers(200, 321, size=2))
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    ground = np.array([70, 110, 50], np.float32) + rng.normal(0, 20, 3)
    image = ground + rng.normal(0, 18, (height, width, 3))
    image += 25 * np.sin(x / rng.uniform(8, 30) + rng.uniform(0, 6))[..., None]
    petals, petal_rgb, heart_rgb, heart, depth = _FLOWERS[class_name]
    for _ in range(int(rng.integers(1, 4))):
        radius = rng.uniform(0.15, 0.35) * min(height, width)
        cy, cx = rng.uniform(radius, height - radius), rng.uniform(radius, width - radius)
        distance = np.hypot(y - cy, x - cx) / radius
        angle = np.arctan2(y - cy, x - cx) + rng.uniform(0, 2 * np.pi)
        edge = 1 - depth + depth * np.abs(np.cos(petals * angle / 2))
        colour = np.clip(np.array(petal_rgb) + rng.normal(0, 15, 3), 0, 255)
        image[distance < edge] = colour
        image[distance < heart] = np.clip(np.array(heart_rgb) + rng.normal(0, 10, 3), 0, 255)
    return np.clip(image, 0, 255).astype(np.uint8)


def make_data(folder, seed: int, scale: float = 1.0) -> Data:
    """``folder/flower_photos/<class>/<n>.jpg``, the classes in turn."""
    rng = np.random.default_rng(seed)
    count = scaled_count(600, scale, 100)
    folder = fresh_folder(folder, NAME, seed, scale)
    files = []
    for index in range(count):
        class_name = CLASS_NAMES[index % len(CLASS_NAMES)]
        path = folder / "flower_photos" / class_name / f"{index:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(tf.io.encode_jpeg(draw_image(rng, class_name), quality=90).numpy())
        files.append(path)
    validation = int(0.2 * count)
    return Data(NAME, folder, seed, scale, count - validation, validation, files=files,
                info={"data_dir": folder / "flower_photos"})


def _dataset(data: Data, subset: str):
    return keras.utils.image_dataset_from_directory(
        str(data.info["data_dir"]), validation_split=0.2, subset=subset, seed=SPLIT_SEED,
        image_size=(IMG_HEIGHT, IMG_WIDTH), batch_size=BATCH, verbose=False)


def inputs(data: Data) -> dict:
    autotune = tf.data.AUTOTUNE
    train_ds = _dataset(data, "training").cache().shuffle(1000).prefetch(buffer_size=autotune)
    val_ds = _dataset(data, "validation").cache().prefetch(buffer_size=autotune)
    return {"train": train_ds, "validation": val_ds}


def build_model(_inputs) -> keras.Model:
    layers = keras.layers
    return keras.Sequential([
        keras.Input(shape=(IMG_HEIGHT, IMG_WIDTH, 3)),
        layers.Rescaling(1.0 / 255),
        layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(64, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dense(len(CLASS_NAMES)),
    ])


def compile_args() -> dict:
    return {"optimizer": "adam",
            "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            "metrics": ["accuracy"]}


def plain_fit(model, inputs: dict, epochs: int, verbose=0):
    return model.fit(inputs["train"], validation_data=inputs["validation"], epochs=epochs,
                     verbose=verbose)


def run_inputs(inputs: dict) -> dict:
    return {"source": inputs["train"], "validation": inputs["validation"]}


def baseline(data: Data) -> float:
    labels = np.concatenate([y.numpy() for _, y in _dataset(data, "validation")])
    return majority_share(labels)


WORKLOAD = Workload(
    name=NAME, kind="image_folder",
    source=("https://www.tensorflow.org/tutorials/images/classification",
            "https://github.com/tensorflow/docs/blob/master/site/en/tutorials/images/"
            "classification.ipynb"),
    scaled="600 synthetic flower JPEGs instead of 3,670 photos",
    epochs=10, metric="val_accuracy", higher_is_better=True, make_data=make_data,
    inputs=inputs, build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline)
