"""The floating-point operations of a Keras model, counted from its layers' shapes.

Keras and TensorFlow count none (keras #18391), and the ``tf.compat.v1`` profiler miscounts
some convolutions, so :func:`model_flops` counts layer by layer from the shapes a forward
pass of a single example gives each layer; the pass is traced, never run, so nothing is
computed. The convention is the MFU papers' (PaLM, Megatron):
a multiply-add counts 2, and a training step counts 3 forward passes (the backward pass
computes two products for each of the forward's). Beside the products, each bias add,
activation and element-wise operation counts 1 per output element, a normalisation 4 per
element, and a pooling window its size per output. A layer whose kind is not known here is
named in :attr:`ModelFlops.uncounted`, never guessed: the total is then a lower bound.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping

import numpy as np

from tfopt._internals.keras_model import all_layers
from tfopt._system import usable_cores
from tfopt.errors import InvalidArgumentError
from tfopt.gpu.hardware import cpu_features
from tfopt.gpu.peak import PeakFlops, cpu_peak, gpus_peak

__all__ = ["ModelFlops", "TRAINING_PASSES", "device_peak", "model_flops"]

# forward, and the backward pass's two products per forward product (gradients of the inputs
# and of the weights)
TRAINING_PASSES = 3
NORMALISATION_FLOPS = 4  # per element: subtract the mean, divide by the deviation, scale, shift


@dataclasses.dataclass(frozen=True)
class ModelFlops:
    """The forward FLOPs of one example through a model.

    Attributes:
        forward: FLOPs of one example's forward pass (a multiply-add counts 2).
        by_layer: Each counted layer's share, by layer name (a layer called twice, twice).
        uncounted: Names of the layers of a kind this module does not know; ``forward``
            leaves them out.
    """

    forward: int
    by_layer: Mapping[str, int]
    uncounted: tuple[str, ...] = ()

    @property
    def training(self) -> int:
        """FLOPs of one example's training step: :data:`TRAINING_PASSES` forward passes."""
        return TRAINING_PASSES * self.forward

    @property
    def exact(self) -> bool:
        """Every layer was counted."""
        return not self.uncounted


def _size(shape) -> int:
    return int(math.prod(int(d) for d in shape))


def _elements(shape) -> int:
    """Elements of one example of a batched ``shape`` (the batch of one left out)."""
    return _size(shape[1:])


def _positions(shape, channels_last: bool = True) -> int:
    """Spatial (or time) positions of one example: every axis but batch and channels."""
    return _size(shape[1:-1] if channels_last else shape[2:])


def _bias(layer, outputs: int) -> int:
    return outputs if getattr(layer, "use_bias", False) else 0


def _activation(layer, outputs: int) -> int:
    activation = getattr(layer, "activation", None)
    name = getattr(activation, "__name__", None)
    return 0 if activation is None or name == "linear" else outputs


def _dense(layer, inputs, output) -> int:
    units = output[-1]
    positions = _size(output[1:-1])
    return (2 * inputs[0][-1] * units * positions + _bias(layer, units * positions)
            + _activation(layer, units * positions))


def _einsum_dense(layer, inputs, output) -> int:
    """Each output element is a dot product over the kernel's axes that the equation sums
    (the kernel's letters missing from the output's)."""
    operands, out_spec = layer.equation.replace(" ", "").split("->")
    kernel_spec = operands.split(",")[1]
    kernel = layer.kernel.shape
    contracted = _size([size for letter, size in zip(kernel_spec, kernel, strict=True)
                        if letter not in out_spec])
    out = _elements(output)
    return 2 * out * contracted + (out if layer.bias is not None else 0) + _activation(layer, out)


def _channels_last(layer) -> bool:
    return getattr(layer, "data_format", "channels_last") != "channels_first"


def _conv(layer, inputs, output) -> int:
    kernel = layer.kernel.shape  # (*kernel_size, in_channels / groups, filters)
    out = _elements(output)
    products = out * _size(kernel[:-1])
    return 2 * products + _bias(layer, out) + _activation(layer, out)


