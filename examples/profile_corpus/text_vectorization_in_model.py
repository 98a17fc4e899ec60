"""A training script with a planted flaw, for `tfopt profile`: the `TextVectorization` layer
sits inside the model (as keras.io's text classification example shows as one option), so
Keras compiles the whole model without XLA: the layer cannot be compiled.

    python text_vectorization_in_model.py [EXAMPLES]
"""

import sys

import keras
import numpy as np
import tensorflow as tf

EXAMPLES = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
WORDS = [f"w{i}" for i in range(500)]

rng = np.random.default_rng(0)
labels = rng.integers(0, 2, EXAMPLES)
texts = [" ".join(rng.choice(WORDS[label * 250:(label + 1) * 250] + WORDS[:100], 40))
         for label in labels]

vectorize = keras.layers.TextVectorization(max_tokens=1000, output_sequence_length=40)
vectorize.adapt(texts[:1000])

inputs = keras.Input((1,), dtype="string")
x = vectorize(inputs)
x = keras.layers.Embedding(1000, 64)(x)
x = keras.layers.Conv1D(64, 5, activation="relu")(x)
x = keras.layers.GlobalMaxPooling1D()(x)
outputs = keras.layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])

train = (tf.data.Dataset.from_tensor_slices((np.array(texts)[:, None], labels))
         .batch(64).cache().prefetch(tf.data.AUTOTUNE))
model.fit(train, epochs=3)
