"""Keras callbacks that show every epoch whether the accelerator is fed.

Each callback writes numbers into the epoch's ``logs``, so they reach History, CSVLogger and
TensorBoard; put them *before* CSVLogger/TensorBoard in the ``callbacks`` list. Keras's progress
line would print them all: :class:`ProgressLine`, put last, prints only examples/s and the
input-bound share of them, and leaves ``logs`` whole. Keras 3 reads the next batch inside
its compiled train function, so no callback sees the input wait:
:class:`InputProbe` measures it in the ``tf.data`` pipeline. The timing math lives in
:mod:`tfopt.train.timing`; these classes only forward Keras's hooks to it. How steps are
counted under ``steps_per_execution`` and strategies, and the wait between epochs:
``docs/train.md`` ("Callbacks").
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable
from types import ModuleType

import keras
import tensorflow as tf

from tfopt._validate import optional_whole_number
from tfopt.errors import InvalidArgumentError
from tfopt.gpu.peak import PeakFlops
from tfopt.gpu.sampler import GpuSampler, GpuStats
from tfopt.train.flops import model_flops
from tfopt.train.timing import (
    DEFAULT_WARMUP_STEPS,
    EpochStart,
    EpochStartClock,
    InputBound,
    StallMeter,
    StepTimer,
)

logger = logging.getLogger("tfopt")

__all__ = [
    "GpuStatsCallback",
    "InputProbe",
    "InputStallCallback",
    "MEASUREMENT_KEYS",
    "PROGRESS_LINE_KEYS",
    "ProgressLine",
    "ThroughputCallback",
    "is_measurement",
    "training_callbacks",
]


def _steps_in_call(model, begin: int | None, end: int) -> int:
    """Steps Keras ran between on_train_batch_begin(begin) and on_train_batch_end(end)."""
    if begin is not None and end > begin:
        return end - begin + 1
    # Keras 3 with one step per call, or Keras 2 (which passes one index to both hooks)
    steps = getattr(model, "steps_per_execution", 1) if model is not None else 1
    try:
        return max(int(steps), 1)  # an int in Keras 3, a tf.Variable in Keras 2
    except (TypeError, ValueError):
        return 1


class InputProbe:
    """Measures, inside a ``tf.data`` pipeline, how long the consumer waits for each batch.

    :meth:`instrument` zips the dataset with a stream of ``tf.timestamp()`` taken when the
    consumer asks for an element, and stamps again when the element is there; the difference
    (seconds) and the batch's size accumulate in CPU variables, read without stopping training.
    It adds two small graph functions per element (no Python, no GIL) and turns off tf.data's
    injected final prefetch, so the stamps run in the consumer's thread. A ``prefetch`` that
    Keras or a distribution strategy puts downstream (``class_weight``, ``distribute_dataset``)
    moves the stamps to that prefetch thread: the waits are then the prefetcher's, which track
    the consumer's closely when input is the bottleneck.

    Instrument the dataset outside ``strategy.scope()`` (the variables must be plain CPU
    variables). The instrumented dataset cannot be serialised (tf.data service).

    Example:
        >>> probe = InputProbe()
        >>> dataset = probe.instrument(dataset)
        >>> model.fit(dataset, callbacks=[InputStallCallback(probe), ThroughputCallback(probe=probe)])
    """

    def __init__(self):
        with tf.init_scope(), tf.device("/CPU:0"):
            self._wait = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="input_wait")
            self._examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="examples")
            self._batches = tf.Variable(0, dtype=tf.int64, trainable=False, name="batches")

    def instrument(self, dataset):
        """Return ``dataset`` with its waits and batch sizes measured; elements unchanged.

        Args:
            dataset: A batched ``tf.data.Dataset``. The batch size is the first dimension of
                its first tensor (1 per element for scalars).

        Returns:
            A dataset with the same elements, element_spec and cardinality.
        """
        requested = tf.data.Dataset.from_tensors(0).repeat().map(lambda _: tf.timestamp())
        first = tf.nest.flatten(dataset.element_spec)[0]
        batched = first.shape.rank is None or first.shape.rank > 0

        def record(asked, element):
            wait = tf.timestamp() - asked  # the element arrived now; it was asked for at `asked`
            size = tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0] if batched else 1
            updates = [
                self._wait.assign_add(wait),
                self._examples.assign_add(tf.cast(size, tf.int64)),
                self._batches.assign_add(1),
            ]
            with tf.control_dependencies(updates):
                return tf.nest.map_structure(tf.identity, element)

        probed = tf.data.Dataset.zip((requested, dataset)).map(
            lambda asked, *element: record(asked, element[0] if len(element) == 1 else element)
        )
        options = tf.data.Options()
        # an injected prefetch after our map would stamp in its thread, not the consumer's
        options.experimental_optimization.inject_prefetch = False
        return probed.with_options(options)

    def read(self) -> tuple[float, int, int]:
        """(seconds waited, examples, batches) since the probe was made."""
        return float(self._wait.numpy()), int(self._examples.numpy()), int(self._batches.numpy())

    def mean_batch_size(self) -> float | None:
        """Examples per batch seen so far; None before the first batch."""
        _, examples, batches = self.read()
        return examples / batches if batches else None


class ThroughputCallback(keras.callbacks.Callback):
    """Logs examples/s and step time (median, p90) per epoch, warm-up excluded, and with a
    ``peak`` the model FLOPs utilisation.

    Logs keys: ``examples_per_second``, ``steps_per_second``, ``step_time_median`` and
    ``step_time_p90`` (seconds per step); with ``peak``, ``mfu``: the training FLOPs of the
    examples each second (:func:`tfopt.model_flops`, 3 forward passes) over the peak of the
    model's compute dtype. A model with layers the count does not know logs a lower bound
    (the log names them); one it cannot count at all logs no ``mfu``. Examples/s spans the
    first counted call's begin to the last one's end, so input waits and callback time between
    steps slow it, as they slow training.

    Batch size: ``batch_size`` when given (the global batch); else the mean batch the
    :class:`InputProbe` saw by the end of the epoch; else unknown: one warning, and
    ``examples_per_second`` is NaN while the step times are still logged.

    Args:
        batch_size: Global examples per step. Defaults to None: from ``probe``.
        probe: The InputProbe that instrumented the training dataset. Defaults to None.
        warmup_steps: Steps at the start of the first epoch left out. Defaults to 3.
        peak: The device's :class:`~tfopt.gpu.peak.PeakFlops`. Defaults to None: no MFU.
        flops_per_example: Training FLOPs of one example. Defaults to None: counted from the
            model when training begins.

    Raises:
        InvalidArgumentError: batch_size < 1 or warmup_steps < 0.

    Example:
        >>> model.fit(dataset, epochs=3, callbacks=[ThroughputCallback(batch_size=64)])
        >>> history.history["examples_per_second"]
    """

    def __init__(self, batch_size: int | None = None, probe: InputProbe | None = None,
                 warmup_steps: int = DEFAULT_WARMUP_STEPS, peak: PeakFlops | None = None,
                 flops_per_example: int | None = None):
        super().__init__()
        self.batch_size = optional_whole_number(
            batch_size, "batch_size", 1, "a positive integer (the global batch) or None")
        self.probe = probe
        self.timer = StepTimer(warmup_steps)
        self.peak = peak
        self.flops_per_example = flops_per_example
        self._begin_step: int | None = None
        self._warned = False

    def on_train_begin(self, logs=None):
        if self.peak is None or self.flops_per_example is not None:
            return
        try:
            counted = model_flops(self.model)
        except InvalidArgumentError as error:
            logger.info("ThroughputCallback: no mfu: %s", error)
            return
        if counted.uncounted:
            logger.info("ThroughputCallback: mfu is a lower bound: layers of a kind the "
                           "FLOPs count does not know: %s", ", ".join(counted.uncounted))
        self.flops_per_example = counted.training

    def _mfu(self, examples_per_second: float) -> float | None:
        if self.peak is None or not self.flops_per_example or math.isnan(examples_per_second):
            return None
        dtype = str(getattr(self.model.dtype_policy, "compute_dtype", "float32"))
        return examples_per_second * self.flops_per_example / self.peak.for_dtype(dtype)

    def on_epoch_begin(self, epoch, logs=None):
        self.timer.start_epoch()

    def on_train_batch_begin(self, batch, logs=None):
        self._begin_step = batch
        self.timer.begin()

    def on_train_batch_end(self, batch, logs=None):
        # examples are filled in at epoch end when the batch size comes from the probe
        self.timer.end(_steps_in_call(self.model, self._begin_step, batch), batch_size=1)

    def on_epoch_end(self, epoch, logs=None):
        summary = self.timer.summary()
        batch_size = self.batch_size
        if batch_size is None and self.probe is not None:
            batch_size = self.probe.mean_batch_size()
        values = summary.to_logs()
        if batch_size is None:
            values["examples_per_second"] = math.nan
            if not self._warned:
                self._warned = True
                logger.warning("ThroughputCallback: batch size unknown, examples_per_second "
                               "is NaN; pass batch_size= or probe=")
        else:
            values["examples_per_second"] = summary.steps_per_second * batch_size
        mfu = self._mfu(values["examples_per_second"])
        if mfu is not None:
            values["mfu"] = mfu
        if logs is not None:
            logs.update(values)
        logger.info("epoch %d: %.1f examples/s, step time median %.2f ms, p90 %.2f ms",
                    epoch + 1, values["examples_per_second"], 1e3 * values["step_time_median"],
                    1e3 * values["step_time_p90"])


class InputStallCallback(keras.callbacks.Callback):
    """Logs each epoch's share of time spent waiting for input, classed as the Profiler does.

    Wait = the waits the :class:`InputProbe` measured inside Keras's batch calls; without a
    probe, the gaps between the calls. ``input_bound_percent`` = 100 * wait / wall time of the
    counted steps (calls + gaps), classed under 5 % not input-bound, 5-20 % moderately, 20 % or more highly; the class and
    the likely fix go to the ``tfopt`` log at INFO (a warning when highly input-bound). Without
    a probe only the gaps are seen, which with Keras 3 miss the input wait (module docstring):
    one warning says so.

    Logs keys: ``input_bound_percent``, ``input_wait_seconds``, ``compute_seconds`` (calls
    minus input waits), ``step_gap_seconds`` (between calls: loop and callback overhead),
    ``epoch_start_seconds`` (from the epoch's start to its first batch call: where Keras opens
    a finite dataset's iterator for the epoch and releases the last one). From the second epoch
    of a fit, a start of at least 0.5 s and 5 % of the epoch is logged with the fix (one
    iterator for the whole fit: ``.repeat()`` and ``steps_per_epoch``), as a warning the first
    time (:class:`~tfopt.train.timing.EpochStartClock` says why it happens).

    Args:
        probe: The InputProbe that instrumented the training dataset. Defaults to None.
        warmup_steps: Steps at the start of the first epoch left out. Defaults to 3.
        pipeline: The :class:`~tfopt.PipelineBuilder` that built the training dataset, if it
            did: an input-bound epoch then gets advice from its plan (the costly stage, why
            the cache was or was not chosen, the stored images' size) instead of the generic
            line, and a fit that reads less than one pass of its cache (``steps_per_epoch`` x
            ``epochs``) gets one warning at its start: such a cache serves nothing and is
            discarded (:meth:`~tfopt.PipelineBuilder.partial_pass_note`). Defaults to None.

    Raises:
        InvalidArgumentError: warmup_steps < 0.

    Example:
        >>> probe = InputProbe()
        >>> model.fit(probe.instrument(builder.build()),
        ...           callbacks=[InputStallCallback(probe, pipeline=builder)])
    """

    def __init__(self, probe: InputProbe | None = None,
                 warmup_steps: int = DEFAULT_WARMUP_STEPS, pipeline=None):
        super().__init__()
        self.probe = probe
        self.pipeline = pipeline
        self.meter = StallMeter(warmup_steps)
        self.starts = EpochStartClock()
        self._begin_step: int | None = None
        self._probe_start: float | None = None
        self._epochs_in_fit = 0
        self._start_warned = False
        self._advised: dict[str, int] = {}  # advice given in this fit -> its epoch (1-based)
        self.last_kind: InputBound | None = None

    def on_train_begin(self, logs=None):
        self._epochs_in_fit = 0
        self._start_warned = False  # a warning once per fit, the later slow starts at INFO
        self._advised = {}  # the same advice in full once per fit, later epochs refer to it
        if self.probe is None:
            logger.warning(
                "InputStallCallback without an InputProbe sees only the gaps between Keras's "
                "batch calls; Keras 3 reads input inside the train function, so input waits "
                "are missed. Use probe = InputProbe(); fit(probe.instrument(dataset), ...)"
            )
        self._note_partial_pass()

    def _note_partial_pass(self):
        """Warn once when this fit reads less than one pass of the pipeline's cached stage.

        With ``steps_per_epoch`` Keras 3 keeps one iterator across the epochs (it opens a new
        one only when a dataset of known length runs out), so the fit reads ``steps`` x
        ``epochs`` batches through it; fewer than one pass never read from the cache.
        """
        params = self.params or {}
        steps, epochs = params.get("steps"), params.get("epochs")
        if self.pipeline is None or not steps or not epochs:
            return
        note = self.pipeline.partial_pass_note(steps * epochs)
        if note:
            logger.warning("this fit (%d steps per epoch x %d epochs) %s", steps, epochs, note)

    def on_epoch_begin(self, epoch, logs=None):
        self.meter.start_epoch()
        self.starts.start_epoch()
        self._probe_start = None

    def on_train_batch_begin(self, batch, logs=None):
        self.starts.batch_begins()
        self._begin_step = batch
        self.meter.begin()
        if self.probe is not None and self._probe_start is None and self.meter.counting:
            self._probe_start = self.probe.read()[0]  # waits from here on belong to counted calls

    def on_train_batch_end(self, batch, logs=None):
        self.meter.end(_steps_in_call(self.model, self._begin_step, batch))

    def on_epoch_end(self, epoch, logs=None):
        inner = None
        if self.probe is not None and self._probe_start is not None:
            inner = self.probe.read()[0] - self._probe_start
        summary = self.meter.summary(inner)
        self.last_kind = summary.kind
        if logs is not None:
            logs.update(summary.to_logs())
        level = logging.WARNING if summary.kind is InputBound.HIGH else logging.INFO
        advice = summary.kind.advice
        if self.pipeline is not None and summary.kind is not InputBound.NOT:
            advice = self.pipeline.stall_advice()
        if advice in self._advised:  # a plan's advice runs to a paragraph: once is enough
            shown = f"the advice of epoch {self._advised[advice]}"
        else:
            self._advised[advice] = epoch + 1
            shown = advice
        logger.log(level, "epoch %d: %.1f %% of step time waiting for input: %s; %s",
                   epoch + 1, summary.input_bound_percent, summary.kind.value, shown)
        start = self.starts.end_epoch()
        if start is not None:
            if logs is not None:
                logs["epoch_start_seconds"] = start.seconds
            if start.slow and self._epochs_in_fit > 0:  # the fit's first epoch releases nothing
                self._note_slow_start(epoch, start)
        self._epochs_in_fit += 1

    def _note_slow_start(self, epoch: int, start: EpochStart) -> None:
        steps = (self.params or {}).get("steps")
        level = logging.INFO if self._start_warned else logging.WARNING
        self._start_warned = True
        logger.log(
            level, "epoch %d waited %.1f s (%.0f %% of the epoch) before its first batch: for "
            "a finite dataset Keras opens a new iterator every epoch and releases the last one "
            "there, and with autotuning on TensorFlow can hold that release until its tuning "
            "thread wakes (up to a minute). One iterator for the whole fit avoids it: "
            "fit(dataset.repeat(), steps_per_epoch=%s, ...)", epoch + 1, start.seconds,
            100 * start.share, steps if steps else "BATCHES_PER_EPOCH")


# GpuSnapshot field -> logs key stem. Memory is logged in MiB: bytes overflow float32 summaries
# in TensorBoard's precision and read badly in a CSV.
_GPU_FIELDS = {
    "gpu_util": ("util", 1.0),
    "mem_util": ("mem_util", 1.0),
    "sm_active": ("sm_active", 1.0),
    "sm_occupancy": ("sm_occupancy", 1.0),
    "tensor_active": ("tensor_active", 1.0),
    "dram_bw_util": ("dram_bw_util", 1.0),
    "memory_used": ("memory_mib", 1.0 / (1 << 20)),
    "power_w": ("power_w", 1.0),
    "temperature_c": ("temperature_c", 1.0),
}


class GpuStatsCallback(keras.callbacks.Callback):
    """Samples the GPUs in a background thread; logs each epoch's mean and max per GPU.

    Keys per GPU i: ``gpu{i}_util_mean``/``_max`` (percent of time one or more kernels ran,
    nvidia-smi's GPU-Util, however few SMs they used), ``gpu{i}_mem_util_*`` (percent of
    time memory was read or written), ``gpu{i}_memory_mib_*``, ``gpu{i}_power_w_*``,
    ``gpu{i}_power_percent_*`` (of the enforced limit), ``gpu{i}_temperature_c_*``. On a GPU
    with GPM (Hopper and newer) also the GPU's own counters, percent over each sampling
    interval: ``gpu{i}_sm_active_*`` (SMs with work), ``gpu{i}_sm_occupancy_*`` (warps
    resident), ``gpu{i}_tensor_active_*`` (cycles in tensor-core instructions),
    ``gpu{i}_dram_bw_util_*`` (DRAM bandwidth against its peak); the first sample of a fit
    starts their interval, so an epoch with one sample may lack them. A field the GPU does not
    report is left out, never logged as 0. Short epochs get at least one sample, taken at
    epoch end.

    Without NVML or an NVIDIA GPU: one warning at train begin and nothing else. A failure
    while sampling is logged and never stops training.

    Args:
        interval_s: Seconds between samples. Defaults to 1.0.
        module: The pynvml module (a fake one in tests). Defaults to None: import pynvml.

    Raises:
        InvalidArgumentError: interval_s is not positive.

    Example:
        >>> model.fit(dataset, epochs=5, callbacks=[GpuStatsCallback(interval_s=0.5)])
    """

    def __init__(self, interval_s: float = 1.0, module: ModuleType | None = None):
        super().__init__()
        from tfopt.gpu.sampler import SampleSchedule

        SampleSchedule(interval_s)  # validates interval_s now, not at train begin
        self.interval_s = interval_s
        self.module = module
        self.sampler: GpuSampler | None = None
        self._warned = False

    def on_train_begin(self, logs=None):
        try:
            sampler = GpuSampler(self.interval_s, module=self.module)
            state = sampler.state
            if not state.ok:
                if not self._warned:
                    self._warned = True
                    logger.warning("GPU stats off: %s. Hint: %s", state.message, state.hint)
                sampler.stop()
                return
            self.sampler = sampler.start()
        except Exception:  # monitoring must never fail training
            logger.exception("GPU stats off: starting the sampler failed")
            self.sampler = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.sampler is not None:
            self.sampler.stats = GpuStats()  # the thread adds to whatever object is current

    def on_epoch_end(self, epoch, logs=None):
        if self.sampler is None:
            return
        try:
            stats = self.sampler.stats
            if not stats.summary():
                self.sampler.sample_once()
            values = self._values(stats)
        except Exception:
            logger.exception("GPU stats: reading the samples failed; epoch %d not logged", epoch)
            return
        if logs is not None:
            logs.update(values)

    def _values(self, stats: GpuStats) -> dict[str, float]:
        limits = {s.index: s.power_limit_w for s in self.sampler.latest}
        values: dict[str, float] = {}
        for index, fields in sorted(stats.summary().items()):
            for field, (stem, scale) in _GPU_FIELDS.items():
                if field in fields:
                    values[f"gpu{index}_{stem}_mean"] = fields[field].mean * scale
                    values[f"gpu{index}_{stem}_max"] = fields[field].max * scale
            limit = limits.get(index)
            if "power_w" in fields and limit:
                values[f"gpu{index}_power_percent_mean"] = 100.0 * fields["power_w"].mean / limit
                values[f"gpu{index}_power_percent_max"] = 100.0 * fields["power_w"].max / limit
        return values

    def on_train_end(self, logs=None):
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None


# Every key the measuring callbacks write into ``logs``, but GpuStatsCallback's (_GPU_KEY).
MEASUREMENT_KEYS = frozenset({
    "examples_per_second", "steps_per_second", "step_time_median", "step_time_p90",
    "input_bound_percent", "input_wait_seconds", "compute_seconds", "step_gap_seconds",
    "epoch_start_seconds",
})
_GPU_KEY = re.compile(r"gpu\d+_")

# The two numbers that say each epoch whether training is fast and fed; the rest are for
# finding out why, read from History or the CSV.
PROGRESS_LINE_KEYS = ("examples_per_second", "input_bound_percent")


def is_measurement(key: str) -> bool:
    """True for a ``logs`` key written by the measuring callbacks of this module."""
    return key in MEASUREMENT_KEYS or _GPU_KEY.match(key) is not None


class ProgressLine(keras.callbacks.ProgbarLogger):
    """Keras's progress line, with examples/s and the input share as its only measurements.

    The measuring callbacks put a dozen numbers (more with GPUs) into each epoch's ``logs``;
    on one line they bury the loss. This prints the epoch's line without those outside
    ``show``, and leaves ``logs`` untouched, so History, CSVLogger, TensorBoard and every
    other callback still get all of them. Keras adds its own ``ProgbarLogger`` only when the
    list holds none, so this one takes its place and follows ``fit(verbose=...)``. Put it
    last: a key that a callback after it adds (``learning_rate`` from ReduceLROnPlateau) still
    reaches History but not the line.

    Args:
        show: The measurement keys to print; other keys (loss, metrics, ``val_*``) are always
            printed. Defaults to ``examples_per_second`` and ``input_bound_percent``.

    Example:
        >>> model.fit(probe.instrument(ds), verbose=2, callbacks=[
        ...     *training_callbacks(probe=probe), keras.callbacks.CSVLogger("log.csv"),
        ...     ProgressLine()])
    """

    def __init__(self, show: Iterable[str] = PROGRESS_LINE_KEYS):
        super().__init__()
        self.show = frozenset((show,) if isinstance(show, str) else show)

    def shown(self, logs: dict | None) -> dict:
        """The items of ``logs`` the line prints, in their order."""
        return {key: value for key, value in (logs or {}).items()
                if key in self.show or not is_measurement(key)}

    def on_epoch_end(self, epoch, logs=None):
        # the measurements arrive only here: batch logs hold Keras's metrics alone
        super().on_epoch_end(epoch, self.shown(logs))


def training_callbacks(
    batch_size: int | None = None,
    probe: InputProbe | None = None,
    gpu: bool = True,
    warmup_steps: int = DEFAULT_WARMUP_STEPS,
    gpu_interval_s: float = 1.0,
    pipeline=None,
    peak: PeakFlops | None = None,
) -> list:
    """The measuring callbacks in one list: throughput, input stall and (optionally) GPU stats.

    Args:
        batch_size: Global batch size. Defaults to None: from ``probe``.
        probe: The InputProbe that instrumented the training dataset. Defaults to None.
        gpu: Add GpuStatsCallback. Defaults to True.
        warmup_steps: Steps at the start of the first epoch left out. Defaults to 3.
        gpu_interval_s: Seconds between GPU samples. Defaults to 1.0.
        pipeline: The PipelineBuilder of the training dataset, for the input-stall advice.
            Defaults to None.
        peak: The device's peak FLOPs, for ``mfu``. Defaults to None: no MFU.

    Returns:
        A list to put before CSVLogger/TensorBoard in ``fit(callbacks=...)``. Keras's
        progress line prints every value; add :class:`ProgressLine` last for a short one.

    Example:
        >>> probe = InputProbe()
        >>> model.fit(probe.instrument(ds), callbacks=training_callbacks(probe=probe))
    """
    callbacks = [
        ThroughputCallback(batch_size, probe, warmup_steps, peak=peak),
        InputStallCallback(probe, warmup_steps, pipeline=pipeline),
    ]
    if gpu:
        callbacks.append(GpuStatsCallback(gpu_interval_s))
    return callbacks