def _conv_transpose(layer, inputs, output) -> int:
    last = _channels_last(layer)
    kernel = layer.kernel.shape  # (*kernel_size, filters, in_channels)
    products = _positions(inputs[0], last) * _size(kernel)
    out = _elements(output)
    return 2 * products + _bias(layer, out) + _activation(layer, out)


def _depthwise(layer, inputs, output) -> int:
    kernel = layer.kernel.shape  # (*kernel_size, in_channels, multiplier)
    out = _elements(output)
    return 2 * out * _size(kernel[:-2]) + _bias(layer, out) + _activation(layer, out)


def _separable(layer, inputs, output) -> int:
    last = _channels_last(layer)
    depth = layer.depthwise_kernel.shape  # (*kernel_size, in_channels, multiplier)
    point = layer.pointwise_kernel.shape  # (1.., in_channels * multiplier, filters)
    positions = _positions(output, last)
    middle = depth[-2] * depth[-1]
    out = _elements(output)
    return (2 * positions * middle * _size(depth[:-2]) + 2 * positions * middle * point[-1]
            + _bias(layer, out) + _activation(layer, out))


def _recurrent(layer, inputs, output) -> int:
    """SimpleRNN, GRU, LSTM: each time step multiplies the input and the state by each gate's
    kernel and adds each gate's bias (a GRU with ``reset_after`` has two biases per gate)."""
    cell = layer.cell
    gates = {"LSTMCell": 4, "GRUCell": 3, "SimpleRNNCell": 1}[type(cell).__name__]
    steps, features = inputs[0][1], inputs[0][-1]
    units = cell.units
    biases = (2 if getattr(cell, "reset_after", False) else 1) if cell.use_bias else 0
    per_step = 2 * gates * units * (features + units) + biases * gates * units
    return int(steps) * per_step


def _attention(layer, inputs, output, kwargs) -> int:
    """MultiHeadAttention: the query, key and value projections, the scores, their softmax,
    the weighted sum of the values and the output projection."""
    query = inputs[0]
    value = inputs[1] if len(inputs) > 1 else kwargs["value"]
    key = inputs[2] if len(inputs) > 2 else kwargs.get("key", value)
    heads, key_dim = layer.num_heads, layer.key_dim
    value_dim = layer.value_dim or key_dim
    tq, tk = _positions(query), _positions(key)
    bias = 1 if layer.use_bias else 0
    projections = (
        tq * heads * key_dim * (2 * query[-1] + bias)
        + tk * heads * key_dim * (2 * key[-1] + bias)
        + _positions(value) * heads * value_dim * (2 * value[-1] + bias))
    scores = 2 * heads * tq * tk * key_dim + heads * tq * tk  # products, then the softmax
    weighted = 2 * heads * tq * tk * value_dim
    out_dim = output[-1]
    projection_out = tq * out_dim * (2 * heads * value_dim + bias)
    return projections + scores + weighted + projection_out


def _pooling(layer, inputs, output) -> int:
    return _elements(output) * _size(layer.pool_size)


def _global_pooling(layer, inputs, output) -> int:
    return _elements(inputs[0])


def _normalisation(layer, inputs, output) -> int:
    return NORMALISATION_FLOPS * _elements(output)


def _elementwise(layer, inputs, output) -> int:
    return _elements(output)


def _merge(layer, inputs, output) -> int:
    return (len(inputs) - 1) * _elements(output)


def _free(layer, inputs, output) -> int:
    return 0


