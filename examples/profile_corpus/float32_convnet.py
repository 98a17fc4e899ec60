"""A training script with a planted flaw, for `tfopt profile`, on a machine whose CPU has
AVX512-BF16 or AMX (or a GPU with tensor cores): the model computes in float32, the Keras
default, where half precision computes faster. On a machine without such units float32 is
right, and the script is well tuned.

    python float32_convnet.py [EXAMPLES]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 4096

rng = np.random.default_rng(0)
images = rng.random((EXAMPLES, 32, 32, 3), dtype=np.float32)
labels = rng.integers(0, 10, EXAMPLES)
train = (tf.data.Dataset.from_tensor_slices((images, labels)).batch(128).cache()
         .prefetch(tf.data.AUTOTUNE))

model = keras.Sequential([
    keras.Input((32, 32, 3)),
    keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.Conv2D(128, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(128, 3, activation="relu"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(10, activation="softmax"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", jit_compile=False)
model.fit(train, epochs=3)
