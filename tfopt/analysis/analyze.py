"""``tfopt.analyze``: read any ``tf.data`` pipeline's stages, measure each prefix in-graph, read
what AUTOTUNE measured and chose, and name the bottleneck and what to change."""

from __future__ import annotations

import logging
import math
import reprlib
import time
from dataclasses import dataclass, replace

import tfopt._validate as _validate
import tfopt.rules as rules
from tfopt._system import available_memory, usable_cores
from tfopt.analysis import advice
from tfopt.analysis.report import PipelineReport, Stage
from tfopt.errors import InvalidArgumentError, UnsupportedDatasetError

logger = logging.getLogger("tfopt")


def analyze(dataset, *, seconds: float = 10.0, ram_budget: int | None = None,
            cores: int | None = None) -> PipelineReport:
    """Find the slow stage of ``dataset`` and what would speed it up.

    The pipeline is serialised and each prefix (the pipeline cut after each stage) is rebuilt
    with fresh caches and seed generators and the dataset's options, then drained in-graph for
    its share of ``seconds``; the whole pipeline's run also gives TensorFlow's autotuning model
    (per-stage self time, AUTOTUNE's choices). The dataset itself is not iterated.

    Args:
        dataset: A ``tf.data.Dataset``; an infinite ``repeat()`` is fine.
        seconds: About how long the measurements take in all (> 0).
        ram_budget: Bytes a cache and a shuffle buffer may use (a cache its share,
            :func:`tfopt.rules.cache_allowance`); default: half the memory available now
            (:func:`tfopt.rules.default_ram_budget`, as the pipeline builder's).
        cores: Cores the model allocates; default: the cores this process may use.

    Returns:
        A :class:`PipelineReport`: ``describe()`` for a table, ``to_json()`` for data.

    Raises:
        InvalidArgumentError: an argument is not what is expected (named in the message).
        UnsupportedDatasetError: the pipeline cannot be serialised, rebuilt or run, or joins
            several datasets (the op is named).

    Example:
        >>> report = tfopt.analyze(dataset, seconds=5)
        >>> print(report.describe())
    """
    return run(dataset, seconds=seconds, ram_budget=ram_budget, cores=cores)


def run(dataset, *, seconds: float = 10.0, ram_budget: int | None = None,
        cores: int | None = None, progress=None) -> PipelineReport:
    """:func:`analyze`, calling ``progress(done, total, what)`` before each measurement (the
    command line's progress line)."""
    return analyse(dataset, seconds=seconds, ram_budget=ram_budget, cores=cores,
                   progress=progress).report


@dataclass(frozen=True)
class Analysis:
    """A report with what it was read from: what :mod:`.optimize` rewrites."""

    report: PipelineReport
    graph_def: object  # the dataset's serialised GraphDef
    graph_stages: tuple  # graph.GraphStage per report stage, same order
    # what runs the output ahead of its consumer at run time: "Prefetch" (TensorFlow injects
    # one) or an asynchronous stage such as "MapAndBatch"; None where nothing does
    runs_ahead: str | None


