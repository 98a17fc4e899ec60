"""Shared by the augmentation tests: batches of random pixels and op settings."""

from __future__ import annotations

import numpy as np

from tfopt._tf import import_tensorflow

tf = import_tensorflow()

# Only the op under test: no flip, 0-255 output, float32.
PLAIN = dict(horizontal_flip=0.0, normalization="none", output_dtype="float32")
ALL_OPS = dict(output_size=24, random_crop=True, horizontal_flip=0.5, vertical_flip=0.5,
               brightness=0.2, contrast=0.3, saturation=0.4)


def uint8_batch(seed=0, batch=8, height=32, width=40, channels=3):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.integers(0, 256, (batch, height, width, channels), dtype=np.uint8))
