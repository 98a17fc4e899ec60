"""A training script with a planted flaw, for `tfopt profile`: a tiny model whose step takes
well under a millisecond of compute, compiled with Keras's default `steps_per_execution=1`, so
each step pays a call from Python. The data is already a cached, prefetched tf.data pipeline.

    python tiny_model_one_step_per_call.py [EXAMPLES]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 65536

rng = np.random.default_rng(0)
x = rng.normal(size=(EXAMPLES, 16)).astype("float32")
y = (x[:, :4].sum(axis=1) > 0).astype("float32")
train = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).cache().prefetch(tf.data.AUTOTUNE)

model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"],
              jit_compile=False)
model.fit(train, epochs=5)
