"""The allocation model (Plumber, MLSys 2022) and the recommendations drawn from it: pure, no
TensorFlow, tested on hand-made stages.

Each stage i costs ``cost_i`` CPU seconds per output element (its self time times the elements
it makes per output element). With ``C`` cores and ideal parallelism the pipeline reaches

    ceiling = min(C / sum_i cost_i, min over stages j that cannot run in parallel of 1 / cost_j)

and as written each stage bounds it at ``min(p_i, C) / cost_i`` with ``p_i`` its parallelism (1
for a sequential stage, AUTOTUNE's choice for a tuned one): the predicted rate is the smallest
of those bounds and ``C / sum cost``. The bottleneck is the stage with the smallest bound, or,
when the cores are what binds, the stage that costs the most.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tfopt.analysis.report import Recommendation, Stage

# Ops a rewrite can run in parallel (num_parallel_calls); the rest run one element at a time.
PARALLELIZABLE = ("MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2",
                  "InterleaveDataset", "ParallelInterleaveDatasetV2",
                  "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4",
                  "BatchDataset", "BatchDatasetV2", "ParallelBatchDataset",
                  "MapAndBatchDataset")
# Ops that pass elements through at the output and say nothing about prefetching.
_PASS_THROUGH = ("RepeatDataset", "TakeDataset", "SkipDataset", "AssertCardinalityDataset",
                 "ShardDataset", "FinalizeDataset", "ModelDataset", "MaxIntraOpParallelismDataset",
                 "PrivateThreadPoolDataset", "ThreadPoolDataset")
NEAR_CEILING = 0.8  # a measured rate at this fraction of the ceiling is near it


@dataclass(frozen=True)
class Allocation:
    ceiling_per_s: float | None
    predicted_per_s: float | None
    bottleneck: str | None


def parallelism_now(stage: Stage, cores: int) -> int:
    """The workers stage runs on as written (1: sequential)."""
    if stage.python:
        return 1  # behind the GIL whatever its num_parallel_calls
    if stage.runtime_parallelism is not None:
        return max(1, stage.runtime_parallelism)
    if stage.parallelism is None:
        return 1
    return cores if stage.parallelism == -1 else max(1, stage.parallelism)


def can_parallelize(stage: Stage) -> bool:
    return stage.op in PARALLELIZABLE and not stage.python


def _bound(stage: Stage, workers: int, cores: int) -> float:
    cost = stage.cost_s
    return math.inf if cost <= 0 else min(workers, cores) / cost


def predicted_rate(stages, cores: int, workers: dict[int, int] | None = None) -> float | None:
    """The model's output rate with each stage on ``workers[index]`` (default: as written)."""
    total = sum(s.cost_s for s in stages)
    if total <= 0:
        return None
    workers = workers or {}
    bounds = [_bound(s, workers.get(s.index, parallelism_now(s, cores)), cores)
              for s in stages]
    return min(cores / total, *bounds)


def allocation(stages, cores: int) -> Allocation:
    total = sum(s.cost_s for s in stages)
    if total <= 0:
        return Allocation(None, None, None)
    sequential = [1 / s.cost_s for s in stages if not can_parallelize(s) and s.cost_s > 0]
    ceiling = min(cores / total, *sequential)
    predicted = predicted_rate(stages, cores)
    bounds = {s.label: _bound(s, parallelism_now(s, cores), cores) for s in stages}
    label, smallest = min(bounds.items(), key=lambda item: item[1])
    if smallest > cores / total:  # the cores bind: the stage that costs the most
        label = max(stages, key=lambda s: s.cost_s).label
    return Allocation(ceiling, predicted, label)


def recommendations(stages, cores: int, measured_per_s: float,
                    injected_prefetch: bool) -> list[Recommendation]:
    out = []
    plan = allocation(stages, cores)
    if plan.bottleneck is not None:
        out += _parallelize(stages, cores, measured_per_s, plan)
    out += _prefetch(stages, injected_prefetch)
    return out


def _parallelize(stages, cores, measured_per_s, plan: Allocation) -> list[Recommendation]:
    near = (measured_per_s >= NEAR_CEILING * plan.ceiling_per_s
            or (plan.predicted_per_s or 0) >= 0.9 * plan.ceiling_per_s)
    stage = next(s for s in stages if s.label == plan.bottleneck)
    if near or parallelism_now(stage, cores) > 1 or not can_parallelize(stage):
        return []
    if "Map" not in stage.op and "Interleave" not in stage.op:
        return []
    after = predicted_rate(stages, cores, {stage.index: cores})
    speedup = after / plan.predicted_per_s
    if speedup < 1.05:
        return []
    what = "map" if "Map" in stage.op else "interleave"
    return [Recommendation(
        "parallelize", stage.label, speedup,
        f"{stage.label} runs one element at a time and holds the pipeline to "
        f"{plan.predicted_per_s:,.0f} elements/s; pass num_parallel_calls=tf.data.AUTOTUNE "
        f"to its {what}() (model: {speedup:.2f}x, about {after:,.0f} elements/s on {cores} "
        f"cores)")]


def _prefetch(stages, injected_prefetch: bool) -> list[Recommendation]:
    for stage in reversed(stages):
        if stage.op == "PrefetchDataset":
            return []
        if stage.op not in _PASS_THROUGH:
            break
    last = stages[-1].label if stages else "output"
    if injected_prefetch:
        return [Recommendation(
            "prefetch", last, 1.0,
            "the pipeline does not end in prefetch(); TensorFlow adds one at run time under "
            "the default options (inject_prefetch), so write .prefetch(tf.data.AUTOTUNE) last "
            "to keep it when options change (model: no change now)")]
    return [Recommendation(
        "prefetch", last, 2.0,
        "the pipeline does not end in prefetch(), so input and training take turns; add "
        ".prefetch(tf.data.AUTOTUNE) last (model: up to 2x for a training step that takes as "
        "long as the input, less otherwise)")]
