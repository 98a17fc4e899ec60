"""NumPy arrays: keras.io's "Simple MNIST convnet".

Source: https://keras.io/examples/vision/mnist_convnet/
(https://github.com/keras-team/keras-io/blob/master/examples/vision/mnist_convnet.py).

As the example: 28x28 grey images scaled to [0, 1] with a channel axis, one-hot labels of 10
classes; Conv2D(32, 3) and Conv2D(64, 3), each with 2x2 max pooling, Flatten, Dropout(0.5),
Dense(10, softmax); Adam, categorical cross-entropy, accuracy; ``model.fit(x, y,
batch_size=128, epochs=..., validation_split=0.1)``. The test split the example evaluates
after training is left out (it is no part of the fit).

Data: ten "digits" drawn locally instead of MNIST: each class is a glyph of four strokes drawn
from the seed, and each image that glyph with its stroke ends jittered, shifted by up to three
pixels and covered in noise, so that the model has to learn the shapes.

Scaled: 6,000 images instead of 60,000 (``scale`` multiplies), 5 epochs instead of 15,
so that the whole corpus runs in minutes on a small CPU; the model is the example's.
"""

from __future__ import annotations

import keras
import numpy as np

from tfopt.bench.workloads._base import (
    Data,
    Workload,
    majority_share,
    scaled_count,
    split_for_keras,
)

NAME = "mnist_convnet"
CLASSES = 10
SIDE = 28
BATCH = 128
VALIDATION_SPLIT = 0.1
STROKES = 4


def _draw(ends: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """Strokes ``ends`` (n, strokes, 2 ends, 2 coordinates) drawn two pixels thick on n
    canvases, each shifted by ``shifts`` (n, 2)."""
    n = ends.shape[0]
    steps = np.linspace(0.0, 1.0, 24)[None, None, :, None]
    points = ends[:, :, :1, :] + (ends[:, :, 1:, :] - ends[:, :, :1, :]) * steps
    points = points.reshape(n, -1, 2) + shifts[:, None, :]
    canvas = np.zeros((n, SIDE, SIDE), np.float32)
    rows = np.repeat(np.arange(n), points.shape[1])
    for dy in (0, 1):
        for dx in (0, 1):
            y = np.clip(np.round(points[..., 0]).astype(int) + dy, 0, SIDE - 1).ravel()
            x = np.clip(np.round(points[..., 1]).astype(int) + dx, 0, SIDE - 1).ravel()
            canvas[rows, y, x] = 1.0
    return canvas


def make_data(folder, seed: int, scale: float = 1.0) -> Data:
    """``x`` (n, 28, 28) uint8 and ``y`` (n,) int labels, in memory; nothing written."""
    rng = np.random.default_rng(seed)
    count = scaled_count(6000, scale, 200)
    glyphs = rng.uniform(6, 22, size=(CLASSES, STROKES, 2, 2))  # stroke ends, in pixels
    labels = rng.integers(0, CLASSES, size=count)
    ends = glyphs[labels] + rng.normal(0, 1.0, size=(count, STROKES, 2, 2))
    shifts = rng.integers(-3, 4, size=(count, 2))
    ink = rng.uniform(0.6, 1.0, size=(count, 1, 1))
    pixels = _draw(ends, shifts) * ink * 255 + rng.normal(0, 40, size=(count, SIDE, SIDE))
    x = np.clip(pixels, 0, 255).astype(np.uint8)
    train, validation = split_for_keras(count, VALIDATION_SPLIT)
    return Data(NAME, None, seed, scale, train, validation,
                arrays={"x": x, "y": labels.astype(np.uint8)})


def inputs(data: Data) -> tuple[np.ndarray, np.ndarray]:
    """As the example prepares them: floats in [0, 1] with a channel axis, one-hot labels."""
    x = np.expand_dims(data.arrays["x"].astype("float32") / 255, -1)
    return x, keras.utils.to_categorical(data.arrays["y"], CLASSES)


def build_model(_inputs) -> keras.Model:
    layers = keras.layers
    return keras.Sequential([
        keras.Input(shape=(SIDE, SIDE, 1)),
        layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Flatten(),
        layers.Dropout(0.5),
        layers.Dense(CLASSES, activation="softmax"),
    ])


def compile_args() -> dict:
    return {"loss": "categorical_crossentropy", "optimizer": "adam", "metrics": ["accuracy"]}


def plain_fit(model, inputs, epochs: int, verbose=0):
    x, y = inputs
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, validation_split=VALIDATION_SPLIT,
                     verbose=verbose)


def run_inputs(inputs) -> dict:
    return {"source": inputs, "batch_size": BATCH, "validation": VALIDATION_SPLIT}


def baseline(data: Data) -> float:
    return majority_share(data.arrays["y"][data.num_train:])


WORKLOAD = Workload(
    name=NAME, kind="numpy",
    source=("https://keras.io/examples/vision/mnist_convnet/",
            "https://github.com/keras-team/keras-io/blob/master/examples/vision/mnist_convnet.py"),
    scaled="6,000 synthetic digits instead of 60,000 MNIST images; 5 epochs instead of 15",
    epochs=5, metric="val_accuracy", higher_is_better=True, make_data=make_data, inputs=inputs,
    build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline)
