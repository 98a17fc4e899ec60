"""A dataset's graph read into stages, source to output, and cut into prefixes.

Each stage is one dataset op of the serialised graph (``tfapi.serialize``): its op, the user's
``name=``, the parallelism its graph asks for, and what its functions (nested ones included)
run: heavy TensorFlow ops, random ops, Python. Graphs with more than one dataset input to an op
(``zip``, ``concatenate``, sampling) are refused for now with the op named, except a zip of one
dataset with endless ranges (``enumerate()``), which hands on one element per element of that
dataset: a stage of the chain like a map; and a zip of ``from_tensor_slices`` (or
``from_tensors``) sources only (Keras's ``image_dataset_from_directory`` zips its paths with
its labels so), which is the chain's source.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import tensorflow as tf
from tensorflow.core.framework import dataset_metadata_pb2, graph_pb2

from tfopt.analysis import tfapi
from tfopt.errors import UnsupportedDatasetError

# Ops inside a stage's function worth naming: decoding, resizing, parsing, big arithmetic.
HEAVY_OPS = frozenset({
    "DecodeJpeg", "DecodeAndCropJpeg", "DecodePng", "DecodeImage", "DecodeBmp", "DecodeGif",
    "DecodeWebP", "DecodeRaw", "DecodeCompressed", "ResizeBilinear", "ResizeBicubic",
    "ResizeNearestNeighbor", "ResizeArea", "ScaleAndTranslate", "CropAndResize",
    "ImageProjectiveTransformV3", "ParseExampleV2", "ParseSingleExample",
    "ParseSequenceExampleV2", "MatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D",
    "ReadFile", "EncodeJpeg", "EncodePng", "AdjustContrastv2", "AdjustHue", "AdjustSaturation",
})
# Stateful random ops, tf.random.Generator's ops and stateless ones. A stateless op is random
# too: its seed comes from somewhere per element (a counter, a Generator, the element), and a
# cache placed above it would freeze what it draws as surely as for a stateful op.
_RANDOM_PREFIXES = ("Random", "StatelessRandom", "StatefulUniform", "StatefulStandardNormal",
                    "StatefulTruncatedNormal", "StatefulRandom", "StatelessTruncatedNormal",
                    "StatelessMultinomial", "StatelessParameterizedTruncatedNormal",
                    "RngReadAndSkip", "RngSkip", "Multinomial", "TruncatedNormal",
                    "ParameterizedTruncatedNormal", "AnonymousSeedGenerator")
PYTHON_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
# Stateful ops that only read their state (a lookup table, a variable) or check a value: a
# function made of these and stateless ops gives each element the same result whichever order
# parallel calls run in. Writes (AssignVariableOp), random ops and I/O stay stateful.
READ_ONLY_STATEFUL = frozenset({
    "LookupTableFindV2", "LookupTableSizeV2", "ReadVariableOp", "ResourceGather",
    "ResourceGatherNd", "VariableShape", "VarIsInitializedOp", "Assert",
    "StatefulPartitionedCall",  # a call: the ops of the function it calls are read as well
})
# Dataset ops that are random themselves.
_RANDOM_DATASETS = ("ShuffleDataset", "ShuffleAndRepeatDataset", "RandomDataset",
                    "SamplingDataset")
# The Const input holding the parallelism, by op: its index among the data inputs (-1: the
# last, after the function's captured arguments).
_PARALLELISM_INPUT = {
    "ParallelMapDataset": -1, "ParallelMapDatasetV2": -1, "ParallelBatchDataset": 2,
    "ParallelInterleaveDatasetV2": -1, "ParallelInterleaveDatasetV3": -1,
    "ParallelInterleaveDatasetV4": -1, "ParallelFilterDataset": -1, "MapAndBatchDataset": -2,
}
AUTOTUNE = -1
_ENDLESS = 2**63 - 1  # the stop of enumerate()'s range
_DEFAULT_NAME = re.compile(r"[A-Za-z0-9_]+:\d+")


@dataclass(frozen=True)
class GraphStage:
    """One dataset op of the graph."""

    node: str  # the node's name in the GraphDef
    op: str
    name: str | None  # the user's name=, None where TensorFlow named it
    parallelism: int | None  # the graph's num_parallel_calls (-1: AUTOTUNE); None: sequential
    heavy_ops: tuple[str, ...]
    random: bool
    python: bool
    batch_size: int | None  # batch ops: elements in per element out
    buffer_size: int | None = None  # shuffles: the buffer's elements
    deterministic: str | None = None  # parallel ops: "true", "false" or "default" (options)
    # stateful ops in its functions other than READ_ONLY_STATEFUL: their results depend on the
    # order of calls (random draws, writes), so a rewrite must not run the calls in parallel
    stateful_ops: tuple[str, ...] = ()
    force_synchronous: bool = False  # a map the user asked to run one element at a time
    data_input: int | None = None  # a zip with counters: which of its inputs the chain follows


def read_graph(dataset: tf.data.Dataset) -> tuple[graph_pb2.GraphDef, list[GraphStage]]:
    """The dataset's GraphDef and its stages from source to output (options nodes left out).

    Raises:
        UnsupportedDatasetError: the graph cannot be serialised, or is not a chain.
    """
    graph_def = tfapi.serialize(dataset)
    nodes = {node.name: node for node in graph_def.node}
    functions = {function.signature.name: function for function in graph_def.library.function}
    (retval,) = [node for node in graph_def.node if node.op == "_Retval"]
    chain, followed = [], {}
    current = nodes[_source_name(retval.input[0])]
    while True:
        dataset_inputs = [nodes[_source_name(name)] for name in current.input
                          if not name.startswith("^") and _is_dataset(nodes[_source_name(name)])]
        if current.op == "ZipDataset" and all(_in_memory_leaf(n) for n in dataset_inputs):
            # Keras's image/audio/text_dataset_from_directory zip a dataset of paths with one
            # of labels, both in memory: one source of (path, label) pairs, like slices of both
            chain.append(current)
            break
        if len(dataset_inputs) > 1:
            data = [i for i, node in enumerate(dataset_inputs) if not _is_counter(node, nodes)]
            if current.op != "ZipDataset" or len(data) != 1:
                raise UnsupportedDatasetError(
                    f"{current.op} (node {current.name}) joins {len(dataset_inputs)} datasets; "
                    f"tfopt.analyze reads a single chain of stages for now (no zip, "
                    f"concatenate or sampling from several datasets; enumerate() is fine)")
            followed[current.name] = data[0]
            dataset_inputs = [dataset_inputs[data[0]]]
        if current.op != "OptionsDataset":
            chain.append(current)
        if not dataset_inputs:
            break
        current = dataset_inputs[0]
    chain.reverse()
    return graph_def, [_stage(node, nodes, functions, followed.get(node.name))
                       for node in chain]


# Sources of tensors held in memory: a zip of these only is one source of tuples (a zip of
# ranges, which no one needs, stays refused).
_TENSOR_SOURCES = ("TensorDataset", "TensorSliceDataset")


def _in_memory_leaf(node) -> bool:
    return node.op in _TENSOR_SOURCES


def _is_counter(node, nodes) -> bool:
    """An endless ``range``: the counter of ``enumerate()``."""
    inputs = _data_inputs(node)
    return (node.op == "RangeDataset" and len(inputs) == 3
            and _const_int(nodes, inputs[1]) == _ENDLESS)


def prefix_graph(graph_def: graph_pb2.GraphDef, node: str):
    """A copy of ``graph_def`` whose output is ``node``, with nodes it does not need removed
    and fresh caches and seed generators, and the element spec of that node's output."""
    graph = copy.deepcopy(graph_def)
    nodes = {n.name: n for n in graph.node}
    (retval,) = [n for n in graph.node if n.op == "_Retval"]
    retval.input[0] = node
    needed, todo = {retval.name}, [node]
    while todo:
        name = _source_name(todo.pop())
        if name not in needed:
            needed.add(name)
            todo.extend(nodes[name].input)
    for name in [n.name for n in graph.node if n.name not in needed]:
        graph.node.remove(nodes[name])
    fresh_resources(graph)
    target = nodes[node]
    spec = tuple(tf.TensorSpec(tf.TensorShape(shape), tf.dtypes.as_dtype(dtype))
                 for shape, dtype in zip(target.attr["output_shapes"].list.shape,
                                         _types(target), strict=True))
    return graph, spec[0] if len(spec) == 1 else spec


