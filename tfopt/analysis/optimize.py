"""``tfopt.optimize``: the analysis's safe rewrites applied to any ``tf.data`` pipeline, measured
before and after.

Safe means the rewritten pipeline yields what the original yields, in the same order where the
original keeps order (its options' ``deterministic``, which is left as it is unless the caller
asks). So the rewrites are:

- ``parallelize``: a sequential ``map``, ``interleave`` or ``batch`` runs with
  ``num_parallel_calls=AUTOTUNE`` and ``deterministic="default"`` (order as the options say);
  only where its function has no stateful op that depends on the order of calls (random draws,
  variable writes, Python), and where the model expects at least 5% from it.
- ``autotune``: a parallel map with a fixed ``num_parallel_calls`` below the cores, where it
  limits the pipeline, gets AUTOTUNE.
- ``prefetch``: ``prefetch(AUTOTUNE)`` at the output when the output does not already run
  ahead of its consumer: no prefetch in the graph, none injected by TensorFlow
  (``inject_prefetch``), and no asynchronous stage there as the pipeline runs (a parallel map,
  or the ``MapAndBatch`` TensorFlow makes of a map and a batch).
- ``cache``: an in-memory cache where the analysis recommends one (the highest stage below
  every random one whose epoch fits the RAM budget, worth 1.1x from the second epoch).

What is not safe is left to the user and said: vectorising a map (its function must work on a
batch), rewriting Python stages, a smaller shuffle buffer, smaller stored images.

The rewritten pipeline and the original are measured alternately, in-graph, and a rewrite that
measures below 95% of the original is not kept: the original is returned unchanged.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

import tfopt._validate as _validate
from tfopt.analysis import advice
from tfopt.analysis.report import PipelineReport, Stage
from tfopt.errors import InvalidArgumentError, UnsupportedDatasetError

logger = logging.getLogger("tfopt")

KEEP_FRACTION = 0.95  # a rewrite measured below this fraction of the original is dropped
GAIN = 1.05  # a parallel rewrite the model expects less from is not made
_ANALYSIS_SHARE = 0.5  # of `seconds`: the analysis; the rest measures before and after
_PARALLEL_MAPS = ("ParallelMapDataset", "ParallelMapDatasetV2")


@dataclass(frozen=True)
class Change:
    """One rewrite made, or one considered and not made (then ``message`` says why)."""

    kind: str  # "parallelize", "autotune", "prefetch", "cache", "deterministic"
    stage: str  # the stage's label (the user's name= or e.g. "map#2")
    message: str


@dataclass(frozen=True)
class Optimization:
    """What :func:`optimize` did: the dataset to use, the changes and the measured rates."""

    dataset: object  # the tf.data.Dataset: rewritten, or the original when nothing is kept
    changes: tuple[Change, ...]
    skipped: tuple[Change, ...]  # rewrites considered and not made, with why
    before_per_s: float  # output elements/s of the original, measured beside the rewrite
    after_per_s: float  # output elements/s of the rewrite (without the cache's effect)
    cached_per_s: float | None  # from the second pass, where a cache was added and measured
    analysis: PipelineReport
    notes: tuple[str, ...] = ()
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.after_per_s / self.before_per_s if self.before_per_s > 0 else 1.0

    def to_dict(self) -> dict:
        return {
            "changes": [vars(c) for c in self.changes],
            "skipped": [vars(c) for c in self.skipped],
            "before_per_s": self.before_per_s,
            "after_per_s": self.after_per_s,
            "cached_per_s": self.cached_per_s,
            "speedup": self.speedup,
            "notes": list(self.notes),
            "seconds": self.seconds,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def describe(self) -> str:
        lines = [f"{c.kind} ({c.stage}): {c.message}" for c in self.changes] or [
            "no rewrite made: the original dataset is returned"]
        lines += [f"not done: {c.kind} ({c.stage}): {c.message}" for c in self.skipped]
        lines.append(f"measured: {self.before_per_s:,.1f} elements/s as written, "
                     f"{self.after_per_s:,.1f} rewritten ({self.speedup:.2f}x)"
                     + ("" if self.cached_per_s is None else
                        f", {self.cached_per_s:,.1f} from the cache's second pass "
                        f"({self.cached_per_s / self.before_per_s:.2f}x)"))
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


def optimize(dataset, *, ram_budget: int | None = None, seconds: float = 10.0,
             cores: int | None = None, deterministic: bool | None = None,
             report: bool = False, progress=None):
    """``dataset`` rewritten to run faster, yielding the same elements in the same order.

    Analyses ``dataset`` (:func:`tfopt.analyze`), applies the rewrites that are safe and that
    the model expects to pay (parallel calls, AUTOTUNE, a prefetch, a cache below every random
    stage that fits ``ram_budget``), and measures the result against the original; a rewrite
    that measures slower than 95% of the original is dropped.

    Args:
        dataset: A ``tf.data.Dataset`` (one chain of stages; an infinite ``repeat()`` is fine).
        ram_budget: Bytes a cache may use; default: half the memory available now.
        seconds: About how long the analysis and measurements take in all (> 0).
        cores: Cores the model allocates; default: the cores this process may use.
        deterministic: ``False`` lets parallel stages yield out of order (faster where
            elements take uneven time); default None keeps the dataset's own setting.
        report: ``True`` returns an :class:`Optimization` (what changed and the measured
            rates) instead of the dataset alone.
        progress: Called as ``progress(done, total, what)`` before each measurement, or None.

    Returns:
        A ``tf.data.Dataset`` with the original's element spec and options. It shares the
        original's lookup tables and variables, so it runs in the process that built it.
        With ``report=True``, an :class:`Optimization`: ``.dataset`` (that dataset),
        ``.changes``, ``.skipped``, ``.before_per_s``, ``.after_per_s``, ``.cached_per_s``,
        ``.analysis`` (the :class:`~tfopt.analysis.report.PipelineReport`) and ``describe()``.

    Raises:
        InvalidArgumentError: an argument is not what is expected (named in the message).
        UnsupportedDatasetError: the pipeline cannot be analysed (the op is named).

    Example:
        >>> dataset = tfopt.optimize(dataset, seconds=5)
        >>> print(tfopt.optimize(dataset, seconds=5, report=True).describe())
    """
    report = _validate.flag(report, "report")
    optimization = _optimize(dataset, ram_budget=ram_budget, seconds=seconds, cores=cores,
                             deterministic=deterministic, progress=progress)
    return optimization if report else optimization.dataset


def _optimize(dataset, *, ram_budget, seconds, cores, deterministic, progress) -> Optimization:
    seconds = _validate.number(seconds, "seconds", low=0.0, high=3600.0, open_low=True,
                               expected="a number of seconds in (0, 3600]")
    if deterministic not in (None, False, True):
        raise InvalidArgumentError(
            f"deterministic={deterministic!r}: expected None (keep the dataset's setting), "
            "True or False")
    from tfopt.analysis.analyze import analyse

    started = time.perf_counter()
    found = analyse(dataset, seconds=_ANALYSIS_SHARE * seconds, ram_budget=ram_budget,
                    cores=cores, progress=progress)
    report = found.report
    changes, skipped = plan_changes(report, found.graph_stages, found.runs_ahead)
    options = dataset.options()
    if deterministic is not None and deterministic != (options.deterministic is not False):
        import tensorflow as tf

        options = tf.data.Options().merge(options)
        options.deterministic = deterministic
        changes.append(Change("deterministic", report.stages[-1].label,
                              f"options.deterministic = {deterministic}, as asked"))
    if not changes:
        return Optimization(dataset, (), tuple(skipped), report.rate_per_s, report.rate_per_s,
                            None, report, seconds=time.perf_counter() - started)
    return _apply(dataset, options, found, changes, skipped, (1 - _ANALYSIS_SHARE) * seconds,
                  started, progress)


def plan_changes(report: PipelineReport, graph_stages, runs_ahead: str | None
                 ) -> tuple[list[Change], list[Change]]:
    """The rewrites to make and those considered and left out, from an analysis."""
    stages, cores = list(report.stages), report.cores
    changes, skipped = _parallel_changes(stages, graph_stages, cores)
    changes += _prefetch_change(stages, runs_ahead, skipped)
    cache = next((r for r in report.recommendations if r.kind == "cache"), None)
    if cache is not None:
        changes.append(Change("cache", cache.stage, cache.message))
    for rec in report.recommendations:
        if rec.kind in ("vectorize", "python", "store_smaller", "shuffle_buffer",
                        "cache_after_random", "deterministic"):
            skipped.append(Change(rec.kind, rec.stage, "changes what the pipeline computes or "
                                  "yields, so it is yours to make: " + rec.message))
    return changes, skipped


def _parallel_changes(stages: list[Stage], graph_stages, cores: int):
    """Greedily, costliest stage first: each parallel rewrite that the model expects at least
    GAIN from, given the ones already chosen."""
    from tfopt.analysis import rewrite

    changes, skipped, workers = [], [], {}
    candidates = []
    for stage, graph_stage in zip(stages, graph_stages, strict=True):
        kind = None
        if rewrite.parallel_op(graph_stage.op):  # a fused map runs as its MapAndBatch does
            if (stage.runtime_parallelism or 1) > 1:
                continue  # TensorFlow runs it in parallel itself (map_parallelization, ...)
            kind = "parallelize"
        elif (graph_stage.op in _PARALLEL_MAPS and graph_stage.parallelism is not None
              and 0 < graph_stage.parallelism < cores and stage.runtime_parallelism
              in (None, graph_stage.parallelism)):
            kind = "autotune"
        if kind is None:
            continue
        why_not = _unsafe(graph_stage)
        if why_not:
            skipped.append(Change("parallelize", stage.label, why_not))
        elif stage.self_time_s is None:
            skipped.append(Change(kind, stage.label, "its cost was not measured"))
        else:
            candidates.append((stage, kind))
    for stage, kind in sorted(candidates, key=lambda item: -item[0].cost_s):
        before = advice.predicted_rate(stages, cores, workers)
        after = advice.predicted_rate(stages, cores, {**workers, stage.index: cores})
        if not before or not after or after / before < GAIN:
            continue  # not what limits the pipeline: left as written
        workers[stage.index] = cores
        what = ("num_parallel_calls=AUTOTUNE" if kind == "parallelize" else
                f"num_parallel_calls {stage.parallelism} -> AUTOTUNE")
        changes.append(Change(kind, stage.label,
                              f"{what}, in order as the options say (model: {after / before:.2f}x)"))
    return changes, skipped


def _unsafe(graph_stage) -> str | None:
    """Why running ``graph_stage``'s calls in parallel could change what it yields, or None."""
    if graph_stage.python:
        return ("it runs Python, which holds the GIL: parallel calls would take turns, and "
                "Python code may depend on the order of calls")
    if graph_stage.stateful_ops:
        return (f"its function has stateful ops ({', '.join(graph_stage.stateful_ops)}): run in "
                "parallel, their results (random draws, writes) could land on other elements; "
                "stateless ops (tf.random.stateless_*, tf.image.stateless_random_*) make it safe")
    if graph_stage.force_synchronous:
        return "it asks to run one element at a time (force_synchronous)"
    return None


