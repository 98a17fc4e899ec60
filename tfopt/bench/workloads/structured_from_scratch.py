"""A DataFrame, preprocessing in the model: keras.io's "Structured data classification from
scratch".

Source: https://keras.io/examples/structured_data/structured_data_classification_from_scratch/
(https://github.com/keras-team/keras-io/blob/b0d68751937c4e87063b1267e6562a70481d879f/examples/structured_data/structured_data_classification_from_scratch.py).

This is the example as keras.io published it for TensorFlow (the commit linked above): every
feature is preprocessed inside the model, so the model takes the DataFrame's raw columns,
which is what a DataFrame source of ``tfopt.Run`` gives it. (The page has since been rewritten
to run on any backend; that version one-hot-encodes the categorical columns in the
``tf.data`` map instead.)

As the example: ``heart.csv`` read into a DataFrame, a fifth of the rows sampled with seed 1337
for validation, each frame turned into ``Dataset.from_tensor_slices((dict(frame), labels))``,
shuffled over its length and batched by 32; one ``keras.Input`` of shape (1,) per column;
``IntegerLookup`` (six integer categories) and ``StringLookup`` (``thal``) with
``output_mode="binary"``, and ``Normalization`` (six numbers), each adapted on its column of
the training dataset; concatenated, Dense(32, relu), Dropout(0.5), one sigmoid unit; Adam,
binary cross-entropy, accuracy; ``model.fit(train_ds, epochs=50, validation_data=val_ds)``.

Data: the table of :mod:`tfopt.bench.workloads._heart` (the original's columns, a target drawn
from several of them). Without pandas the table is a dict of its columns (the module says why).

Scaled: nothing; 303 rows as the original, 50 epochs (``scale`` multiplies the rows).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfopt.bench.workloads import _heart
from tfopt.bench.workloads._base import Data, Workload, fresh_folder, majority_share, scaled_count

NAME = "structured_from_scratch"
BATCH = 32
INTEGER_CATEGORIES = ("sex", "cp", "fbs", "restecg", "exang", "ca")
STRING_CATEGORIES = ("thal",)
NUMBERS = ("age", "trestbps", "chol", "thalach", "oldpeak", "slope")


def make_data(folder, seed: int, scale: float = 1.0) -> Data:
    """``folder/heart.csv``."""
    rng = np.random.default_rng(seed)
    rows = scaled_count(303, scale, 200)
    folder = fresh_folder(folder, NAME, seed, scale)
    path = folder / "heart.csv"
    _heart.write_heart_csv(path, rng, rows)
    validation = round(0.2 * rows)
    return Data(NAME, folder, seed, scale, rows - validation, validation, files=[path],
                info={"csv": path, "table_kind": _heart.table_kind()})


def inputs(data: Data) -> dict:
    """The frames (DataFrames, or dicts of columns without pandas) and the example's batched
    datasets made from them."""
    table = _heart.read_table(data.info["csv"])
    train_frame, val_frame = _heart.split(table)
    return {"train_frame": train_frame, "val_frame": val_frame,
            "train": _heart.table_to_dataset(train_frame).batch(BATCH),
            "validation": _heart.table_to_dataset(val_frame).batch(BATCH),
            "table_kind": _heart.table_kind(table)}


def _feature(dataset, name):
    return dataset.map(lambda x, y: x[name]).map(lambda x: tf.expand_dims(x, -1))


def encode_numerical_feature(feature, name, dataset):
    normalizer = keras.layers.Normalization()
    normalizer.adapt(_feature(dataset, name))
    return normalizer(feature)


def encode_categorical_feature(feature, name, dataset, is_string):
    lookup_class = keras.layers.StringLookup if is_string else keras.layers.IntegerLookup
    lookup = lookup_class(output_mode="binary")
    lookup.adapt(_feature(dataset, name))
    return lookup(feature)


def build_model(inputs: dict) -> keras.Model:
    """The example's model, its lookups and normalizers adapted on the training dataset."""
    train_ds = inputs["train"]
    columns = {}
    encoded = {}
    for name in INTEGER_CATEGORIES:
        columns[name] = keras.Input(shape=(1,), name=name, dtype="int64")
        encoded[name] = encode_categorical_feature(columns[name], name, train_ds, False)
    for name in STRING_CATEGORIES:
        columns[name] = keras.Input(shape=(1,), name=name, dtype="string")
        encoded[name] = encode_categorical_feature(columns[name], name, train_ds, True)
    for name in NUMBERS:
        columns[name] = keras.Input(shape=(1,), name=name)
        encoded[name] = encode_numerical_feature(columns[name], name, train_ds)
    # the example's order of the concatenation
    order = ("sex", "cp", "fbs", "restecg", "exang", "slope", "ca", "thal", "age", "trestbps",
             "chol", "thalach", "oldpeak")
    all_features = keras.layers.concatenate([encoded[name] for name in order])
    x = keras.layers.Dense(32, activation="relu")(all_features)
    x = keras.layers.Dropout(0.5)(x)
    output = keras.layers.Dense(1, activation="sigmoid")(x)
    order_of_inputs = (*INTEGER_CATEGORIES, *STRING_CATEGORIES, *NUMBERS)
    return keras.Model([columns[name] for name in order_of_inputs], output)


def compile_args() -> dict:
    return {"optimizer": "adam", "loss": "binary_crossentropy", "metrics": ["accuracy"]}


def plain_fit(model, inputs: dict, epochs: int, verbose=0):
    return model.fit(inputs["train"], epochs=epochs, validation_data=inputs["validation"],
                     verbose=verbose)


def run_inputs(inputs: dict) -> dict:
    # float32, as a user who timed both would pass it: epochs of 8 steps leave no room for
    # tfopt.Run's precision trial, and on a CPU the machine's bfloat16 slows a model this small
    # (docs/benchmarks.md, "tfopt.Run on public Keras workloads")
    return {"source": inputs["train_frame"], "label": _heart.TARGET, "batch_size": BATCH,
            "validation": inputs["val_frame"], "precision": "float32"}


def baseline(data: Data) -> float:
    _, val_frame = _heart.split(_heart.read_table(data.info["csv"]))
    return majority_share(_heart.labels_of(val_frame))


WORKLOAD = Workload(
    name=NAME, kind="dataframe",
    source=("https://keras.io/examples/structured_data/"
            "structured_data_classification_from_scratch/",
            "https://github.com/keras-team/keras-io/blob/b0d68751937c4e87063b1267e6562a70481d879f/"
            "examples/structured_data/structured_data_classification_from_scratch.py"),
    scaled="none: 303 synthetic rows with heart.csv's columns, 50 epochs",
    epochs=50, metric="val_accuracy", higher_is_better=True, make_data=make_data,
    inputs=inputs, build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline)
