"""What the docs' Python blocks use without defining it: the reader's own objects.

``tests/test_docs.py`` runs every Python block of README.md and docs/*.md as a script in a
folder that holds ``photos/`` (an image folder of ``CLASSES`` classes) and, unless the block
converts it itself, ``shards/`` (that folder converted, 10 % validation). A block that uses a
name before it defines it gets the name from here, imported in the script's first line:

- ``tfopt``, ``keras``, ``tf``: the modules;
- ``dataset``, ``my_dataset``: a user's own ``tf.data`` pipeline, (image, label) batches read
  from ``photos/`` with a sequential map (so ``tfopt.analyze`` and ``tfopt.optimize`` have a
  stage to find);
- ``model``: a small compiled Keras classifier for images of any size, ``CLASSES`` outputs;
- ``build_model``: a function returning that model uncompiled (with batch norm, for
  ``fuse_batch_norm``);
- ``builder``: ``tfopt.PipelineBuilder("shards/", ...)`` for training.

Each is made on first use (PEP 562): a block that needs no TensorFlow imports none. A block
that needs another name fails, naming it: define it in the block, or add it here.

A module of its own, not a conftest: the scripts import it.
"""

from __future__ import annotations

import importlib

CLASSES = 3
GIVEN = ("tfopt", "keras", "tf", "dataset", "my_dataset", "model", "build_model", "builder")


def build_model():
    import keras

    inputs = keras.Input((None, None, 3))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    x = keras.layers.Conv2D(8, 3, strides=2, use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(CLASSES, dtype="float32")(x)  # float32 logits under any policy
    return keras.Model(inputs, outputs)


def _model():
    import keras

    model = build_model()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


def _dataset():
    from pathlib import Path

    import tensorflow as tf

    classes = sorted(path.name for path in Path("photos").iterdir())

    def load(path):
        label = tf.argmax(tf.cast(tf.strings.split(path, "/")[-2] == classes, tf.int32))
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return tf.image.resize(image, (64, 64)), label

    return tf.data.Dataset.list_files("photos/*/*.jpg", shuffle=False).map(load).batch(16)


def _builder():
    import tfopt

    return tfopt.PipelineBuilder("shards/", batch_size=16, training=True, image_size=64)


_MAKERS = {
    "tfopt": lambda: importlib.import_module("tfopt"),
    "keras": lambda: importlib.import_module("keras"),
    "tf": lambda: importlib.import_module("tensorflow"),
    "dataset": _dataset,
    "my_dataset": _dataset,
    "model": _model,
    "builder": _builder,
}


def __getattr__(name):
    if name not in _MAKERS:
        raise AttributeError(name)
    value = _MAKERS[name]()
    globals()[name] = value
    return value