def analyse(dataset, *, seconds: float = 10.0, ram_budget: int | None = None,
            cores: int | None = None, progress=None) -> Analysis:
    """:func:`run`'s report, with the graph and graph stages it was read from."""
    seconds = _validate.number(seconds, "seconds", low=0.0, high=3600.0, open_low=True,
                               expected="a number of seconds in (0, 3600]")
    ram_budget = _validate.optional_whole_number(ram_budget, "ram_budget", 1,
                                                 "None or a number of bytes >= 1")
    cores = _validate.optional_whole_number(cores, "cores", 1, "None or an int >= 1")
    from tfopt._tf import import_tensorflow

    tf = import_tensorflow()
    if not isinstance(dataset, tf.data.Dataset):
        raise InvalidArgumentError(
            f"dataset={reprlib.repr(dataset)}: expected a tf.data.Dataset")
    from tfopt.analysis import graph, images, measure, model, tfapi

    started = time.perf_counter()
    tfapi.check_tensorflow()
    graph_def, found = graph.read_graph(dataset)
    options = dataset.options()
    ordered = options.deterministic is not False
    compare = _training(found) and any(
        s.deterministic == "true" or (s.deterministic == "default" and ordered) for s in found)
    # the whole pipeline gets two shares, and as much again for the unordered comparison
    share = seconds / (len(found) + 1 + 2 * compare)
    total = len(found) + compare
    rates, proto, cardinalities, specs, passes = [], None, [], [], []
    stored, before = {}, None  # stage index -> stored image size; the prefix before the stage
    for index, stage in enumerate(found):
        last = index == len(found) - 1
        if progress is not None:
            progress(index, total, stage.name or stage.op)
        prefix_def, spec = graph.prefix_graph(graph_def, stage.node)
        prefix = tfapi.rebuild(prefix_def, spec).with_options(options)
        if before is not None and set(stage.heavy_ops) & set(advice.DECODE_OPS):
            size = images.stored_size(before)
            if size is not None:
                stored[index] = size
        before = prefix
        measured, model_proto, first, repeated = _measure(
            prefix, 2 * share if last else share, stage, tf, measure, tfapi, model=last,
            shuffled=any(s.buffer_size for s in found[:index + 1]),
            cached=_holds_cache(found[:index + 1]))
        if last:
            proto = model_proto
        logger.info("analyze: %s up to %s: %.1f elements/s", stage.op, stage.name or stage.node,
                    measured.rate)
        rates.append(measured.rate)
        cardinalities.append(_cardinality(prefix, tf))
        specs.append(spec)
        passes.append(_pass_length(cardinalities[-1], first))
    unordered = None
    if compare:
        if progress is not None:
            progress(len(found), total, "the pipeline with deterministic=False")
        whole_def, spec = graph.prefix_graph(graph.undeterministic(graph_def), found[-1].node)
        prefix = tfapi.rebuild(whole_def, spec).with_options(options)
        unordered = _measure(prefix, 2 * share, found[-1], tf, measure, tfapi,
                             shuffled=any(s.buffer_size for s in found),
                             cached=_holds_cache(found))[0].rate
    reading = model.read_model(proto, found, repeated) if proto is not None else None
    cores = (cores or (reading.cpu_budget if reading and reading.cpu_budget else None)
             or usable_cores())
    stages = [replace(s, stored_size=stored.get(s.index)) for s in
              _stages(found, rates, reading, cardinalities, specs, ordered, passes, cores)]
    if ram_budget is None:
        ram_budget = rules.default_ram_budget(available_memory())
    plan = advice.allocation(stages, cores)
    notes = []
    if reading is None:
        notes.append("autotuning is off, so TensorFlow kept no model: self times are estimated "
                     "from the prefix rates and AUTOTUNE's choices are unknown")
    elif reading.injected_prefetch:
        notes.append("TensorFlow adds a prefetch at the output at run time (inject_prefetch)")
    if reading is not None and len(reading.by_stage) < len(found):
        unmatched = [s.name or s.op for s in found if s.node not in reading.by_stage]
        notes.append("no model node for " + ", ".join(unmatched)
                     + " (rewritten at run time): self times estimated from prefix rates")
    runs_ahead = reading.runs_ahead if reading is not None else None
    recommendations = advice.recommendations(
        stages, cores, rates[-1], runs_ahead, ram_budget=ram_budget, unordered_per_s=unordered)
    report = PipelineReport(
        stages=tuple(stages), bottleneck=plan.bottleneck, ceiling_per_s=plan.ceiling_per_s,
        rate_per_s=rates[-1], predicted_per_s=plan.predicted_per_s, cores=cores,
        recommendations=tuple(recommendations), autotune_model=reading is not None,
        notes=tuple(notes), seconds=time.perf_counter() - started, ram_budget=ram_budget,
        extra={} if unordered is None else {"unordered_per_s": unordered})
    return Analysis(report, graph_def, tuple(found), runs_ahead)


def _measure(prefix, seconds, stage, tf, measure, tfapi, model=False, shuffled=False,
             cached=False):
    """The rate of ``prefix``; with ``model`` the autotuning model (else None); the first
    drain's measurement (exhausted: its ``total`` is one pass); and whether the rate is from
    whole passes, the model then read under a ``repeat()`` of the analysis's own.

    A prefix that holds a cache is timed on passes after the one that filled it, whatever
    that pass took: every prefix from the cache up is then timed alike (a filling pass
    counted for a shuffle above a cache and not for the cache made that shuffle the
    bottleneck of the audio tutorial's pipeline on a busy machine)."""
    try:
        iterator = iter(prefix)
        measured = first = measure.drain(iterator, seconds)
        passes = measure.needs_whole_passes(prefix, first, 3 * seconds if shuffled else 0.0)
        if passes:
            # a short finite prefix: its rate from whole passes, as epochs run them (a window
            # inside a pass of a shuffle is biased; see measure.whole_passes), and TensorFlow's
            # model, which drops a finished iterator's nodes, from a repeat() of the
            # analysis's own; the drained pass is finished and counted as the first, and the
            # passes after it get what it left of the share
            first = measure.finish_pass(iterator, first)
            measured = measure.whole_passes(prefix, seconds, first=None if cached else first,
                                            spent_before=first.wall)
            if model:  # the rate is measured: the model needs a few elements after the wait
                iterator = iter(prefix.repeat())
                measure.drain(iterator, min(seconds / 4, 1.0))
        return measured, (tfapi.model_proto(iterator) if model else None), first, passes
    except tf.errors.OpError as error:
        raise UnsupportedDatasetError(
            f"{stage.op} ({stage.name or stage.node}) failed when run for analysis: "
            f"{tfapi.first_line(error)}") from None