# kinds by class name, so a layer of a kind the running Keras lacks costs nothing to list
_COUNTS = {
    "Dense": _dense, "EinsumDense": _einsum_dense,
    "Conv1D": _conv, "Conv2D": _conv, "Conv3D": _conv,
    "Conv1DTranspose": _conv_transpose, "Conv2DTranspose": _conv_transpose,
    "Conv3DTranspose": _conv_transpose,
    "DepthwiseConv1D": _depthwise, "DepthwiseConv2D": _depthwise,
    "SeparableConv1D": _separable, "SeparableConv2D": _separable,
    "SimpleRNN": _recurrent, "GRU": _recurrent, "LSTM": _recurrent,
    "MaxPooling1D": _pooling, "MaxPooling2D": _pooling, "MaxPooling3D": _pooling,
    "AveragePooling1D": _pooling, "AveragePooling2D": _pooling, "AveragePooling3D": _pooling,
    "GlobalAveragePooling1D": _global_pooling, "GlobalAveragePooling2D": _global_pooling,
    "GlobalAveragePooling3D": _global_pooling, "GlobalMaxPooling1D": _global_pooling,
    "GlobalMaxPooling2D": _global_pooling, "GlobalMaxPooling3D": _global_pooling,
    "BatchNormalization": _normalisation, "LayerNormalization": _normalisation,
    "GroupNormalization": _normalisation, "UnitNormalization": _normalisation,
    "Normalization": _normalisation,
    "Activation": _elementwise, "ReLU": _elementwise, "LeakyReLU": _elementwise,
    "PReLU": _elementwise, "ELU": _elementwise, "Softmax": _elementwise,
    "Rescaling": _elementwise,
    "Add": _merge, "Subtract": _merge, "Multiply": _merge, "Average": _merge,
    "Maximum": _merge, "Minimum": _merge,
    # data movement, lookups and layers that do nothing at inference
    "InputLayer": _free, "Embedding": _free, "Flatten": _free, "Reshape": _free,
    "Permute": _free, "RepeatVector": _free, "Concatenate": _free, "Cropping1D": _free,
    "Cropping2D": _free, "Cropping3D": _free, "ZeroPadding1D": _free, "ZeroPadding2D": _free,
    "ZeroPadding3D": _free, "UpSampling1D": _free, "UpSampling2D": _free,
    "UpSampling3D": _free, "Dropout": _free, "SpatialDropout1D": _free,
    "SpatialDropout2D": _free, "SpatialDropout3D": _free, "GaussianNoise": _free,
    "GaussianDropout": _free, "AlphaDropout": _free, "ActivityRegularization": _free,
    "Masking": _free, "Identity": _free, "StringLookup": _free, "IntegerLookup": _free,
    "TextVectorization": _free, "Hashing": _free, "CategoryEncoding": _free,
}
# counted whole: what they call inside them is part of their count
_WHOLE = {"MultiHeadAttention", "Bidirectional", *_COUNTS}


def _shape(value) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    return tuple(1 if d is None else int(d) for d in shape)


def _tensor_shapes(value) -> list[tuple[int, ...]]:
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [shape for item in value for shape in _tensor_shapes(item)]
    shape = _shape(value)
    return [] if shape is None else [shape]


def _count(layer, args, kwargs, result) -> int | None:
    kind = type(layer).__name__
    inputs = _tensor_shapes(list(args))
    kw_shapes = {key: _shape(value) for key, value in kwargs.items() if _shape(value)}
    output = _tensor_shapes(result)
    output = output[0] if output else ()
    if kind == "MultiHeadAttention":
        return _attention(layer, inputs, output, kw_shapes)
    if kind == "Bidirectional":
        counts = [_count(direction, args, {}, None)
                  for direction in (layer.forward_layer, layer.backward_layer)]
        return None if None in counts else sum(counts)
    count = _COUNTS.get(kind)
    if count is None:
        return None
    return count(layer, inputs, output)


def _input_specs(model):
    """A ``tf.TensorSpec`` of one example (batch 1) for each of the model's inputs."""
    import tensorflow as tf

    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if not inputs:
        raise InvalidArgumentError(
            f"model_flops({type(model).__name__}): a model without symbolic inputs (a "
            "subclassed model); pass example= one batch of its inputs")
    specs = []
    for tensor in inputs:
        shape = tuple(tensor.shape)[1:]
        if any(d is None for d in shape):
            raise InvalidArgumentError(
                f"model_flops: input {tensor.name!r} has shape {tuple(tensor.shape)}; expected "
                "known sizes after the batch axis: pass example= one batch of real inputs")
        specs.append(tf.TensorSpec((1, *shape), str(tensor.dtype)))
    return specs[0] if len(specs) == 1 else specs


