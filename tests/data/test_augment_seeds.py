"""Seeds: the same seed gives the same batch, each op draws from its own stream, NumPy integer seeds."""

from __future__ import annotations

import numpy as np

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
from augment_helpers import ALL_OPS, uint8_batch  # noqa: E402

from tfopt.data.augment.functional import (  # noqa: E402
    augment_batch,
    augment_dataset,
)
from tfopt.data.augment.layer import Augment  # noqa: E402


def test_same_seed_same_batch_other_seed_other_batch():
    images = uint8_batch()
    first = augment_batch(images, seed=7, **ALL_OPS)
    again = augment_batch(images, seed=tf.constant([7, 0]), **ALL_OPS)
    other = augment_batch(images, seed=8, **ALL_OPS)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert not np.allclose(first.numpy(), other.numpy())
    assert first.shape == (8, 24, 24, 3)


def test_switching_one_op_on_keeps_the_other_ops_draws():
    images = uint8_batch(batch=16)
    horizontal = augment_batch(images, seed=3, horizontal_flip=0.5, normalization="none")
    both = augment_batch(images, seed=3, horizontal_flip=0.5, vertical_flip=1.0,
                         brightness=0.0, normalization="none")
    np.testing.assert_array_equal(tf.image.flip_up_down(both).numpy(), horizontal.numpy())


def test_numpy_integer_seeds_are_ints():
    layer = Augment(seed=np.int64(3), output_dtype="float32")
    assert layer.seed == 3 and type(layer.seed) is int
    same = Augment(seed=3, output_dtype="float32")
    images = uint8_batch(batch=2)
    np.testing.assert_array_equal(layer(images, training=True).numpy(),
                                  same(images, training=True).numpy())
    dataset = tf.data.Dataset.from_tensor_slices(images).batch(2)
    next(iter(augment_dataset(dataset, seed=np.int32(1))))
