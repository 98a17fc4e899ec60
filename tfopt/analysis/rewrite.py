"""Edits of a dataset's GraphDef that change how fast it runs, never what it yields.

Each edit takes the serialised graph (``tfapi.serialize``) and the node of one stage and returns
an edited copy: a sequential map or interleave made parallel (``ParallelMapDatasetV2``,
``ParallelInterleaveDatasetV4`` with ``deterministic="default"``, which follows the dataset's
options and so keeps the order unless the user turned it off), a parallelism raised to
AUTOTUNE, a batch made parallel (``ParallelBatchDataset``), a prefetch at the output, a memory
cache after a stage. Which edits are safe and worth it is :mod:`.optimize`'s decision.
"""

from __future__ import annotations

import copy

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from tfopt.analysis.graph import AUTOTUNE

# The parallel op each sequential one becomes.
_PARALLEL_OPS = {
    "MapDataset": "ParallelMapDatasetV2",
    "InterleaveDataset": "ParallelInterleaveDatasetV4",
    "BatchDataset": "ParallelBatchDataset",
    "BatchDatasetV2": "ParallelBatchDataset",
}
_PARALLEL_ATTRS = {  # the parallel op's attributes: copied where the sequential op has them
    "ParallelMapDatasetV2": ("f", "Targuments", "output_types", "output_shapes",
                             "use_inter_op_parallelism", "preserve_cardinality", "metadata"),
    "ParallelInterleaveDatasetV4": ("f", "Targuments", "output_types", "output_shapes",
                                    "metadata"),
    "ParallelBatchDataset": ("parallel_copy", "output_types", "output_shapes", "metadata"),
}


def parallel_op(op: str) -> str | None:
    """The parallel op a sequential ``op`` becomes, or None."""
    return _PARALLEL_OPS.get(op)


def make_parallel(graph_def: graph_pb2.GraphDef, node_name: str) -> graph_pb2.GraphDef:
    """A copy with the sequential map, interleave or batch ``node_name`` run in parallel
    (AUTOTUNE), in order where the options keep order."""
    graph = copy.deepcopy(graph_def)
    node = _node(graph, node_name)
    new_op = _PARALLEL_OPS[node.op]
    data = [name for name in node.input if not name.startswith("^")]
    controls = [name for name in node.input if name.startswith("^")]
    autotune = _const(graph, f"{node.name}/tfopt_parallelism", AUTOTUNE)
    if new_op == "ParallelMapDatasetV2":
        inputs = [*data, autotune]
    elif new_op == "ParallelInterleaveDatasetV4":
        # cycle_length and block_length stay; buffer and prefetch sizes as interleave() sets
        # them for num_parallel_calls (AUTOTUNE)
        buffer = _const(graph, f"{node.name}/tfopt_buffer_output_elements", AUTOTUNE)
        prefetch = _const(graph, f"{node.name}/tfopt_prefetch_input_elements", AUTOTUNE)
        inputs = [*data, buffer, prefetch, autotune]
    else:  # ParallelBatchDataset: input, batch_size, num_parallel_calls, drop_remainder
        inputs = [data[0], data[1], autotune, data[2]] if len(data) == 3 else [
            data[0], data[1], autotune, _bool_const(graph, f"{node.name}/tfopt_drop", False)]
    attrs = {key: copy.deepcopy(node.attr[key]) for key in _PARALLEL_ATTRS[new_op]
             if key in node.attr}
    node.op = new_op
    del node.input[:]
    node.input.extend([*inputs, *controls])
    node.attr.clear()
    for key, value in attrs.items():
        node.attr[key].CopyFrom(value)
    node.attr["deterministic"].s = b"default"
    return graph


def set_autotune(graph_def: graph_pb2.GraphDef, node_name: str) -> graph_pb2.GraphDef:
    """A copy whose parallel map ``node_name`` runs with num_parallel_calls=AUTOTUNE."""
    graph = copy.deepcopy(graph_def)
    node = _node(graph, node_name)
    data = [name for name in node.input if not name.startswith("^")]
    # its own Const: the one it has may feed other nodes too
    replacement = _const(graph, f"{node.name}/tfopt_parallelism", AUTOTUNE)
    position = list(node.input).index(data[-1])
    node.input[position] = replacement
    return graph


def append_prefetch(graph_def: graph_pb2.GraphDef) -> graph_pb2.GraphDef:
    """A copy whose output goes through ``prefetch(AUTOTUNE)``."""
    graph = copy.deepcopy(graph_def)
    retval = _retval(graph)
    output = _node(graph, retval.input[0].split(":")[0])
    buffer = _const(graph, "tfopt_prefetch/buffer_size", AUTOTUNE)
    prefetch = graph.node.add(name=_unique(graph, "tfopt_prefetch"), op="PrefetchDataset",
                              input=[retval.input[0], buffer])
    _copy_shapes(output, prefetch)
    prefetch.attr["legacy_autotune"].b = True
    retval.input[0] = prefetch.name
    return graph


def insert_cache(graph_def: graph_pb2.GraphDef, node_name: str) -> graph_pb2.GraphDef:
    """A copy with an in-memory ``cache()`` of its own right after ``node_name``."""
    graph = copy.deepcopy(graph_def)
    node = _node(graph, node_name)
    consumers = [(n, i) for n in graph.node for i, name in enumerate(n.input)
                 if name.split(":")[0] == node.name and not name.startswith("^")]
    filename = graph.node.add(name=_unique(graph, f"{node.name}/tfopt_cache_filename"),
                              op="Const")
    filename.attr["dtype"].type = tf.string.as_datatype_enum
    filename.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(""))
    memory = graph.node.add(name=_unique(graph, f"{node.name}/tfopt_cache_memory"),
                            op="DummyMemoryCache")
    cache = graph.node.add(name=_unique(graph, f"{node.name}/tfopt_cache"), op="CacheDatasetV2",
                           input=[node.name, filename.name, memory.name])
    _copy_shapes(node, cache)
    for consumer, index in consumers:
        consumer.input[index] = cache.name
    return graph


def _copy_shapes(source, target) -> None:
    key = "output_types" if "output_types" in source.attr else "Toutput_types"
    target.attr["output_types"].CopyFrom(source.attr[key])
    target.attr["output_shapes"].CopyFrom(source.attr["output_shapes"])


def _const(graph: graph_pb2.GraphDef, name: str, value: int) -> str:
    node = graph.node.add(name=_unique(graph, name), op="Const")
    node.attr["dtype"].type = tf.int64.as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, dtype=tf.int64))
    return node.name


def _bool_const(graph: graph_pb2.GraphDef, name: str, value: bool) -> str:
    node = graph.node.add(name=_unique(graph, name), op="Const")
    node.attr["dtype"].type = tf.bool.as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, dtype=tf.bool))
    return node.name


def _unique(graph: graph_pb2.GraphDef, name: str) -> str:
    taken = {node.name for node in graph.node}
    candidate, count = name, 1
    while candidate in taken:
        count += 1
        candidate = f"{name}_{count}"
    return candidate


def _node(graph: graph_pb2.GraphDef, name: str):
    for node in graph.node:
        if node.name == name:
            return node
    raise KeyError(name)


def _retval(graph: graph_pb2.GraphDef):
    (retval,) = [node for node in graph.node if node.op == "_Retval"]
    return retval