def _prefetch_change(stages: list[Stage], runs_ahead: str | None, skipped: list) -> list[Change]:
    if advice.ends_in_prefetch(stages):
        return []
    if runs_ahead is not None:
        skipped.append(Change("prefetch", stages[-1].label, advice.ahead_already(runs_ahead)
                              + ": a prefetch written after it changes nothing now"))
        return []
    return [Change("prefetch", stages[-1].label,
                   "prefetch(AUTOTUNE) at the output, so input and training overlap")]


def _apply(dataset, options, found, changes, skipped, seconds, started, progress):
    import tensorflow as tf

    from tfopt.analysis import measure, tfapi

    report, graph_def = found.report, found.graph_def
    nodes = stage_nodes(found)
    uncached = rewritten_graph(graph_def, nodes, [c for c in changes if c.kind != "cache"])
    cache = next((c for c in changes if c.kind == "cache"), None)
    final = rewritten_graph(uncached, nodes, [cache]) if cache else uncached
    spec = dataset.element_spec

    def build(graph, original=False):
        return tfapi.rebuild(_fresh(graph), spec).with_options(
            dataset.options() if original else options)

    steps = iter(range(4))

    def rate(graph, share, label):
        if progress is not None:
            progress(next(steps, 3), 4, f"the rewrite: {label}")
        try:
            # a short finite pipeline over whole passes, as epochs run (measure.whole_passes)
            return measure.rate(build(graph, original=graph is graph_def), share,
                                whole_passes_within=3 * share).rate
        except tf.errors.OpError as error:
            raise UnsupportedDatasetError(
                f"the rewritten pipeline failed when run: {tfapi.first_line(error)}") from None

    share = seconds / 4
    throughput = [c for c in changes if c.kind != "cache"]
    if throughput:  # alternately, twice each, the better of each: a busy moment is no verdict
        before, after = rate(graph_def, share, "as written"), rate(uncached, share, "rewritten")
        before = max(before, rate(graph_def, share, "as written, again"))
        after = max(after, rate(uncached, share, "rewritten, again"))
    else:
        before = after = report.rate_per_s
    notes = []
    if throughput and after < KEEP_FRACTION * before:
        throughput = [c for c in throughput if c.kind != "deterministic"]
        notes.append(f"the rewrite measured {after / before:.2f}x the original, below "
                     f"{KEEP_FRACTION}: not kept")
        skipped = [*skipped, *(Change(c.kind, c.stage, "measured slower: " + c.message)
                               for c in throughput)]
        changes = [c for c in changes if c not in throughput]
        final = rewritten_graph(graph_def, nodes, [cache]) if cache else graph_def
        after = before
        if not changes:
            return Optimization(dataset, (), tuple(skipped), before, before, None, report,
                                tuple(notes), time.perf_counter() - started)
    cached = None
    if cache is not None:
        cached = _cached_rate(final, build, report, cache, share, notes, measure, tf)
    return Optimization(build(final), tuple(changes), tuple(skipped), before, after, cached,
                        report, tuple(notes), time.perf_counter() - started)


