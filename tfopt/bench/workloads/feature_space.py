"""A DataFrame through ``keras.utils.FeatureSpace``: keras.io's "Structured data classification
with FeatureSpace".

Source: https://keras.io/examples/structured_data/structured_data_classification_with_feature_space/
(https://github.com/keras-team/keras-io/blob/master/examples/structured_data/structured_data_classification_with_feature_space.py).

As the example: ``heart.csv`` read into a DataFrame, a fifth sampled with seed 1337 for
validation, each frame turned into ``Dataset.from_tensor_slices((dict(frame), labels))``,
shuffled and batched by 32; the customised ``FeatureSpace`` (six integer categories and
``thal`` without out-of-vocabulary indices, ``age`` discretised into 30 bins, five normalised
numbers, the crosses ``sex`` x ``age`` (64) and ``thal`` x ``ca`` (16), ``output_mode="concat"``)
adapted on the training features and mapped over both datasets in the ``tf.data`` pipeline
(``num_parallel_calls=AUTOTUNE``, then prefetch); the training model on the encoded features:
Dense(32, relu), Dropout(0.5), one sigmoid unit; Adam, binary cross-entropy, accuracy;
``fit(preprocessed_train_ds, epochs=20, validation_data=preprocessed_val_ds)``.

Data: the table of :mod:`tfopt.bench.workloads._heart`, with its own seed. Without pandas the
table is a dict of its columns (that module says why).

Scaled: nothing; 303 rows as the original, 20 epochs (``scale`` multiplies the rows).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras.utils import FeatureSpace

from tfopt.bench.workloads import _heart
from tfopt.bench.workloads._base import Data, Workload, fresh_folder, majority_share, scaled_count

NAME = "feature_space"
BATCH = 32


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


def make_feature_space() -> FeatureSpace:
    return FeatureSpace(
        features={
            "sex": FeatureSpace.integer_categorical(num_oov_indices=0),
            "cp": FeatureSpace.integer_categorical(num_oov_indices=0),
            "fbs": FeatureSpace.integer_categorical(num_oov_indices=0),
            "restecg": FeatureSpace.integer_categorical(num_oov_indices=0),
            "exang": FeatureSpace.integer_categorical(num_oov_indices=0),
            "ca": FeatureSpace.integer_categorical(num_oov_indices=0),
            "thal": FeatureSpace.string_categorical(num_oov_indices=0),
            "age": FeatureSpace.float_discretized(num_bins=30),
            "trestbps": FeatureSpace.float_normalized(),
            "chol": FeatureSpace.float_normalized(),
            "thalach": FeatureSpace.float_normalized(),
            "oldpeak": FeatureSpace.float_normalized(),
            "slope": FeatureSpace.float_normalized(),
        },
        crosses=[
            FeatureSpace.cross(feature_names=("sex", "age"), crossing_dim=64),
            FeatureSpace.cross(feature_names=("thal", "ca"), crossing_dim=16),
        ],
        output_mode="concat",
    )


def inputs(data: Data) -> dict:
    """The example's pipeline: frames to batched datasets, the feature space adapted on the
    training features and mapped over both."""
    table = _heart.read_table(data.info["csv"])
    train_frame, val_frame = _heart.split(table)
    train_ds = _heart.table_to_dataset(train_frame).batch(BATCH)
    val_ds = _heart.table_to_dataset(val_frame).batch(BATCH)
    feature_space = make_feature_space()
    feature_space.adapt(train_ds.map(lambda x, _: x))
    preprocessed_train_ds = train_ds.map(lambda x, y: (feature_space(x), y),
                                         num_parallel_calls=tf.data.AUTOTUNE)
    preprocessed_val_ds = val_ds.map(lambda x, y: (feature_space(x), y),
                                     num_parallel_calls=tf.data.AUTOTUNE)
    return {"feature_space": feature_space,
            "train": preprocessed_train_ds.prefetch(tf.data.AUTOTUNE),
            "validation": preprocessed_val_ds.prefetch(tf.data.AUTOTUNE),
            "table_kind": _heart.table_kind(table)}


def build_model(inputs: dict) -> keras.Model:
    """The example's training model: it takes the encoded feature vector."""
    encoded_features = inputs["feature_space"].get_encoded_features()
    x = keras.layers.Dense(32, activation="relu")(encoded_features)
    x = keras.layers.Dropout(0.5)(x)
    predictions = keras.layers.Dense(1, activation="sigmoid")(x)
    return keras.Model(inputs=encoded_features, outputs=predictions)


def compile_args() -> dict:
    return {"optimizer": "adam", "loss": "binary_crossentropy", "metrics": ["accuracy"]}


def plain_fit(model, inputs: dict, epochs: int, verbose=0):
    return model.fit(inputs["train"], epochs=epochs, validation_data=inputs["validation"],
                     verbose=verbose)


def run_inputs(inputs: dict) -> dict:
    return {"source": inputs["train"], "validation": inputs["validation"]}


def baseline(data: Data) -> float:
    _, val_frame = _heart.split(_heart.read_table(data.info["csv"]))
    return majority_share(_heart.labels_of(val_frame))


WORKLOAD = Workload(
    name=NAME, kind="featurespace",
    source=("https://keras.io/examples/structured_data/"
            "structured_data_classification_with_feature_space/",
            "https://github.com/keras-team/keras-io/blob/master/examples/structured_data/"
            "structured_data_classification_with_feature_space.py"),
    scaled="none: 303 synthetic rows with heart.csv's columns, 20 epochs",
    epochs=20, metric="val_accuracy", higher_is_better=True, make_data=make_data,
    inputs=inputs, build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline)
