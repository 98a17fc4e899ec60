"""A training script with a planted flaw, for `tfopt profile`: each image is made by NumPy code
inside `tf.py_function` (as a user's own decoder often is: a picture twice the model's size,
shrunk in NumPy), one element at a time, with no parallelism and no prefetch. The model is a
small CNN of strided convolutions, so light that on any CPU the step waits for its input
most of its time.

    python py_function_decode.py [EXAMPLES]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 4096


def decode(index):
    # a Python decoder: a 128x128 picture of noise with a bright square whose corner is the
    # label, shrunk to 64x64 by averaging each 2x2 block
    rng = np.random.default_rng(int(index))
    picture = rng.random((128, 128, 3), dtype=np.float32) * 0.5
    label = int(index) % 4
    row, col = divmod(label, 2)
    picture[row * 64:row * 64 + 32, col * 64:col * 64 + 32] += 0.5
    image = picture.reshape(64, 2, 64, 2, 3).mean(axis=(1, 3))
    return image, np.int64(label)


def load(index):
    image, label = tf.py_function(decode, [index], (tf.float32, tf.int64))
    image.set_shape((64, 64, 3))
    label.set_shape(())
    return image, label


train = tf.data.Dataset.range(EXAMPLES).shuffle(EXAMPLES).map(load).batch(64)

model = keras.Sequential([
    keras.Input((64, 64, 3)),
    keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
    keras.layers.Conv2D(16, 3, strides=2, activation="relu"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(4, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(train, epochs=3)
model.save("py_function_decode.keras")
