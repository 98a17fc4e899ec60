"""A training script with a planted flaw, for `tfopt profile`: the pipeline caches after a
random flip and crop, so every epoch after the first replays the first epoch's augmentation.
It is fast; it trains on less variety than it means to.

    python cache_after_augmentation.py [EXAMPLES]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 4096

rng = np.random.default_rng(0)
images = rng.random((EXAMPLES, 40, 40, 3), dtype=np.float32)
labels = rng.integers(0, 10, EXAMPLES)


def augment(image, label):
    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_crop(image, (32, 32, 3))
    return image, label


train = (tf.data.Dataset.from_tensor_slices((images, labels))
         .map(augment, num_parallel_calls=tf.data.AUTOTUNE).cache().shuffle(1024).batch(128)
         .prefetch(tf.data.AUTOTUNE))

model = keras.Sequential([
    keras.Input((32, 32, 3)),
    keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=False)
model.fit(train, epochs=5)
