"""Small real pipelines for the analysis tests: a deliberately slow map (a chain of matmuls,
about 0.3 ms an element on one core) over an infinite range."""

from __future__ import annotations

import pytest

from tfopt._tf import import_tensorflow

tf = import_tensorflow()


def slow(x):
    m = tf.fill([128, 128], tf.cast(x % 7, tf.float32) * 1e-3)
    for _ in range(6):
        m = tf.matmul(m, m) * 1e-3
    return tf.reduce_sum(m)


@pytest.fixture
def jpeg_bytes():
    image = tf.cast(tf.random.stateless_uniform([96, 96, 3], [1, 2], maxval=255), tf.uint8)
    return tf.io.encode_jpeg(image)


@pytest.fixture
def big_jpeg():
    """A 384 px JPEG: decoding it costs about 1-2 ms."""
    image = tf.cast(tf.random.stateless_uniform([384, 384, 3], [1, 2], maxval=255), tf.uint8)
    return tf.io.encode_jpeg(image)