def _training(found) -> bool:
    """A pipeline that shuffles or draws random numbers is taken for a training one."""
    return any(s.random for s in found)


def _cardinality(prefix, tf) -> int | None:
    value = int(prefix.cardinality())
    if value == tf.data.INFINITE_CARDINALITY:
        return -1
    return None if value < 0 else value


def _pass_length(cardinality, measured) -> int | None:
    """Elements in one pass of a prefix: its finite cardinality, else all it gave when drained
    to its end; None when endless or not known."""
    if cardinality is not None and cardinality >= 0:
        return cardinality
    return measured.total if measured.exhausted else None


def _static_bytes(spec) -> int | None:
    """Bytes of one element whose tensors all have static shapes and numeric dtypes, else
    None (strings, ragged and sparse parts have no size in the spec)."""
    import tensorflow as tf

    if spec is None:
        return None
    total = 0
    for part in tf.nest.flatten(spec):
        shape, dtype = getattr(part, "shape", None), getattr(part, "dtype", None)
        if (not isinstance(part, tf.TensorSpec) or shape is None or dtype is None
                or not shape.is_fully_defined() or dtype in (tf.string, tf.variant)):
            return None
        total += shape.num_elements() * dtype.size
    return total


def _spec_facts(spec) -> tuple[int | None, int | None]:
    """The smallest numeric itemsize among ``spec``'s tensors, and the longer static side of
    an image tensor (HWC or NHWC, 1-4 or unknown channels) in it."""
    import tensorflow as tf

    sizes, side = [], None
    for part in tf.nest.flatten(spec):
        dtype = getattr(part, "dtype", None)
        if dtype is None or dtype == tf.string or dtype == tf.variant:
            continue
        sizes.append(dtype.size)
        shape = getattr(part, "shape", None)
        if shape is not None and shape.rank in (3, 4) and shape[-1] in (None, 1, 2, 3, 4):
            height, width = shape[-3], shape[-2]
            if height is not None and width is not None:
                side = max(side or 0, height, width)
    return (min(sizes) if sizes else None), side


# Ops that only hand elements on: no work of their own to time.
_HANDOFF_OPS = advice.PASS_THROUGH + ("PrefetchDataset",)
# Ops that hand on one element per element they take (a batch's count is its batch_size).
_ONE_TO_ONE = ("map", "parallelmap", "shuffle", "prefetch", "cache", "memorycache", "repeat",
               "foreverrepeat", "assertcardinality", "options", "model", "maxintraopparallelism",
               "privatethreadpool", "enumerate", "scan", "ignoreerrors",
               "zip")  # a zip is read only with counters beside its data (enumerate)
# Ops that read their input to its end, so that a pass of their input makes one of theirs.
_WHOLE_INPUT = ("interleave", "parallelinterleave", "flatmap", "unbatch", "filter",
                "parallelfilter")


def _elements_per_output(found, by_stage, fused, passes=None) -> list[float]:
    """Elements each stage produces per element the pipeline outputs, from the output down.

    From the graph where it says: a batch takes ``batch_size`` elements per element; a map, a
    shuffle, a repeat or a prefetch one. Where the count depends on the data (filter,
    flat_map, interleave, unbatch, take): for an op that reads its input to the end, from the
    elements of one pass of both prefixes where both are known (a finite cardinality, or a
    prefix drained to its end); else from the model's counts, as the ratio of a stage's count
    to the next stage's. TensorFlow's model counts the elements of each node's current
    iterator, and a repeat makes a new iterator of its input every pass, so a count below a
    repeat covers this pass only, against the output's count of all passes (a batch under a
    repeat once read as a third of an element per output element); early in a pass the two
    counts can be a file and its first record (an interleave once read as two files a record).
    """
    from tfopt.analysis.model import op_kind  # graph-side: TensorFlow is loaded by now

    passes = passes or [None] * len(found)
    ratios = [1.0] * len(found)
    for i in range(len(found) - 2, -1, -1):
        above = found[i + 1]
        kind = op_kind(above.op)
        if above.batch_size:
            per = float(above.batch_size)
        elif kind in _ONE_TO_ONE or found[i].node in fused:
            per = 1.0
        elif kind in _WHOLE_INPUT and passes[i] and passes[i + 1]:
            per = passes[i] / passes[i + 1]
        else:
            mine, theirs = by_stage.get(found[i].node), by_stage.get(above.node)
            same_pass = (mine is not None and theirs is not None and mine is not theirs
                         and mine.elements > 0 and theirs.elements > 0)
            per = mine.elements / theirs.elements if same_pass else 1.0
        ratios[i] = ratios[i + 1] * per
    return ratios


