"""Text files and ``TextVectorization``: keras.io's "Text classification from scratch".

Source: https://keras.io/examples/nlp/text_classification_from_scratch/
(https://github.com/keras-team/keras-io/blob/master/examples/nlp/text_classification_from_scratch.py).

As the example: a folder of review files in ``train/pos`` and ``train/neg`` (the aclImdb
layout), read by ``keras.utils.text_dataset_from_directory`` (batches of 32, 20 % held out for
validation with seed 1337, ``class_names=["pos", "neg"]``); a ``TextVectorization`` layer
(lower case, ``<br />`` and punctuation stripped, 20,000 tokens, sequences of 500) adapted on
the training text and mapped over both datasets, which are then cached and prefetched; the
model: Embedding(20000, 128), Dropout(0.5), two Conv1D(128, 7, strides=3), global max
pooling, Dense(128), Dropout(0.5), one sigmoid unit; Adam, binary cross-entropy, accuracy;
``model.fit(train_ds, validation_data=val_ds, epochs=3)``.

Data: reviews written locally, of 80-250 made-up words (a Zipf-distributed vocabulary) with
``<br />`` breaks and punctuation, in which 25-40 of the words come from two short lists of
sentiment words: each from the review's own class's list three times in four, from the other
class's list otherwise, so that no single word decides a review (a signal strong enough to be
learned in the example's three short epochs).

Scaled: 2,500 reviews instead of the 25,000 of aclImdb's training folder (``scale``
multiplies); epochs and model as the example.
"""

from __future__ import annotations

import re
import string

import keras
import numpy as np
import tensorflow as tf

from tfopt.bench.workloads._base import Data, Workload, fresh_folder, majority_share, scaled_count
from tfopt.bench.workloads._words import made_up_words, zipf_weights

NAME = "text_from_scratch"
BATCH = 32
SPLIT_SEED = 1337
MAX_FEATURES = 20000
EMBEDDING_DIM = 128
SEQUENCE_LENGTH = 500
CLASS_NAMES = ["pos", "neg"]
SENTIMENT_WORDS = 10  # per class


def make_data(folder, seed: int, scale: float = 1.0) -> Data:
    """``folder/train/pos/*.txt`` and ``folder/train/neg/*.txt``, half of each."""
    rng = np.random.default_rng(seed)
    count = scaled_count(2500, scale, 200)
    folder = fresh_folder(folder, NAME, seed, scale)
    words = made_up_words(rng, 4000 + 2 * SENTIMENT_WORDS)
    filler, weights = words[:4000], zipf_weights(4000)
    marked = {"pos": words[4000:4000 + SENTIMENT_WORDS], "neg": words[4000 + SENTIMENT_WORDS:]}
    files = []
    for index in range(count):
        label = CLASS_NAMES[index % 2]
        other = CLASS_NAMES[1 - index % 2]
        length = int(rng.integers(80, 251))
        tokens = list(rng.choice(filler, size=length, p=weights))
        for _ in range(int(rng.integers(25, 41))):
            pool = marked[label] if rng.random() < 0.75 else marked[other]
            tokens[int(rng.integers(length))] = pool[int(rng.integers(len(pool)))]
        text = _as_prose(tokens, rng)
        path = folder / "train" / label / f"{index}_{int(rng.integers(1, 11))}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        files.append(path)
    validation = int(0.2 * count)  # what text_dataset_from_directory's split holds out
    return Data(NAME, folder, seed, scale, count - validation, validation, files=files,
                info={"train_dir": folder / "train"})


def _as_prose(tokens: list[str], rng: np.random.Generator) -> str:
    sentences, start = [], 0
    while start < len(tokens):
        end = start + int(rng.integers(6, 20))
        sentence = " ".join(tokens[start:end])
        sentences.append(sentence[:1].upper() + sentence[1:] + rng.choice([".", "!", "?", "."]))
        start = end
    paragraphs = [" ".join(sentences[i:i + 4]) for i in range(0, len(sentences), 4)]
    return "<br /><br />".join(paragraphs)


def custom_standardization(input_data):
    """Lower case, ``<br />`` and punctuation removed, as the example's standardizer."""
    lowercase = tf.strings.lower(input_data)
    without_breaks = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(without_breaks, f"[{re.escape(string.punctuation)}]", "")


def _raw(data: Data, subset: str):
    return keras.utils.text_dataset_from_directory(
        str(data.info["train_dir"]), batch_size=BATCH, validation_split=0.2, subset=subset,
        seed=SPLIT_SEED, class_names=CLASS_NAMES, verbose=False)


def inputs(data: Data) -> dict:
    """The example's pipeline: raw text datasets, the vectorizer adapted on the training text
    and mapped over both, then ``cache().prefetch(10)``."""
    raw_train, raw_val = _raw(data, "training"), _raw(data, "validation")
    vectorize_layer = keras.layers.TextVectorization(
        standardize=custom_standardization, max_tokens=MAX_FEATURES, output_mode="int",
        output_sequence_length=SEQUENCE_LENGTH)
    vectorize_layer.adapt(raw_train.map(lambda x, y: x))

    def vectorize_text(text, label):
        return vectorize_layer(tf.expand_dims(text, -1)), label

    train_ds = raw_train.map(vectorize_text).cache().prefetch(buffer_size=10)
    val_ds = raw_val.map(vectorize_text).cache().prefetch(buffer_size=10)
    return {"train": train_ds, "validation": val_ds}


def build_model(_inputs) -> keras.Model:
    layers = keras.layers
    token_ids = keras.Input(shape=(None,), dtype="int64")
    x = layers.Embedding(MAX_FEATURES, EMBEDDING_DIM)(token_ids)
    x = layers.Dropout(0.5)(x)
    x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.Conv1D(128, 7, padding="valid", activation="relu", strides=3)(x)
    x = layers.GlobalMaxPooling1D()(x)
    x = layers.Dense(128, activation="relu")(x)
    x = layers.Dropout(0.5)(x)
    predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)
    return keras.Model(token_ids, predictions)


def compile_args() -> dict:
    return {"loss": "binary_crossentropy", "optimizer": "adam", "metrics": ["accuracy"]}


def plain_fit(model, inputs: dict, epochs: int, verbose=0):
    return model.fit(inputs["train"], validation_data=inputs["validation"], epochs=epochs,
                     verbose=verbose)


def run_inputs(inputs: dict) -> dict:
    return {"source": inputs["train"], "validation": inputs["validation"]}


def baseline(data: Data) -> float:
    labels = np.concatenate([y.numpy() for _, y in _raw(data, "validation")])
    return majority_share(labels)


WORKLOAD = Workload(
    name=NAME, kind="text",
    source=("https://keras.io/examples/nlp/text_classification_from_scratch/",
            "https://github.com/keras-team/keras-io/blob/master/examples/nlp/"
            "text_classification_from_scratch.py"),
    scaled="2,500 synthetic review files instead of aclImdb's 25,000",
    epochs=3, metric="val_accuracy", higher_is_better=True, make_data=make_data,
    inputs=inputs, build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline)