def _types(node) -> list:
    key = "output_types" if "output_types" in node.attr else "Toutput_types"  # TensorDataset
    return list(node.attr[key].list.type)


def fresh_resources(graph: graph_pb2.GraphDef) -> None:
    """Give every cache and shuffle its own resource: the serialised graph points at the
    original's (a cache it filled, the seed generator it advanced).

    Except the seed generator of a shuffle that draws one order for every pass
    (``reshuffle_each_iteration=False``): its order is the pipeline's, not a pass's. The
    images tutorial shuffles its file list so, then splits it with ``skip``; a fresh generator
    drew another split, and optimize's pipeline trained on files the original kept apart for
    validation."""
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(_source_name(name), []).append(node)
    for node in graph.node:
        if node.op != "Const" or node.attr["dtype"].type != tf.resource.as_datatype_enum:
            continue
        users = consumers.get(node.name, [])
        if any(_same_order_every_pass(user) for user in users):
            continue
        ops = {tfapi.fresh_resource_op(user.op) for user in users}
        if len(ops) == 1 and None not in ops:
            (fresh,) = ops
            node.op = fresh
            node.attr.clear()


def _stage(node, nodes, functions, data_input=None) -> GraphStage:
    heavy, python, stateful = set(), False, set()
    random = node.op.startswith(_RANDOM_DATASETS) and not _same_order_every_pass(node)
    for op in _function_ops(node, functions):
        heavy |= {op} & HEAVY_OPS
        random = random or op.startswith(_RANDOM_PREFIXES)
        python = python or op in PYTHON_OPS
        if _order_dependent(op, functions):
            stateful.add(op)
    synchronous = "force_synchronous" in node.attr and node.attr["force_synchronous"].b
    return GraphStage(node=node.name, op=node.op, name=_user_name(node),
                      parallelism=_parallelism(node, nodes), heavy_ops=tuple(sorted(heavy)),
                      random=random, python=python, batch_size=_batch_size(node, nodes),
                      buffer_size=_buffer_size(node, nodes), deterministic=_deterministic(node),
                      stateful_ops=tuple(sorted(stateful)), force_synchronous=synchronous,
                      data_input=data_input)


