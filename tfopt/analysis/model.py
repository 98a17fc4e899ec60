"""What ``tf.data.experimental.get_model_proto`` says about each stage.

The model is the pipeline as it runs: after TensorFlow's static optimisations, which fuse a map
into the batch after it (``MapAndBatch``), two maps in a row into one (``map_fusion``) and a
shuffle into the repeat after it (``ShuffleAndRepeat``), parallelise a sequential map
(``map_parallelization``) and add a prefetch at the end (``inject_prefetch``). Its nodes are
matched to the graph's stages from the output down; a node the graph lacks (an injected
prefetch, a cache's inner node) is noted, not matched, and matching stops at the first node it
cannot explain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tfopt.analysis.advice import PASS_THROUGH
from tfopt.analysis.graph import GraphStage


@dataclass(frozen=True)
class ModelNode:
    """One node of the model: its own counters, summed over its threads."""

    name: str  # "ParallelMapV2", "MapAndBatch", "Prefetch", ...
    elements: int
    processing_ns: int  # self time, wall clock, summed over the node's threads
    bytes_produced: int
    bytes_buffered: int
    parameters: dict[str, float] = field(default_factory=dict)  # parallelism, buffer_size, ...
    tunable: frozenset[str] = frozenset()  # the parameters AUTOTUNE sets

    @property
    def parallelism(self) -> int | None:
        value = self.parameters.get("parallelism")
        return None if value is None else int(value)


@dataclass(frozen=True)
class ModelReading:
    output_elements: int  # elements the pipeline's root produced
    cpu_budget: int
    by_stage: dict[str, ModelNode]  # graph node name -> its model node
    fused_into_next: frozenset[str]  # graph nodes whose work runs in the next stage's node
    injected_prefetch: bool  # a Prefetch at the output that the graph does not have
    # the model's node that runs the output ahead of its consumer (an injected Prefetch, or an
    # asynchronous stage such as MapAndBatch that TensorFlow made of a map and a batch), None
    # where the consumer waits for each element to be made
    runs_ahead: str | None = None


def chain(proto, picks=()) -> list[ModelNode]:
    """The model's nodes from the output down (first input of each), the root left out.

    A node's other inputs are the datasets its function made (an interleave's or flat_map's
    per-element datasets): their work is the stage's work, so their processing time is added
    to the node's own. ``picks``: for each ``Zip`` node, from the output down, the input to
    follow (the graph's ``GraphStage.data_input``: the data beside the counters); the first
    where none is left; a zip's other inputs are not its work.
    """
    nodes, out, picks = proto.nodes, [], list(picks)
    key = proto.output
    while key in nodes:
        node = nodes[key]
        if node.name != "Root":
            inner = 0 if node.name == "Zip" else sum(
                _subtree_ns(nodes, k) for k in list(node.inputs)[1:])
            out.append(ModelNode(
                name=node.name, elements=int(node.num_elements),
                processing_ns=int(node.processing_time) + inner,
                bytes_produced=int(node.bytes_produced),
                bytes_buffered=int(node.buffered_bytes),
                # state_value is what runs now; value is the model's last recommendation
                parameters={p.name: float(p.state_value or p.value) for p in node.parameters},
                tunable=frozenset(p.name for p in node.parameters if p.tunable)))
        if not node.inputs:
            break
        pick = picks.pop(0) if node.name == "Zip" and picks else 0
        key = node.inputs[pick if pick < len(node.inputs) else 0]
    return out


# Ops that run ahead of their consumer: TensorFlow injects no prefetch after one.
_ASYNCHRONOUS = ("PrefetchDataset", "ParallelMapDataset", "MapAndBatchDataset",
                 "ParallelBatchDataset", "ParallelInterleaveDataset", "ParallelFilterDataset")


def _subtree_ns(nodes, key) -> int:
    """Processing time of the node ``key`` and everything under it."""
    total, todo, seen = 0, [key], set()
    while todo:
        current = todo.pop()
        if current in seen or current not in nodes:
            continue
        seen.add(current)
        total += int(nodes[current].processing_time)
        todo.extend(nodes[current].inputs)
    return total


def read_model(proto, stages: list[GraphStage], repeated: bool = False) -> ModelReading:
    """Match the model's nodes to ``stages`` (source to output); ``repeated``: the measured
    iterator ran the pipeline under a ``repeat()`` of the analysis's own, which is left out."""
    model = chain(proto, [s.data_input for s in reversed(stages) if s.data_input is not None])
    injected = False
    if repeated:  # ours is at the output, under a prefetch TensorFlow may have injected
        ours = next((i for i, node in enumerate(model[:2])
                     if op_kind(node.name) == "foreverrepeat"), None)
        if ours is not None:
            # a prefetch above it was injected for our repeat, which is synchronous: one would
            # be injected for the pipeline itself only where its own last op is synchronous too
            injected = ours == 1 and not stages[-1].op.startswith(_ASYNCHRONOUS)
            del model[:ours + 1]
    root = proto.nodes[proto.output]
    output_elements = int(root.num_elements) or (model[0].elements if model else 0)
    by_stage, fused = {}, set()
    graph = list(reversed(stages))  # output first, like the model
    g = 0
    for index, node in enumerate(model):
        if g >= len(graph):
            break
        stage = graph[g]
        kind = op_kind(node.name)
        if kind == "prefetch" and op_kind(stage.op) != "prefetch":
            injected = injected or index == 0
            continue
        lower = graph[g + 1] if g + 1 < len(graph) else None
        following = op_kind(model[index + 1].name) if index + 1 < len(model) else None
        if lower is not None and _fused(kind, op_kind(stage.op), op_kind(lower.op), following):
            by_stage[stage.node] = node
            by_stage[lower.node] = node
            fused.add(lower.node)  # its work runs in the node of the stage above it
            g += 2
            continue
        if kind.endswith("impl") and index > 0 and op_kind(model[index - 1].name).endswith(
                kind[:-4]):
            continue  # a cache's inner node
        if _matches(kind, op_kind(stage.op)):
            by_stage[stage.node] = node
            g += 1
            continue
        break  # a rewrite this module does not know: leave the rest unmatched
    budget = int(proto.optimization_params.cpu_budget) if proto.HasField(
        "optimization_params") else 0
    return ModelReading(output_elements, budget, by_stage, frozenset(fused), injected,
                        _runs_ahead(model, injected))


# TensorFlow's static fusions: the model's node, the graph's stage it stands for, and the
# stage below that runs inside it (map_and_batch_fusion, shuffle_and_repeat_fusion)
_FUSIONS = (("mapandbatch", ("batch", "parallelbatch"), ("map", "parallelmap")),
            ("shuffleandrepeat", ("repeat",), ("shuffle",)))
_MAPS = ("map", "parallelmap")


def _fused(kind: str, upper: str, lower: str, following: str | None) -> bool:
    """Whether the model's node of ``kind`` runs the graph's stages ``upper`` and ``lower``
    (the one below it) together; ``following`` is the kind of the model's next node down."""
    if any(kind == node and upper in uppers and lower in lowers
           for node, uppers, lowers in _FUSIONS):
        return True
    # map_fusion: two maps in a row, one map node, and what comes next in the model is no map
    return kind in _MAPS and upper in _MAPS and lower in _MAPS and following not in _MAPS


def op_kind(op: str) -> str:
    """An op's kind, as the graph and the model both name it: ``ParallelMapDatasetV2`` and
    ``ParallelMapV2`` -> ``parallelmap``."""
    return re.sub(r"v\d+$", "", op.lower().replace("dataset", ""))


def _matches(model_kind: str, graph_kind: str) -> bool:
    # ForeverRepeat ~ Repeat, MemoryCache ~ Cache, ParallelMap ~ Map (map_parallelization),
    # ParallelBatch ~ Batch (parallel_batch)
    return model_kind == graph_kind or model_kind.endswith(graph_kind)


# The kinds (op_kind) of the model's nodes that run ahead of their consumer, and of those that
# pass elements through as they come (advice.PASS_THROUGH; the model names a repeat() whose
# count is -1 ForeverRepeat)
_AHEAD_KINDS = frozenset(op_kind(op) for op in (*_ASYNCHRONOUS, "LegacyParallelInterleaveDataset"))
_PASSING_KINDS = frozenset(op_kind(op) for op in (*PASS_THROUGH, "ForeverRepeatDataset"))


def _runs_ahead(model: list[ModelNode], injected: bool) -> str | None:
    """The name of the output's model node that makes elements ahead of the consumer (past
    take, repeat and the like), or None: TensorFlow injects no prefetch after such a node, and
    writing one after it adds a buffer but no overlap."""
    if injected:
        return "Prefetch"
    for node in model:
        kind = op_kind(node.name)
        if kind in _AHEAD_KINDS:
            return node.name
        if kind not in _PASSING_KINDS:
            return None
    return None
