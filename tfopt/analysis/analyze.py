"""``tfopt.analyze``: read any ``tf.data`` pipeline's stages, measure each prefix in-graph, read
what AUTOTUNE measured and chose, and name the bottleneck and what to change."""

from __future__ import annotations

import logging
import reprlib
import time

import tfopt._validate as _validate
from tfopt._system import usable_cores
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
        ram_budget: Bytes a cache may use (kept in the report; the cache advice comes later).
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
    from tfopt.analysis import graph, measure, model, tfapi

    started = time.perf_counter()
    tfapi.check_tensorflow()
    graph_def, found = graph.read_graph(dataset)
    options = dataset.options()
    share = seconds / (len(found) + 1)  # the whole pipeline gets two shares
    rates, proto = [], None
    for index, stage in enumerate(found):
        last = index == len(found) - 1
        prefix_def, spec = graph.prefix_graph(graph_def, stage.node)
        prefix = tfapi.rebuild(prefix_def, spec).with_options(options)
        try:
            iterator = iter(prefix)
            measured = measure.drain(iterator, 2 * share if last else share)
            if last:
                proto = tfapi.model_proto(iterator)
        except tf.errors.OpError as error:
            raise UnsupportedDatasetError(
                f"{stage.op} ({stage.name or stage.node}) failed when run for analysis: "
                f"{tfapi.first_line(error)}") from None
        logger.info("analyze: %s up to %s: %.1f elements/s", stage.op, stage.name or stage.node,
                    measured.rate)
        rates.append(measured.rate)
    reading = model.read_model(proto, found) if proto is not None else None
    cores = (cores or (reading.cpu_budget if reading and reading.cpu_budget else None)
             or usable_cores())
    stages = _stages(found, rates, reading)
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
    recommendations = advice.recommendations(
        stages, cores, rates[-1], reading is not None and reading.injected_prefetch)
    return PipelineReport(
        stages=tuple(stages), bottleneck=plan.bottleneck, ceiling_per_s=plan.ceiling_per_s,
        rate_per_s=rates[-1], predicted_per_s=plan.predicted_per_s, cores=cores,
        recommendations=tuple(recommendations), autotune_model=reading is not None,
        notes=tuple(notes), seconds=time.perf_counter() - started, ram_budget=ram_budget)


def _stages(found, rates, reading) -> list[Stage]:
    """Report stages from graph stages, prefix rates and the model's nodes."""
    by_stage = reading.by_stage if reading else {}
    fused = reading.fused_into_next if reading else frozenset()
    out_elements = reading.output_elements if reading else 0
    # elements per output element, from the output down: the model's counts where it has
    # them, else the batch sizes above
    ratios = [1.0] * len(found)
    for i in range(len(found) - 1, -1, -1):
        stage, node = found[i], by_stage.get(found[i].node)
        above = 1.0 if i == len(found) - 1 else ratios[i + 1] * (
            found[i + 1].batch_size or 1)
        if stage.node in fused:
            above = ratios[i + 1] * (found[i + 1].batch_size or 1)
        elif node is not None and node.elements > 0 and out_elements > 0:
            above = node.elements / out_elements
        ratios[i] = above
    stages, previous_cost = [], 0.0
    for i, stage in enumerate(found):
        node = by_stage.get(stage.node)
        self_time, runtime, size = None, None, None
        if node is not None and node.elements > 0:
            per = ratios[i] / ratios[i + 1] if stage.node in fused else 1.0
            self_time = node.processing_ns * 1e-9 / (node.elements * per)
            runtime = node.parallelism
            size = node.bytes_produced / (node.elements * per)
            if i > 0 and found[i - 1].node in fused:  # the batch half of a MapAndBatch
                self_time, runtime = 0.0, None
        elif rates[i] > 0:  # from prefix rates: what this stage adds per output element
            cost = ratios[i] / rates[i]
            self_time = max(0.0, cost - previous_cost) / ratios[i]
        if rates[i] > 0:
            previous_cost = ratios[i] / rates[i]
        stages.append(Stage(
            index=i, op=stage.op, name=stage.name, parallelism=stage.parallelism,
            runtime_parallelism=runtime, self_time_s=self_time,
            per_core_rate=(1 / self_time) if self_time else None,
            prefix_rate=rates[i], elements_per_output=ratios[i], bytes_per_element=size,
            random=stage.random, python=stage.python, heavy_ops=stage.heavy_ops,
            fused=stage.node in fused))
    return stages
