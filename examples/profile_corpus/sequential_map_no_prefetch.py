"""A training script with a planted flaw, for `tfopt profile`: a costly per-example map (a
blur and a resize of each image) runs one element at a time (no `num_parallel_calls`), and the
pipeline has no `prefetch`, so input and training take turns.

    python sequential_map_no_prefetch.py [EXAMPLES]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 4096

rng = np.random.default_rng(0)
images = rng.integers(0, 255, (EXAMPLES, 96, 96, 3), dtype=np.uint8)
labels = rng.integers(0, 5, EXAMPLES)


def preprocess(image, label):
    image = tf.cast(image, tf.float32) / 255.0
    image = tf.nn.avg_pool2d(image[None], 3, 1, "SAME")[0]  # a blur
    image = tf.image.resize(image, (48, 48))
    return image, label


train = tf.data.Dataset.from_tensor_slices((images, labels)).map(preprocess).batch(64)

model = keras.Sequential([
    keras.Input((48, 48, 3)),
    keras.layers.Conv2D(16, 3, activation="relu"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(5, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=False)
model.fit(train, epochs=3)
