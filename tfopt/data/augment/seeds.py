"""Seeds for stateless random ops: one seed in, independent streams out, XLA-safe.

Every op draws from its own stream (:class:`Stream`), split from one batch seed, so switching
one op on leaves the others' draws as they were. Seeds are int32 and non-negative, so that a
model compiled with XLA draws the same numbers as run eagerly.

Example:
    >>> crop_seed = split_seed(as_seed(0), len(Stream))[Stream.CROP]
"""

from __future__ import annotations

import enum

import tensorflow as tf

from tfopt._validate import is_int
from tfopt.errors import InvalidArgumentError

# Stateless ops want int32 seeds to compile under XLA (Keras casts its int64 seed state the
# same way), so every seed is reduced modulo this.
SEED_MODULUS = 2**31 - 1


class Stream(enum.IntEnum):
    """One independent random stream per op: switching one op on leaves the others' draws."""

    CROP = 0
    FLIP_H = 1
    FLIP_V = 2
    BRIGHTNESS = 3
    CONTRAST = 4
    SATURATION = 5
    MIX = 6


def as_seed(seed) -> tf.Tensor:
    """``seed`` as the shape-[2] int32 tensor stateless ops take."""
    if seed is None:
        # not reproducible unless tf.random.set_seed was called: the documented default
        return tf.random.uniform([2], maxval=SEED_MODULUS, dtype=tf.int32)
    if is_int(seed):
        return tf.constant([int(seed) % SEED_MODULUS, 0], tf.int32)
    try:
        tensor = tf.convert_to_tensor(seed)
    except (TypeError, ValueError):
        tensor = None
    if tensor is None or not tensor.dtype.is_integer or tensor.shape.rank not in (0, 1) or (
            tensor.shape.rank == 1 and tensor.shape[0] != 2):
        raise InvalidArgumentError(
            f"seed={seed!r}: expected an int, an integer scalar tensor or a shape-[2] integer "
            "tensor (as keras.random.SeedGenerator.next() returns)")
    # int32 for XLA, non-negative so that XLA and the kernels agree (see non_negative)
    tensor = tf.cast(tf.math.floormod(tf.cast(tensor, tf.int64), SEED_MODULUS), tf.int32)
    if tensor.shape.rank == 0:
        tensor = tf.stack([tensor, tf.zeros_like(tensor)])
    return tensor


def non_negative(seeds):
    # XLA reads negative seed words differently from TensorFlow's kernels (TF 2.21: seed
    # [123, -5] draws other numbers compiled than eager; every non-negative seed agrees), and
    # split and fold_in return negative words half the time: clear the sign bit.
    return tf.bitwise.bitwise_and(seeds, 0x7FFFFFFF)


def split_seed(seed, num: int) -> list:
    """``num`` independent seeds from ``seed``."""
    return tf.unstack(non_negative(tf.random.experimental.stateless_split(seed, num)))


def fold_in(seed, data) -> tf.Tensor:
    """A seed from ``seed`` and an integer (a batch index, a replica id)."""
    return non_negative(tf.random.experimental.stateless_fold_in(seed, data))


def uniform(shape, seed, minval=0.0, maxval=1.0) -> tf.Tensor:
    """Stateless float32 uniform in [minval, maxval), the same with and without XLA.

    ``tf.random.stateless_uniform`` for floats gives other numbers under XLA than eagerly for
    the same seed and algorithm (seen with TF 2.21 on CPU, Philox and auto_select), so a model
    compiled by ``model.fit`` would not augment like the same model run eagerly. The raw 32-bit
    draws agree (for non-negative seeds, see :func:`non_negative`), so floats are built from
    those: the top 24 bits, exact in float32.
    """
    bits = tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.uint32)
    unit = tf.cast(tf.bitwise.right_shift(bits, 8), tf.float32) * (1.0 / (1 << 24))
    return minval + unit * (maxval - minval)