def _example_specs(example):
    """The ``tf.TensorSpec`` of the first example of each part of a batch ``example``."""
    import tensorflow as tf

    return tf.nest.map_structure(
        lambda value: tf.TensorSpec((1, *np.shape(value)[1:]), tf.as_dtype(value.dtype)),
        example)


def model_flops(model, example=None) -> ModelFlops:
    """Count the forward FLOPs of one example through a built Keras ``model``.

    Args:
        model: A built Keras model (functional, sequential or subclassed, models nested).
        example: One batch of the model's inputs, as the model takes them; its first example
            is counted. Defaults to None: zeros of the model's input shapes (which must all be
            known, and numeric).

    Returns:
        :class:`ModelFlops`: the forward count, each layer's share, and the layers of an
        unknown kind, named.

    Raises:
        tfopt.errors.InvalidArgumentError: No ``example`` and an input of unknown size (or a
            subclassed model without symbolic inputs).

    Example:
        >>> model_flops(keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])).forward
        68
    """

    import tensorflow as tf

    specs = _input_specs(model) if example is None else _example_specs(example)
    counted: dict[str, int] = {}
    uncounted: list[str] = []
    active: list[str] = []  # kinds counted whole, now calling their inner layers

    def wrap(layer):
        call = layer.call

        def counting_call(*args, **kwargs):
            if active:
                return call(*args, **kwargs)
            kind = type(layer).__name__
            whole = kind in _WHOLE
            if whole:
                active.append(kind)
            try:
                result = call(*args, **kwargs)
            finally:
                if whole:
                    active.pop()
            if whole:
                flops = _count(layer, args, kwargs, result)
                if flops is None:
                    uncounted.append(layer.name)
                else:
                    counted[layer.name] = counted.get(layer.name, 0) + int(flops)
            elif not all_layers(layer):  # a custom layer's own math: not known here
                uncounted.append(layer.name)
            return result

        return counting_call

    wrapped = all_layers(model)
    # a layer's own call set on the instance (fuse_batch_norm's fused kernel) is put back
    own_calls = {id(layer): vars(layer)["call"] for layer in wrapped if "call" in vars(layer)}
    for layer in wrapped:
        object.__setattr__(layer, "call", wrap(layer))
    try:
        with warnings.catch_warnings():
            # a model built on a list of one input warns that one array is not that list
            warnings.simplefilter("ignore", UserWarning)
            # traced, never run: the layers see static shapes and nothing is computed
            tf.function(lambda inputs: model(inputs, training=False)).get_concrete_function(
                specs)
    finally:
        for layer in wrapped:
            if id(layer) in own_calls:
                object.__setattr__(layer, "call", own_calls[id(layer)])
            else:
                object.__delattr__(layer, "call")
    return ModelFlops(forward=sum(counted.values()), by_layer=counted,
                      uncounted=tuple(dict.fromkeys(uncounted)))


def device_peak(workers: int, replicas: int, gpus: int) -> tuple[PeakFlops | None, str]:
    """MFU's denominator for this worker's step (the CPU's, or the sum of the GPUs its
    ``replicas`` use), or None and why there is none."""
    import tensorflow as tf

    if workers > 1:
        # one worker's examples over one worker's peak would need every worker's devices
        return None, "none: the workers of a cluster may share cores or differ in them"
    if not gpus:
        peak = cpu_peak(cpu_features(), usable_cores())
        return peak, "none: this CPU reports no clock (neither /proc/cpuinfo nor cpufreq)"
    devices = tf.config.list_physical_devices("GPU")[:replicas]
    names = [tf.config.experimental.get_device_details(device).get("device_name", device.name)
             for device in devices]
    peak = gpus_peak(names, tensorfloat32=tf.config.experimental
                     .tensor_float_32_execution_enabled())
    unknown = ", ".join(dict.fromkeys(names))
    return peak, (f"none: {unknown} is not in tfopt's table of GPU peaks "
                  "(tfopt.gpu.peak.GPU_DATASHEETS); no peak is better than a guessed one")
