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

import itertools
import math
from dataclasses import dataclass, replace

import tfopt.rules as rules
from tfopt.analysis.findings import Recommendation, Stage

# Ops a rewrite can run in parallel (num_parallel_calls); the rest run one element at a time.
PARALLELIZABLE = ("MapDataset", "ParallelMapDataset", "ParallelMapDatasetV2",
                  "InterleaveDataset", "ParallelInterleaveDatasetV2",
                  "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4",
                  "BatchDataset", "BatchDatasetV2", "ParallelBatchDataset",
                  "MapAndBatchDataset")
# Ops that pass elements through at the output and say nothing about prefetching.
PASS_THROUGH = ("RepeatDataset", "TakeDataset", "SkipDataset", "AssertCardinalityDataset",
                 "ShardDataset", "FinalizeDataset", "ModelDataset", "MaxIntraOpParallelismDataset",
                 "PrivateThreadPoolDataset", "ThreadPoolDataset")
NEAR_CEILING = 0.8  # a measured rate at this fraction of the ceiling is near it
WORTH = 1.1  # a rewrite the model expects less from than this is not recommended
CACHE_OPS = ("CacheDataset", "CacheDatasetV2")
_IN_MEMORY_SOURCES = ("RangeDataset", "TensorDataset", "TensorSliceDataset")
BATCH_OPS = ("BatchDataset", "BatchDatasetV2", "ParallelBatchDataset")
DECODE_OPS = ("DecodeJpeg", "DecodeAndCropJpeg", "DecodePng", "DecodeImage", "DecodeBmp",
              "DecodeGif", "DecodeWebP")
CHEAP_MAP_S = 50e-6  # a map cheaper than this per element is mostly per-call overhead
STORED_CHANNELS = 3  # values per stored pixel a decode makes (RGB: decode_jpeg(channels=3))
DETERMINISTIC_GAIN = 1.15  # the measured gain out of order that is worth the advice


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


def bound_as_written(stage: Stage, cores: int) -> float:
    """The output elements/s ``stage`` alone allows as written: ``min(p, C) / cost`` (inf where
    its cost is unknown)."""
    return _bound(stage, parallelism_now(stage, cores), cores)


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
    bounds = {s.label: bound_as_written(s, cores) for s in stages}
    label, smallest = min(bounds.items(), key=lambda item: item[1])
    if smallest > cores / total:  # the cores bind: the stage that costs the most
        label = max(stages, key=lambda s: s.cost_s).label
    return Allocation(ceiling, predicted, label)


def recommendations(stages, cores: int, measured_per_s: float, runs_ahead: str | None,
                    ram_budget: int | None = None,
                    unordered_per_s: float | None = None) -> list[Recommendation]:
    """Every recommendation for ``stages``: speed first, then the correctness warnings."""
    out = []
    plan = allocation(stages, cores)
    if plan.bottleneck is not None:
        out += _parallelize(stages, cores, measured_per_s, plan)
    out += _prefetch(stages, runs_ahead)
    if plan.predicted_per_s:
        out += _cache(stages, cores, plan, ram_budget)
        out += _vectorize(stages, cores, plan)
        out += _python(stages, cores, plan)
        out += _store_smaller(stages, cores, plan)
    out += _deterministic(stages, measured_per_s, unordered_per_s)
    out += _cache_after_random(stages)
    out += _shuffle_buffer(stages, ram_budget)
    return out


def _rate_with(stages, cores, self_times: dict[int, float],
               workers: dict[int, int] | None = None) -> float | None:
    """The model's rate with some stages' self times replaced."""
    changed = [replace(s, self_time_s=self_times[s.index]) if s.index in self_times else s
               for s in stages]
    return predicted_rate(changed, cores, workers)


def _speedup(after, plan: Allocation) -> float:
    if not after or not plan.predicted_per_s:
        return 1.0
    return after / plan.predicted_per_s


# what a cached element costs to read back: a fixed per-element cost (an iterator step, a
# tensor handed on) plus its bytes at a conservative single-core memory-copy rate
_CACHE_READ_FIXED_S = 2e-6
_CACHE_READ_BYTES_PER_S = 4e9


