"""The low-level TensorFlow APIs tfopt's analysis uses, in one place, pinned to tested versions.

``tf.raw_ops.DatasetToGraphV2`` (serialise a dataset's graph), ``tf.raw_ops.DatasetFromGraph``
(rebuild one), ``tf.raw_ops.DummyMemoryCache`` and ``tf.raw_ops.DummySeedGenerator`` (fresh
resources for a rebuilt cache or shuffle), ``tf.data.experimental.from_variant`` and
``tf.data.experimental.get_model_proto`` (what AUTOTUNE measured and chose); the private names
it needs (a dataset's variant tensor, the op registry) go through ``tfopt._internals``. Each is
exercised by ``tests/analysis/test_tfapi.py``, so a TensorFlow upgrade that breaks one fails
there first. On a TensorFlow outside :data:`TESTED_TENSORFLOW` the analysis runs with a
warning; where one of them is gone it stops with :class:`~tfopt.errors.UnsupportedDatasetError`
naming it.
"""

from __future__ import annotations

import logging

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tfopt._internals import TESTED_TENSORFLOW, InternalsChangedError, tf_runtime
from tfopt.errors import UnsupportedDatasetError

logger = logging.getLogger("tfopt")

_RAW_OPS = ("DatasetToGraphV2", "DatasetFromGraph", "DummyMemoryCache", "DummySeedGenerator")
_EXPERIMENTAL = ("from_variant", "get_model_proto")
_WARNED = []


def check_tensorflow() -> None:
    """Raise when an API used here is gone; warn (once) on an untested TensorFlow release."""
    missing = [f"tf.raw_ops.{name}" for name in _RAW_OPS if not hasattr(tf.raw_ops, name)]
    missing += [f"tf.data.experimental.{name}" for name in _EXPERIMENTAL
                if not hasattr(tf.data.experimental, name)]
    if missing:
        raise UnsupportedDatasetError(
            f"TensorFlow {tf.__version__} lacks {', '.join(missing)}, which tfopt.analyze "
            f"needs; it is tested on TensorFlow {', '.join(TESTED_TENSORFLOW)}")
    version = ".".join(tf.__version__.split(".")[:2])
    if version not in TESTED_TENSORFLOW and not _WARNED:
        _WARNED.append(version)
        logger.warning("TensorFlow %s: tfopt.analyze is tested on TensorFlow %s and uses some "
                       "of its private APIs; results may be wrong", tf.__version__,
                       ", ".join(TESTED_TENSORFLOW))


def variant_tensor(dataset: tf.data.Dataset) -> tf.Tensor:
    """The dataset's variant tensor (the handle its graph is serialised from)."""
    try:
        return tf_runtime.variant_tensor(dataset)
    except InternalsChangedError as error:
        raise UnsupportedDatasetError(
            f"{type(dataset).__name__}: {error.name} {error.problem}; tfopt.analyze is tested "
            f"on TensorFlow {', '.join(TESTED_TENSORFLOW)}") from None


def serialize(dataset: tf.data.Dataset) -> graph_pb2.GraphDef:
    """The dataset's GraphDef (``DatasetToGraphV2``, stateful ops allowed with a warning)."""
    try:
        serialized = tf.raw_ops.DatasetToGraphV2(
            input_dataset=variant_tensor(dataset), external_state_policy=1,  # WARN
            strip_device_assignment=False)  # True leaves "/device::0" on a py_function
    except tf.errors.OpError as error:
        raise UnsupportedDatasetError(
            f"this dataset cannot be serialised for analysis: {first_line(error)}") from None
    graph_def = graph_pb2.GraphDef()
    graph_def.ParseFromString(serialized.numpy())
    return graph_def


def rebuild(graph_def: graph_pb2.GraphDef, element_spec) -> tf.data.Dataset:
    """A dataset from a GraphDef whose ``_Retval`` names its output (``DatasetFromGraph``)."""
    try:
        variant = tf.raw_ops.DatasetFromGraph(graph_def=graph_def.SerializeToString())
        return tf.data.experimental.from_variant(variant, element_spec)
    except tf.errors.OpError as error:
        raise UnsupportedDatasetError(
            f"this dataset cannot be rebuilt for analysis: {first_line(error)}") from None


def model_proto(iterator):
    """``get_model_proto(iterator)``, or None when autotuning is off (``NotFound``)."""
    try:
        return tf.data.experimental.get_model_proto(iterator)
    except tf.errors.NotFoundError:
        return None


def fresh_resource_op(consumer_op: str) -> str | None:
    """The op that makes a fresh resource for the resource input of ``consumer_op``, or None."""
    if consumer_op.startswith("CacheDataset"):
        return "DummyMemoryCache"
    if consumer_op.startswith(("ShuffleDataset", "ShuffleAndRepeatDataset", "RandomDataset")):
        return "DummySeedGenerator"
    return None


def is_stateful(op: str) -> bool:
    """Whether TensorFlow registers ``op`` as stateful (False for an op it does not know, such
    as a function called by its name)."""
    return tf_runtime.is_stateful_op(op)


def first_line(error: Exception) -> str:
    """The first line of a TensorFlow error's message (the rest is a C++ stack or a graph)."""
    text = getattr(error, "message", None) or str(error)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if lines[0].startswith("Graph execution error") and len(lines) > 1:
        # the cause is at the end, after the stack of the node it was detected at
        causes = [line for line in lines if not line.startswith(("[[", "File ", "Detected at"))]
        return causes[-1] if len(causes) > 1 else lines[-1]
    return lines[0]
