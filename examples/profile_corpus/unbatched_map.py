"""A training script with a planted flaw, for `tfopt profile`: a cheap map (scaling and
centring a row of features) runs once per example before `batch`, where the same function on
a whole batch would cost one call per batch.

    python unbatched_map.py [EXAMPLES]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 200000

rng = np.random.default_rng(0)
x = rng.normal(3.0, 2.0, size=(EXAMPLES, 32)).astype("float32")
y = (x[:, :8].sum(axis=1) > 24).astype("float32")


def scale(features, label):
    return (features - 3.0) / 2.0, label


train = (tf.data.Dataset.from_tensor_slices((x, y)).map(scale).batch(256)
         .prefetch(tf.data.AUTOTUNE))

model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy", steps_per_execution=32,
              jit_compile=False)
model.fit(train, epochs=3)