def _cache_read_s(bytes_per_element: float) -> float:
    return _CACHE_READ_FIXED_S + bytes_per_element / _CACHE_READ_BYTES_PER_S


def _size(num_bytes: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:,.1f} {unit}"
    return f"{num_bytes:,.0f} bytes"


def _cache(stages, cores, plan: Allocation, ram_budget) -> list[Recommendation]:
    """Cache at the highest stage below every random one whose epoch fits the budget's cache
    allowance (:func:`tfopt.rules.cache_fits`, as the builder caches)."""
    if any(s.op in CACHE_OPS for s in stages):
        return []
    first_random = next((s.index for s in stages if s.random), len(stages))
    for stage in reversed(stages[:first_random]):
        if stage.op in PASS_THROUGH or stage.op == "PrefetchDataset":
            continue
        if stage.op in _IN_MEMORY_SOURCES:
            return []  # in memory already: a cache would copy it
        if stage.cardinality is None or stage.cardinality < 0 or not stage.bytes_per_element:
            continue
        size = stage.bytes_per_element * stage.cardinality
        if ram_budget is not None and not rules.cache_fits(size, ram_budget):
            continue
        # from the second epoch on, the stages below cost nothing and this one what reading
        # its elements back from memory costs: with nothing after it but hand-offs, zero
        # everywhere would leave the model no cost at all, and so no speed-up to offer
        freed = {s.index: 0.0 for s in stages[:stage.index]}
        freed[stage.index] = _cache_read_s(stage.bytes_per_element)
        after = _rate_with(stages, cores, freed)
        speedup = _speedup(after, plan)
        if speedup < WORTH:
            return []  # lower caches save even less
        where = ("before the first random stage, " + stages[first_random].label
                 if first_random < len(stages) else "where nothing random comes before it")
        return [Recommendation(
            "cache", stage.label, speedup,
            f"the {stage.cardinality:,} elements after {stage.label} take about "
            f"{_size(size)}, within the cache's share of the RAM budget "
            f"({_size(rules.cache_allowance(ram_budget or 0))}), and nothing "
            f"before them is random: add .cache() after {stage.label} ({where}) so that "
            f"every epoch after the first skips the work up to it (model: {speedup:.2f}x "
            f"from the second epoch)")]
    return []


def _vectorize(stages, cores, plan: Allocation) -> list[Recommendation]:
    out = []
    for stage, following in itertools.pairwise(stages):
        if ("Map" not in stage.op or "Batch" in stage.op or following.op not in BATCH_OPS
                or stage.random or stage.python or stage.heavy_ops
                or stage.self_time_s is None or stage.self_time_s > CHEAP_MAP_S
                or not following.batch_size or following.batch_size < 2):
            continue
        # batched, the map runs once per batch: take one call's cost for the whole batch
        after = _rate_with(stages, cores,
                           {stage.index: stage.self_time_s / following.batch_size})
        speedup = _speedup(after, plan)
        if speedup < WORTH:
            continue
        out.append(Recommendation(
            "vectorize", stage.label, speedup,
            f"{stage.label} is a cheap map ({stage.self_time_s * 1e6:.1f} us an element, "
            f"mostly per-call overhead) before {following.label}: batch first, then map "
            f"(.batch({following.batch_size}).map(f)), if f works on a batch as it does on "
            f"one element (model: up to {speedup:.2f}x, one call per batch)"))
    return out


def _python(stages, cores, plan: Allocation) -> list[Recommendation]:
    out = []
    for stage in stages:
        if not stage.python:
            continue
        after = predicted_rate(stages, cores, {stage.index: cores})
        speedup = _speedup(after, plan)
        if speedup < WORTH and stage.label != plan.bottleneck:
            continue
        source = "FlatMap" in stage.op or "Generator" in stage.op
        fix = ("write the data once as files TensorFlow reads itself (TFRecord shards: tfopt "
               "convert) or build the dataset from tensors (from_tensor_slices)" if source else
               "rewrite its function with TensorFlow ops (tf.image, tf.strings, tf.numpy) so "
               "that num_parallel_calls can use every core")
        out.append(Recommendation(
            "python", stage.label, speedup,
            f"{stage.label} runs Python (py_function, numpy_function or a generator), which "
            f"holds the GIL: one element at a time whatever num_parallel_calls says; {fix} "
            f"(model: {speedup:.2f}x with it on {cores} cores)"))
    return out