def _same_order_every_pass(node) -> bool:
    """A shuffle with ``reshuffle_each_iteration=False``: it draws one order and yields it on
    every pass, so a cache above it replays what it would yield anyway (the "Load and
    preprocess images" tutorial shuffles its file list so, then caches the decoded images)."""
    return (node.op.startswith("ShuffleDataset") and "reshuffle_each_iteration" in node.attr
            and not node.attr["reshuffle_each_iteration"].b)


def _order_dependent(op: str, functions) -> bool:
    """Whether a stateful ``op`` in a function gives results that depend on the order of calls.

    Not a read-only op, nor a call (the called function's ops are read too), nor a dataset op
    that is not random: an interleave's function makes a dataset per element, and what each
    yields depends on its own inputs."""
    if op in READ_ONLY_STATEFUL or op in functions or not tfapi.is_stateful(op):
        return False
    return not (op.endswith(("Dataset", "DatasetV2", "DatasetV3", "DatasetV4"))
                and not op.startswith(_RANDOM_DATASETS))


def _function_ops(node, functions) -> list[str]:
    """Every op in the functions ``node`` calls, nested calls included."""
    seen, ops = set(), []
    todo = [name for name in _called(node) if name in functions]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for inner in functions[name].node_def:
            ops.append(inner.op)
            todo.extend(f for f in _called(inner) if f in functions)
            if inner.op in functions:  # a function called by its name as an op
                todo.append(inner.op)
    return ops


def _called(node) -> list[str]:
    names = []
    for value in node.attr.values():
        if value.func.name:
            names.append(value.func.name)
        names.extend(f.name for f in value.list.func)
    return names


def _user_name(node) -> str | None:
    if "metadata" not in node.attr or not node.attr["metadata"].s:
        return None
    metadata = dataset_metadata_pb2.Metadata()
    metadata.ParseFromString(node.attr["metadata"].s)
    name = metadata.name.decode("utf-8", "replace") if isinstance(metadata.name, bytes) else metadata.name
    return None if not name or _DEFAULT_NAME.fullmatch(name) else name


def _const_int(nodes, input_name) -> int | None:
    node = nodes.get(_source_name(input_name))
    if node is None or node.op != "Const":
        return None
    values = tf.make_ndarray(node.attr["value"].tensor).reshape(-1)
    return int(values[0]) if values.size == 1 else None


def _data_inputs(node) -> list[str]:
    return [name for name in node.input if not name.startswith("^")]


def _parallelism(node, nodes) -> int | None:
    index = _PARALLELISM_INPUT.get(node.op)
    inputs = _data_inputs(node)
    if index is None or index >= len(inputs):
        return None
    return _const_int(nodes, inputs[index])


def _batch_size(node, nodes) -> int | None:
    if node.op in ("BatchDataset", "BatchDatasetV2", "ParallelBatchDataset",
                   "PaddedBatchDataset", "PaddedBatchDatasetV2", "MapAndBatchDataset"):
        inputs = _data_inputs(node)
        return _const_int(nodes, inputs[-3] if node.op == "MapAndBatchDataset" else inputs[1])
    return None


def _buffer_size(node, nodes) -> int | None:
    if node.op.startswith("ShuffleDataset") or node.op.startswith("ShuffleAndRepeatDataset"):
        return _const_int(nodes, _data_inputs(node)[1])
    return None


def _deterministic(node) -> str | None:
    if "deterministic" not in node.attr:
        return None
    value = node.attr["deterministic"].s
    return value.decode() if value else None


def undeterministic(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """A copy of ``graph_def`` whose parallel stages may yield out of order."""
    graph = copy.deepcopy(graph_def)
    for node in graph.node:
        if "deterministic" in node.attr:
            node.attr["deterministic"].s = b"false"
    return graph


def _is_dataset(node) -> bool:
    return "output_shapes" in node.attr and "Dataset" in node.op


def _source_name(input_name: str) -> str:
    return input_name.lstrip("^").split(":")[0]
