"""A well-tuned training script, for `tfopt profile`: nothing worth changing should be found.
The data is held in memory in a shuffled, prefetched tf.data pipeline; the step is long enough
that a call from Python per step costs nothing; the precision is the machine's (bfloat16 where
the CPU computes it faster: AVX512-BF16 or AMX; float32 elsewhere); XLA is left off, as it is
slower for this model on a CPU (`tfopt profile --try` measures it).

    python well_tuned.py [EXAMPLES]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

import tfopt

EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 4096

rng = np.random.default_rng(0)
images = rng.random((EXAMPLES, 32, 32, 3), dtype=np.float32)
labels = rng.integers(0, 10, EXAMPLES)
train = (tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(1024).batch(128)
         .prefetch(tf.data.AUTOTUNE))

keras.mixed_precision.set_global_policy(tfopt.choose_policy().name)
model = keras.Sequential([
    keras.Input((32, 32, 3)),
    keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(128, 3, activation="relu"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(10, activation="softmax", dtype="float32"),  # a float32 loss
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"],
              jit_compile=False)
model.fit(train, epochs=3)