def _store_smaller(stages, cores, plan: Allocation) -> list[Recommendation]:
    """Decode dominates and the stored images are much larger than what the model sees
    (:func:`tfopt.rules.store_smaller`, the rule the builder and convert advise by)."""
    bottleneck = next((s for s in stages if s.label == plan.bottleneck), None)
    if bottleneck is None or not set(bottleneck.heavy_ops) & set(DECODE_OPS):
        return []
    final = stages[-1]
    if (bottleneck.bytes_per_element is None or final.bytes_per_element is None
            or bottleneck.item_bytes is None or final.item_bytes is None
            or final is bottleneck):
        return []
    # values (pixels x channels) per output element, the decode's against the final element's;
    # counting every byte of the final element at its smallest itemsize overestimates what the
    # model sees, so the ratio errs low
    decoded = bottleneck.bytes_per_element * bottleneck.elements_per_output / bottleneck.item_bytes
    stored = ""
    if bottleneck.stored_size:  # a stage that decodes and resizes at once: its input's sizes
        height, width = bottleneck.stored_size
        decoded = max(decoded, height * width * STORED_CHANNELS * bottleneck.elements_per_output)
        stored = f" (stored images of about {width:,} x {height:,} px, from sampled headers)"
    seen = final.bytes_per_element * final.elements_per_output / final.item_bytes
    if seen <= 0 or bottleneck.elements_per_output <= 0:
        return []
    ratio = decoded / seen
    if bottleneck.stored_size:
        shorter, longer = min(bottleneck.stored_size), max(bottleneck.stored_size)
    else:  # the side of a square of the decoded pixels
        shorter = longer = math.sqrt(decoded / bottleneck.elements_per_output / STORED_CHANNELS)
    model_side = final.image_side or round(math.sqrt(
        seen / final.elements_per_output / STORED_CHANNELS))
    verdict = rules.store_smaller(shorter, model_side, longer)
    if verdict is None:
        return []
    # stored at the suggested size, each decode makes about 1/pixel_ratio of the pixels
    fewer = max(1.0, verdict.pixel_ratio)
    after = _rate_with(stages, cores, {bottleneck.index: bottleneck.self_time_s / fewer})
    speedup = _speedup(after, plan)
    if speedup < WORTH:
        return []
    option = f"--max-size {verdict.max_size}"
    return [Recommendation(
        "store_smaller", bottleneck.label, speedup,
        f"decoding in {bottleneck.label} limits the pipeline, and it decodes about "
        f"{ratio:.0f}x the pixels the model gets{stored}: store the images smaller, e.g. "
        f"tfopt convert {option}, so that each decode does less (model: up to {speedup:.2f}x, "
        f"decode time taken as proportional to pixels)")]


def _deterministic(stages, measured_per_s, unordered_per_s) -> list[Recommendation]:
    ordered = [s for s in stages if s.deterministic]
    if not ordered or not unordered_per_s or not measured_per_s:
        return []
    gain = unordered_per_s / measured_per_s
    if gain < DETERMINISTIC_GAIN:
        return []
    names = ", ".join(s.label for s in ordered)
    return [Recommendation(
        "deterministic", ordered[0].label, gain,
        f"{names} must yield in order, and a slow element holds back the ones behind it: "
        f"measured out of order the pipeline ran {gain:.2f}x faster; for training, where order "
        f"does not matter, pass deterministic=False (or set "
        f"options.deterministic = False); tfopt does not change it for you")]


def _cache_after_random(stages) -> list[Recommendation]:
    out = []
    for stage in stages:
        if stage.op not in CACHE_OPS:
            continue
        random = [s.label for s in stages[:stage.index] if s.random]
        if random:
            out.append(Recommendation(
                "cache_after_random", stage.label, 1.0,
                f"{stage.label} caches what {', '.join(random)} drew at random, so every "
                f"epoch after the first replays the first epoch's augmentation and order: move "
                f"the cache before {random[0]}"))
    return out


