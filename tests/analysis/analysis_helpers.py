"""Small real pipelines for the analysis tests: a deliberately slow map (a chain of matmuls,
about 0.3 ms an element on one core) over an infinite range.

A module of its own, not a conftest of this folder: test files import the suite's helpers with
``from conftest import ...``, and a second conftest module would take that name."""

from __future__ import annotations

from tfopt._tf import import_tensorflow

tf = import_tensorflow()


def slow(x):
    m = tf.fill([128, 128], tf.cast(x % 7, tf.float32) * 1e-3)
    for _ in range(6):
        m = tf.matmul(m, m) * 1e-3
    return tf.reduce_sum(m)


def random_jpeg(side: int):
    """Encoded JPEG bytes of a ``side`` x ``side`` noise image (decoding 384 px: 1-2 ms)."""
    image = tf.cast(tf.random.stateless_uniform([side, side, 3], [1, 2], maxval=255), tf.uint8)
    return tf.io.encode_jpeg(image)