def stage_nodes(found) -> dict[str, str]:
    """Stage label -> its node in the analysed GraphDef."""
    return {stage.label: g.node for stage, g in zip(found.report.stages, found.graph_stages,
                                                    strict=True)}


def rewritten_graph(graph_def, nodes: dict[str, str], changes):
    """``graph_def`` with ``changes`` made (``deterministic`` is an option, not a graph edit)."""
    from tfopt.analysis import rewrite

    edits = {"parallelize": rewrite.make_parallel, "autotune": rewrite.set_autotune,
             "cache": rewrite.insert_cache}
    for change in changes:
        if change.kind == "prefetch":
            graph_def = rewrite.append_prefetch(graph_def)
        elif change.kind in edits:
            graph_def = edits[change.kind](graph_def, nodes[change.stage])
    return graph_def


def _cached_rate(final, build, report, cache, share, notes, measure, tf):
    """The rate from the cache's second pass on, when filling it fits in a few shares; else
    None and a note."""
    stage = report.stage(cache.stage)
    fill = (stage.cardinality / stage.prefix_rate
            if stage.prefix_rate and stage.cardinality and stage.cardinality > 0 else None)
    if fill is None or fill > 4 * share:
        notes.append("the cache's gain shows from the second epoch; not measured here: filling "
                     "it takes " + (f"about {fill:,.0f} s" if fill else "an unknown time"))
        return None
    dataset = build(final)
    if int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY:
        # a repeat above the cache: its first pass fills the cache inside the warm-up
        return measure.drain(iter(dataset), share, warmup=1.5 * fill + 0.2).rate
    # the first pass fills the cache; the passes timed after it read from it
    return measure.whole_passes(dataset, share, skip=1).rate


def _fresh(graph):
    """The graph with fresh caches and seed generators of its own (see graph.prefix_graph)."""
    from tfopt.analysis import graph as graph_module

    fresh = type(graph)()
    fresh.CopyFrom(graph)
    graph_module.fresh_resources(fresh)
    return fresh