def _shuffle_buffer(stages, ram_budget) -> list[Recommendation]:
    out = []
    for stage in stages:
        if stage.buffer_size is None or stage.buffer_size < 1:
            continue
        buffer = stage.buffer_size
        source = stages[stage.index - 1] if stage.index > 0 else None
        epoch = source.cardinality if source is not None else None
        batch = next((s for s in stages[stage.index + 1:] if s.op in BATCH_OPS
                      and s.batch_size), None)
        size = (source.bytes_per_element * buffer
                if source is not None and source.bytes_per_element else None)
        # the rule the builder sizes its buffers by (tfopt.rules)
        batch_size = batch.batch_size if batch else None
        shortfall = rules.shuffle_shortfall(buffer, epoch, batch_size)
        if shortfall is not None:
            small = (f"below one batch ({batch_size})"
                     if shortfall is rules.ShuffleShortfall.BELOW_BATCH else
                     f"below {rules.SHUFFLE_EPOCH_FRACTION:.0%} of the {epoch:,} elements of "
                     "an epoch")
            target = rules.min_shuffle_records(epoch, batch_size)
            out.append(Recommendation(
                "shuffle_buffer", stage.label, 1.0,
                f"{stage.label} shuffles within {buffer:,} elements, {small}: neighbours stay "
                f"neighbours; use a buffer of at least {target:,}, or shuffle the files (or "
                "shards) too"))
        elif size is not None and ram_budget is not None and size > ram_budget:
            out.append(Recommendation(
                "shuffle_buffer", stage.label, 1.0,
                f"{stage.label} holds {buffer:,} elements of about "
                f"{_size(source.bytes_per_element)}: {_size(size)}, over the RAM budget "
                f"({_size(ram_budget)}); shuffle smaller elements (the encoded bytes, before "
                f"decoding) or use a smaller buffer and shuffle the files too"))
    return out


def _parallelize(stages, cores, measured_per_s, plan: Allocation) -> list[Recommendation]:
    near = (measured_per_s >= NEAR_CEILING * plan.ceiling_per_s
            or (plan.predicted_per_s or 0) >= 0.9 * plan.ceiling_per_s)
    stage = next(s for s in stages if s.label == plan.bottleneck)
    if near or parallelism_now(stage, cores) > 1 or not can_parallelize(stage):
        return []
    if stage.parallelism == -1:
        # AUTOTUNE already, and it chose one worker (an interleave over few files, say):
        # "pass AUTOTUNE" would tell the user to write what is written
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


def ends_in_prefetch(stages) -> bool:
    """Whether the pipeline's last stage, past repeat, take and the like, is a prefetch."""
    for stage in reversed(stages):
        if stage.op == "PrefetchDataset":
            return True
        if stage.op not in PASS_THROUGH:
            return False
    return False


def ahead_already(runs_ahead: str) -> str:
    """Why the output overlaps its consumer without a prefetch written, for ``runs_ahead``
    (see :attr:`tfopt.analysis.model.ModelReading.runs_ahead`)."""
    if runs_ahead == "Prefetch":
        return "TensorFlow adds a prefetch at the output at run time (inject_prefetch)"
    return (f"the output runs ahead of its consumer already: TensorFlow runs it as {runs_ahead}, "
            "which makes elements into a buffer of its own")


def _prefetch(stages, runs_ahead: str | None) -> list[Recommendation]:
    if ends_in_prefetch(stages):
        return []
    last = stages[-1].label if stages else "output"
    if runs_ahead is not None:
        # TensorFlow injects no prefetch after an asynchronous stage for the same reason: a
        # second buffer adds no overlap (docs/analyze.md: a MapAndBatch ahead of a step ran as
        # fast without a prefetch written after it as with one)
        return [Recommendation(
            "prefetch", last, 1.0,
            "the pipeline does not end in prefetch(); " + ahead_already(runs_ahead)
            + ", so write .prefetch(tf.data.AUTOTUNE) last only to keep that when options "
            "change (model: no change now)")]
    return [Recommendation(
        "prefetch", last, 2.0,
        "the pipeline does not end in prefetch(), so input and training take turns; add "
        ".prefetch(tf.data.AUTOTUNE) last (model: up to 2x for a training step that takes as "
        "long as the input, less otherwise)")]
