"""A Transformer on integer sequences: keras.io's "Text classification with Transformer".

Source: https://keras.io/examples/nlp/text_classification_with_transformer/
(https://github.com/keras-team/keras-io/blob/master/examples/nlp/text_classification_with_transformer.py).

As the example (its Keras 3 version): reviews as lists of word indices below 20,000, padded or
cut to their last 200 by ``keras.utils.pad_sequences``; a token and position embedding (32
wide), one Transformer block (MultiHeadAttention with 2 heads of key size 32, a feed-forward of
32, layer normalisation and dropout 0.1 after each), global average pooling, Dropout(0.1),
Dense(20, relu), Dropout(0.1), Dense(2, softmax); Adam, sparse categorical cross-entropy,
accuracy; ``model.fit(x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val,
y_val))``.

Data: index sequences drawn locally instead of IMDB's: 40-400 words from a Zipf-distributed
vocabulary of 20,000 (indices counted from 3, as ``imdb.load_data`` counts them, after a
start mark of 1), in which 10-25 words come from two lists of 30 sentiment words: each from
the review's own class's list 85 times in 100, from the other's otherwise.

Scaled: 5,000 training and 2,000 validation reviews instead of 25,000 and 25,000 (``scale``
multiplies); the model and epochs are the example's.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

from tfopt.bench.workloads._base import Data, Workload, majority_share, scaled_count
from tfopt.bench.workloads._words import zipf_weights

NAME = "transformer_text"
VOCAB_SIZE = 20000
MAXLEN = 200
EMBED_DIM = 32
NUM_HEADS = 2
FF_DIM = 32
BATCH = 32
SENTIMENT_WORDS = 30  # per class


class TransformerBlock(layers.Layer):
    """Self-attention and a feed-forward, each followed by dropout, a residual and layer
    normalisation (the example's block)."""

    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"),
                                     layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attended = self.dropout1(self.att(inputs, inputs))
        out1 = self.layernorm1(inputs + attended)
        fed = self.dropout2(self.ffn(out1))
        return self.layernorm2(out1 + fed)


class TokenAndPositionEmbedding(layers.Layer):
    """A learned embedding of each token plus one of its position."""

    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        positions = self.pos_emb(ops.arange(start=0, stop=ops.shape(x)[-1], step=1))
        return self.token_emb(x) + positions


def _reviews(rng: np.random.Generator, count: int, marked: np.ndarray):
    """``count`` reviews (lists of indices) and their labels, the classes alternating."""
    common = np.arange(3 + 2 * SENTIMENT_WORDS, VOCAB_SIZE)
    weights = zipf_weights(common.size)
    reviews, labels = [], np.arange(count) % 2
    for label in labels:
        length = int(rng.integers(40, 401))
        words = rng.choice(common, size=length, p=weights)
        for _ in range(int(rng.integers(10, 26))):
            own = rng.random() < 0.85
            pool = marked[label if own else 1 - label]
            words[int(rng.integers(length))] = pool[int(rng.integers(len(pool)))]
        reviews.append([1, *words.tolist()])
    return reviews, labels.astype(np.int64)


def make_data(folder, seed: int, scale: float = 1.0) -> Data:
    """Padded index arrays ``x_train``, ``x_val`` and labels, in memory; nothing written."""
    rng = np.random.default_rng(seed)
    train, validation = scaled_count(5000, scale, 400), scaled_count(2000, scale, 200)
    marked = rng.permutation(np.arange(3, 3 + 2 * SENTIMENT_WORDS)).reshape(2, SENTIMENT_WORDS)
    x_train, y_train = _reviews(rng, train, marked)
    x_val, y_val = _reviews(rng, validation, marked)
    return Data(NAME, None, seed, scale, train, validation, arrays={
        "x_train": keras.utils.pad_sequences(x_train, maxlen=MAXLEN), "y_train": y_train,
        "x_val": keras.utils.pad_sequences(x_val, maxlen=MAXLEN), "y_val": y_val})


def inputs(data: Data) -> dict:
    return dict(data.arrays)


def build_model(_inputs) -> keras.Model:
    token_ids = layers.Input(shape=(MAXLEN,))
    x = TokenAndPositionEmbedding(MAXLEN, VOCAB_SIZE, EMBED_DIM)(token_ids)
    x = TransformerBlock(EMBED_DIM, NUM_HEADS, FF_DIM)(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(20, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    outputs = layers.Dense(2, activation="softmax")(x)
    return keras.Model(inputs=token_ids, outputs=outputs)


def compile_args() -> dict:
    return {"optimizer": "adam", "loss": "sparse_categorical_crossentropy",
            "metrics": ["accuracy"]}


def plain_fit(model, inputs: dict, epochs: int, verbose=0):
    return model.fit(inputs["x_train"], inputs["y_train"], batch_size=BATCH, epochs=epochs,
                     validation_data=(inputs["x_val"], inputs["y_val"]), verbose=verbose)


def run_inputs(inputs: dict) -> dict:
    return {"source": (inputs["x_train"], inputs["y_train"]), "batch_size": BATCH,
            "validation": (inputs["x_val"], inputs["y_val"])}


def baseline(data: Data) -> float:
    return majority_share(data.arrays["y_val"])


WORKLOAD = Workload(
    name=NAME, kind="transformer",
    source=("https://keras.io/examples/nlp/text_classification_with_transformer/",
            "https://github.com/keras-team/keras-io/blob/master/examples/nlp/"
            "text_classification_with_transformer.py"),
    scaled="5,000 + 2,000 synthetic index sequences instead of IMDB's 25,000 + 25,000",
    epochs=2, metric="val_accuracy", higher_is_better=True, make_data=make_data,
    inputs=inputs, build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline)
