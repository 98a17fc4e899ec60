"""Fused batch normalisation for Keras 3 models on TensorFlow: one kernel instead of a dozen.

TensorFlow 2's own Keras ran ``BatchNormalization`` on 4-D NHWC inputs as one fused kernel
(``FusedBatchNormV3``, oneDNN-accelerated on CPUs). Keras 3 has no fused path: it casts the
activations to float32, computes the moments, the moving averages and the normalisation as
separate ops and casts back, each a pass over the whole tensor. On a CPU that makes batch
normalisation a large share of a convolutional network's training step, larger under
``mixed_bfloat16`` (the casts are passes too); fused, a small one
(``scripts/bench_batch_norm.py`` compares with the layers replaced by identities;
docs/benchmarks.md has its figures).

:func:`fuse_batch_norm` gives a model's batch-normalisation layers TensorFlow's fused kernel
back: ``tf.compat.v1.nn.fused_batch_norm`` in training (batch statistics, and the moving
averages updated by the kernel itself with ``exponential_avg_factor = 1 - momentum``) and in
inference (the moving statistics). bfloat16/float16 activations go in and out as they are,
with float32 statistics, as under Keras's mixed policies. The math is Keras's, with one
difference: the kernel updates the moving variance with the unbiased batch variance
(n / (n - 1), n = batch x height x width: 1.0001 for 12x12 maps of a batch of 64), where
Keras uses the biased one.

Only layers that fit the kernel change: normalising the last axis, no renormalisation, not
``synchronized``; each call still falls back to Keras's own code for inputs that are not 4-D
or come with a mask. The change is on the layer objects, not in the saved model: a model saved
and loaded again is plain Keras, with the same weights and results.
"""

from __future__ import annotations

import types

import keras
import tensorflow as tf

from tfopt._internals.keras_model import all_layers
from tfopt.errors import InvalidArgumentError

__all__ = ["check_keras_model", "fuse_batch_norm", "is_fused"]

_FUSABLE_DTYPES = (tf.float32, tf.bfloat16, tf.float16)


def _fusable(layer) -> bool:
    # a subclass with its own call() keeps it: fusing would skip what it adds
    if (not isinstance(layer, keras.layers.BatchNormalization)
            or type(layer).call is not keras.layers.BatchNormalization.call):
        return False
    axis = layer.axis[0] if isinstance(layer.axis, (list, tuple)) else layer.axis
    # axis 3 of a 4-D input is the last one: NHWC, the layout the kernel is given
    return axis in (-1, 3) and not layer.renorm and not layer.synchronized


def _float32(variable):
    return tf.cast(tf.convert_to_tensor(variable), tf.float32)


def _fused_call(self, inputs, training=None, mask=None):
    inputs = tf.convert_to_tensor(inputs)
    if (mask is not None or inputs.shape.rank != 4 or inputs.dtype not in _FUSABLE_DTYPES
            or self.renorm or self.synchronized):
        return type(self).call(self, inputs, training=training, mask=mask)
    channels = inputs.shape[-1]
    scale = _float32(self.gamma) if self.scale else tf.ones([channels], tf.float32)
    offset = _float32(self.beta) if self.center else tf.zeros([channels], tf.float32)
    moving_mean, moving_variance = _float32(self.moving_mean), _float32(self.moving_variance)
    if training and self.trainable:
        outputs, new_mean, new_variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, scale, offset, mean=moving_mean, variance=moving_variance,
            epsilon=self.epsilon, data_format="NHWC", is_training=True,
            exponential_avg_factor=1.0 - self.momentum)
        self.moving_mean.assign(tf.cast(new_mean, self.moving_mean.dtype))
        self.moving_variance.assign(tf.cast(new_variance, self.moving_variance.dtype))
    else:
        outputs, _, _ = tf.compat.v1.nn.fused_batch_norm(
            inputs, scale, offset, mean=moving_mean, variance=moving_variance,
            epsilon=self.epsilon, data_format="NHWC", is_training=False)
    return tf.cast(outputs, self.compute_dtype)


def check_keras_model(model, function: str) -> None:
    """Raise InvalidArgumentError unless ``model`` is a Keras layer (a model is one)."""
    if not isinstance(model, keras.layers.Layer):
        raise InvalidArgumentError(
            f"{function}(model): expected a Keras model, got {type(model).__name__} "
            f"{model!r:.80}; pass the model object (build it first)")


def is_fused(layer) -> bool:
    """Whether :func:`fuse_batch_norm` switched this layer to the fused kernel."""
    call = getattr(layer, "call", None)
    return getattr(call, "__func__", None) is _fused_call


def fuse_batch_norm(model) -> int:
    """Run the model's batch normalisation with TensorFlow's fused kernel (see the module).

    Call it after building the model and before the first ``fit``, ``evaluate`` or
    ``predict`` (the step functions are traced then). Calling it again changes nothing.

    Args:
        model: A Keras 3 model (TensorFlow backend); nested models are searched too.

    Returns:
        How many ``BatchNormalization`` layers now run fused (already fused ones included).

    Raises:
        InvalidArgumentError: ``model`` is not a Keras model or layer.

    Example:
        >>> with tfopt.enable_policy("mixed_bfloat16"):
        ...     model = build_model()
        >>> tfopt.fuse_batch_norm(model)
        9
    """
    check_keras_model(model, "fuse_batch_norm")
    fused = 0
    for layer in all_layers(model):
        if not _fusable(layer):
            continue
        if not is_fused(layer):
            layer.call = types.MethodType(_fused_call, layer)
        fused += 1
    return fused