def _holds_cache(stages) -> bool:
    return any(stage.op in advice.CACHE_OPS for stage in stages)


def _prefix_costs(found, rates, ratios) -> list[float | None]:
    """Seconds per output element of each measured prefix, none above a longer one's.

    A longer prefix does all the work of a shorter one, so where it measures cheaper the
    shorter one's figure is overhead of measuring it: one by one, unbatched rows cost the
    iterator per row (slices under a batch, pulled one by one, read as costlier than the
    batches made of them and made the source the bottleneck). A cache is the exception, its
    later passes really are cheaper than the stages under it, so no cost above a cache caps one
    below it.
    """
    costs: list[float | None] = [ratios[i] / rate if rate > 0 else None
                                 for i, rate in enumerate(rates)]
    cap = math.inf
    for i in range(len(found) - 1, -1, -1):
        if costs[i] is not None:
            costs[i] = min(costs[i], cap)
            cap = costs[i]
        if found[i].op in advice.CACHE_OPS:
            cap = math.inf
    return costs


def _stages(found, rates, reading, cardinalities=None, specs=None, ordered=True,
            passes=None, cores=None) -> list[Stage]:
    """Report stages from graph stages, prefix rates and the model's nodes.

    A model node's self time is wall clock summed over its threads, and takes in time they
    wait (a parallel interleave's read sums its threads' waits on files, several times the
    thread time its prefix's rate leaves):
    with ``cores``, it is capped at what the prefix's measured rate allows on the threads the
    stage can run on (``cores`` if it can run in parallel, else one).
    """
    by_stage = reading.by_stage if reading else {}
    fused = reading.fused_into_next if reading else frozenset()
    ratios = _elements_per_output(found, by_stage, fused, passes)
    facts = [_spec_facts(spec) for spec in specs] if specs else [(None, None)] * len(found)
    costs = _prefix_costs(found, rates, ratios)
    stages, previous_cost = [], 0.0
    for i, stage in enumerate(found):
        node = by_stage.get(stage.node)
        self_time, runtime, size = None, None, None
        if stage.op in _HANDOFF_OPS:
            # they only hand elements on: a model node's wall-clock time for one is waiting (on
            # a busy machine it once read as the whole per-element time, made the prefetch the
            # bottleneck and hid the cache), and a prefix rate below its input's is noise
            self_time, runtime = 0.0, node.parallelism if node is not None else None
            size = (node.bytes_produced / node.elements
                    if node is not None and node.elements > 0 else None)
        elif node is not None and node.elements > 0:
            per = ratios[i] / ratios[i + 1] if stage.node in fused else 1.0
            self_time = node.processing_ns * 1e-9 / (node.elements * per)
            runtime = node.parallelism
            size = node.bytes_produced / (node.elements * per)
            if cores and rates[i] > 0:
                workers = cores if stage.op in advice.PARALLELIZABLE and not stage.python else 1
                self_time = min(self_time, workers / rates[i])
            # the upper stage of a fused pair (a MapAndBatch's batch): the lower one carries it
            if i > 0 and found[i - 1].node in fused:
                self_time, runtime = 0.0, None
        elif costs[i] is not None:  # from prefix rates: what this stage adds per output element
            self_time = max(0.0, costs[i] - previous_cost) / ratios[i]
        if costs[i] is not None:
            previous_cost = costs[i]
        if size is None and specs:  # no model node (its iterator gone, say): the spec's size
            size = _static_bytes(specs[i])
        if size is None and stages and stages[-1].bytes_per_element and (
                stage.op in _HANDOFF_OPS or stage.op in advice.BATCH_OPS):
            # a batch holds the elements under it; a hand-off stage passes them unchanged
            size = stages[-1].bytes_per_element * ratios[i - 1] / ratios[i]
        stages.append(Stage(
            index=i, op=stage.op, name=stage.name, parallelism=stage.parallelism,
            runtime_parallelism=runtime, self_time_s=self_time,
            per_core_rate=(1 / self_time) if self_time else None,
            prefix_rate=rates[i], elements_per_output=ratios[i], bytes_per_element=size,
            random=stage.random, python=stage.python, heavy_ops=stage.heavy_ops,
            fused=stage.node in fused,
            cardinality=cardinalities[i] if cardinalities else None,
            batch_size=stage.batch_size, buffer_size=stage.buffer_size,
            deterministic=None if stage.deterministic is None else (
                stage.deterministic == "true" or (stage.deterministic == "default" and ordered)),
            item_bytes=facts[i][0], image_side=facts[i][1]))

    return stages
