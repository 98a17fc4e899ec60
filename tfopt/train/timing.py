"""Timing math for the training callbacks: step times, throughput and input stalls.

Plain classes that take a clock function, so they are tested with a fake clock and exact
numbers; the Keras callbacks in :mod:`tfopt.train.callbacks` only forward their hooks here.

Vocabulary: a *call* is one ``on_train_batch_begin`` -> ``on_train_batch_end`` pair. With
``steps_per_execution = N`` Keras runs N steps per call, so a call carries a step count. The
*gap* is the time from one call's end to the next call's begin.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections.abc import Callable, Sequence

from tfopt._validate import whole_number
from tfopt.errors import InvalidArgumentError

__all__ = [
    "EpochStart",
    "EpochStartClock",
    "InputBound",
    "StallMeter",
    "StallSummary",
    "StepTimer",
    "ThroughputSummary",
    "classify_input_bound",
    "percentile",
]

# The first steps of a run trace and compile the train function (seconds on CPU, more under
# XLA), which would swamp the median of a short epoch.
DEFAULT_WARMUP_STEPS = 3


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with linear interpolation (numpy's default method).

    Args:
        values: The sample; need not be sorted.
        q: Percent, 0 to 100.

    Returns:
        The percentile; NaN for an empty sample.

    Raises:
        InvalidArgumentError: q is outside 0..100.

    Example:
        >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
        2.5
    """
    if not 0 <= q <= 100:
        raise InvalidArgumentError(f"q must be a percent between 0 and 100, got {q!r}")
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _check_warmup(warmup_steps: int) -> int:
    whole_number(warmup_steps, "warmup_steps", 0)
    return warmup_steps


class _CallClock:
    """Begin/end bookkeeping shared by StepTimer and StallMeter, with the warm-up rule.

    Warm-up: calls are skipped while fewer than ``warmup_steps`` steps have run since the
    timer was made (so only the first epoch of a ``fit`` loses them). A call that starts inside
    the warm-up is skipped whole, even when its N steps reach past it.
    """

    def __init__(self, warmup_steps: int, clock: Callable[[], float]):
        self.warmup_steps = _check_warmup(warmup_steps)
        self._clock = clock
        self._steps_run = 0  # over the timer's life, for the warm-up
        self._begin: float | None = None
        self._counting = False
        self._last_end: float | None = None  # end of the previous counted call in this epoch

    @property
    def in_warmup(self) -> bool:
        """True while the next call would still be skipped as warm-up."""
        return self._steps_run < self.warmup_steps

    def start_epoch(self) -> None:
        """Forget the gap to the previous epoch's last call."""
        self._last_end = None
        self._begin = None

    def _on_begin(self) -> float | None:
        """Stamp a call's begin; return the gap since the last counted call, if any."""
        now = self._clock()
        self._begin = now
        self._counting = not self.in_warmup
        if not self._counting or self._last_end is None:
            return None
        return now - self._last_end

    def _on_end(self, steps: int) -> float | None:
        """Stamp a call's end; return its duration when it counts, else None."""
        whole_number(steps, "steps", 1)
        if self._begin is None:
            raise InvalidArgumentError("end() called without a matching begin()")
        now = self._clock()
        duration = now - self._begin
        self._begin = None
        self._steps_run += steps
        if not self._counting:
            return None
        self._last_end = now
        return duration


@dataclasses.dataclass(frozen=True)
class ThroughputSummary:
    """One epoch's speed, warm-up excluded.

    Attributes:
        steps: Steps counted.
        examples: Examples counted (steps x batch size); 0 when the batch size is unknown.
        seconds: Wall time from the first counted call's begin to the last one's end, gaps
            (input waits, callbacks) included.
        examples_per_second: examples / seconds; NaN when unknown or nothing was counted.
        steps_per_second: steps / seconds; NaN when nothing was counted.
        step_time_median: Median seconds per step (a call of N steps gives duration / N).
        step_time_p90: 90th percentile of the same.
    """

    steps: int
    examples: int
    seconds: float
    examples_per_second: float
    steps_per_second: float
    step_time_median: float
    step_time_p90: float

    def to_logs(self) -> dict[str, float]:
        """The values as a Keras logs dict (numbers only)."""
        return {
            "examples_per_second": self.examples_per_second,
            "steps_per_second": self.steps_per_second,
            "step_time_median": self.step_time_median,
            "step_time_p90": self.step_time_p90,
        }


class _EpochMeter:
    """What StepTimer and StallMeter share: the warm-up-aware call clock and the epoch reset."""

    def __init__(self, warmup_steps: int = DEFAULT_WARMUP_STEPS,
                 clock: Callable[[], float] = time.perf_counter):
        self._calls = _CallClock(warmup_steps, clock)
        self.start_epoch()

    @property
    def in_warmup(self) -> bool:
        """True while the next call would still be skipped as warm-up."""
        return self._calls.in_warmup

    @property
    def steps_run(self) -> int:
        """Steps ended over the meter's life, warm-up included (each execution's steps)."""
        return self._calls._steps_run

    def start_epoch(self) -> None:
        """Reset the epoch's counts (call from on_epoch_begin)."""
        self._calls.start_epoch()
        self._reset()

    def _reset(self) -> None:
        raise NotImplementedError


class StepTimer(_EpochMeter):
    """Per-epoch step times and examples per second from begin/end calls.

    Args:
        warmup_steps: Steps at the start of the first epoch left out (tracing, compilation,
            pipeline start). Defaults to 3.
        clock: Monotonic clock in seconds. Defaults to time.perf_counter.

    Raises:
        InvalidArgumentError: warmup_steps is not an integer >= 0.

    Example:
        >>> timer = StepTimer(warmup_steps=0)
        >>> timer.start_epoch()
        >>> timer.begin(); run_one_step(); timer.end(steps=1, batch_size=32)
        >>> timer.summary().examples_per_second
    """

    def _reset(self) -> None:
        self._step_times: list[float] = []
        self._steps = 0
        self._examples = 0
        self._batch_size_known = True
        self._first_begin: float | None = None
        self._last_end: float | None = None

    def begin(self) -> None:
        """A call starts (on_train_batch_begin)."""
        self._calls._on_begin()
        if self._calls._counting and self._first_begin is None:
            self._first_begin = self._calls._begin

    def end(self, steps: int = 1, batch_size: int | None = None) -> None:
        """The call started by :meth:`begin` ran ``steps`` steps of ``batch_size`` examples.

        Args:
            steps: Steps in this call (steps_per_execution). Defaults to 1.
            batch_size: Examples per step (the global batch); None when unknown.
                Defaults to None.

        Raises:
            InvalidArgumentError: steps < 1, or no begin() before.
        """
        duration = self._calls._on_end(steps)
        if duration is None:
            return
        self._last_end = self._calls._last_end
        self._steps += steps
        self._step_times.append(duration / steps)
        if batch_size is None:
            self._batch_size_known = False
        else:
            self._examples += steps * batch_size

    def summary(self) -> ThroughputSummary:
        """The epoch so far; NaN rates when no call was counted."""
        seconds = 0.0
        if self._first_begin is not None and self._last_end is not None:
            seconds = self._last_end - self._first_begin
        examples = self._examples if self._batch_size_known else 0
        known = seconds > 0 and self._batch_size_known and examples > 0
        return ThroughputSummary(
            steps=self._steps,
            examples=examples,
            seconds=seconds,
            examples_per_second=examples / seconds if known else math.nan,
            steps_per_second=self._steps / seconds if seconds > 0 else math.nan,
            step_time_median=percentile(self._step_times, 50),
            step_time_p90=percentile(self._step_times, 90),
        )


class InputBound(enum.Enum):
    """How input-bound an epoch was, with the TensorFlow Profiler's thresholds."""

    NOT = "not input-bound"
    MODERATE = "moderately input-bound"
    HIGH = "highly input-bound"

    @property
    def advice(self) -> str:
        """The likely fix, one line."""
        return _ADVICE[self]


# The TensorFlow Profiler's input-pipeline analyser: < 5 % of step time waiting for input is
# fine, 5-20 % moderately, >= 20 % highly input-bound. Lower bounds, highest first.
_THRESHOLDS = ((20.0, InputBound.HIGH), (5.0, InputBound.MODERATE), (0.0, InputBound.NOT))

_ADVICE = {
    InputBound.NOT: "the input pipeline keeps up; look at the model side (precision, "
    "steps_per_execution, batch size)",
    InputBound.MODERATE: "tfopt.analyze(dataset) names the slow stage and what to change "
    "(often prefetch and num_parallel_calls=AUTOTUNE), and tfopt.optimize(dataset) makes the "
    "safe changes; for TFRecord shards see tfopt.build_pipeline",
    InputBound.HIGH: "the accelerator waits for data: tfopt.analyze(dataset) (or 'tfopt "
    "analyze FILE.py:FUNCTION') names the slow stage, the ceiling on these cores and what to "
    "change (parallel reads and map, a cache of decoded data, prefetch, augmentation on the "
    "device), and tfopt.optimize(dataset) makes the changes that keep its elements and "
    "order; for TFRecord shards see tfopt.build_pipeline",
}


def classify_input_bound(percent: float) -> InputBound:
    """Classify an input-bound share as the TensorFlow Profiler does.

    Args:
        percent: Share of step time spent waiting for input, 0 to 100.

    Returns:
        NOT below 5 %, MODERATE from 5 % to below 20 %, HIGH from 20 %. NaN counts as NOT.

    Example:
        >>> classify_input_bound(12.0)
        <InputBound.MODERATE: 'moderately input-bound'>
    """
    for lower, kind in _THRESHOLDS:
        if percent >= lower:
            return kind
    return InputBound.NOT


@dataclasses.dataclass(frozen=True)
class StallSummary:
    """One epoch's split between waiting for input and computing, warm-up excluded.

    Attributes:
        wait_seconds: Time waiting for input: the waits measured inside calls when given,
            else the gaps between calls (all a callback can see).
        compute_seconds: Call durations minus the input waits inside them.
        gap_seconds: Time between calls (training-loop and callback overhead, plus input
            waits where the loop reads input outside the calls).
        input_bound_percent: 100 * wait / (compute + gaps + inner waits), i.e. of the wall
            time of the counted steps; NaN when nothing was counted.
        kind: The Profiler-style class of input_bound_percent.
    """

    wait_seconds: float
    compute_seconds: float
    gap_seconds: float
    input_bound_percent: float
    kind: InputBound

    def to_logs(self) -> dict[str, float]:
        """The numbers as a Keras logs dict (the class goes to the log, not here)."""
        return {
            "input_bound_percent": self.input_bound_percent,
            "input_wait_seconds": self.wait_seconds,
            "compute_seconds": self.compute_seconds,
            "step_gap_seconds": self.gap_seconds,
        }


class StallMeter(_EpochMeter):
    """Waiting for the next batch against computing on it, per epoch.

    Two views of the wait. Inside calls: waits measured where the input is read and passed to
    :meth:`summary` (an instrumented dataset; with Keras 3 the iterator is read inside the
    compiled train function, so this is where the wait is). Between calls: the gap from one
    call's end to the next call's begin, which is all a callback sees; it is the wait only
    when the loop reads input outside the calls. With inner waits given, the gaps count as
    time but not as waiting. Compute is the rest of each call.

    Args:
        warmup_steps: Steps at the start of the first epoch left out. Defaults to 3.
        clock: Monotonic clock in seconds. Defaults to time.perf_counter.

    Raises:
        InvalidArgumentError: warmup_steps is not an integer >= 0.

    Example:
        >>> meter = StallMeter(warmup_steps=0)
        >>> meter.start_epoch()
        >>> meter.begin(); train_step(); meter.end(); next_batch()
        >>> meter.summary().kind
    """

    def _reset(self) -> None:
        self._gap_seconds = 0.0
        self._busy_seconds = 0.0
        self._calls_counted = 0

    def begin(self) -> None:
        """A call starts; the time since the previous counted call's end is a gap."""
        gap = self._calls._on_begin()
        if gap is not None:
            self._gap_seconds += gap

    def end(self, steps: int = 1) -> None:
        """The call started by :meth:`begin` ends.

        Args:
            steps: Steps in this call (steps_per_execution); counts toward the warm-up.
                Defaults to 1.

        Raises:
            InvalidArgumentError: steps < 1, or no begin() before.
        """
        duration = self._calls._on_end(steps)
        if duration is not None:
            self._busy_seconds += duration
            self._calls_counted += 1

    @property
    def counting(self) -> bool:
        """True while inside a call that counts (not warm-up)."""
        return self._calls._begin is not None and self._calls._counting

    def summary(self, inner_wait_seconds: float | None = None) -> StallSummary:
        """The epoch so far.

        Args:
            inner_wait_seconds: Input waits measured inside the counted calls (from an
                instrumented dataset), moved from compute to wait, at most the calls' total.
                Defaults to None: none measured, the gaps are the wait.
        """
        gaps = self._gap_seconds
        if inner_wait_seconds is None:
            inner, wait = 0.0, gaps
        else:
            inner = min(max(inner_wait_seconds, 0.0), self._busy_seconds)
            wait = inner
        compute = self._busy_seconds - inner
        total = gaps + self._busy_seconds
        percent = 100.0 * wait / total if self._calls_counted and total > 0 else math.nan
        return StallSummary(wait, compute, gaps, percent, classify_input_bound(percent))


# An epoch that waits at least this long before its first batch call, and at least this share
# of the epoch, is told how to avoid the wait (EpochStart.slow). Below either, the wait is
# noise next to the epoch: an iterator's start alone takes tens of milliseconds.
SLOW_EPOCH_START_SECONDS = 0.5
SLOW_EPOCH_START_SHARE = 0.05


@dataclasses.dataclass(frozen=True)
class EpochStart:
    """How long an epoch waited from its start to its first batch call.

    Attributes:
        seconds: From ``on_epoch_begin`` to the first ``on_train_batch_begin``.
        epoch_seconds: From ``on_epoch_begin`` to ``on_epoch_end``.
    """

    seconds: float
    epoch_seconds: float

    @property
    def share(self) -> float:
        """The wait's share of the epoch, 0 to 1 (0 for an epoch of no time)."""
        return self.seconds / self.epoch_seconds if self.epoch_seconds > 0 else 0.0

    @property
    def slow(self) -> bool:
        """True when the wait is long enough, alone and against the epoch, to act on."""
        return (self.seconds >= SLOW_EPOCH_START_SECONDS
                and self.share >= SLOW_EPOCH_START_SHARE)


class EpochStartClock:
    """Times each epoch's start: from ``on_epoch_begin`` to its first batch call.

    Why it matters: for a finite dataset Keras opens a new iterator every epoch, between those
    two hooks, and the previous epoch's iterator is released there. With tf.data autotuning on,
    TensorFlow (2.21) now and then holds that release until its autotuning thread's current
    sleep ends; the sleeps double from 10 ms up to a minute, so the wait grows with the fit.
    StallMeter does not see it (it counts from the first call), nor does an InputProbe (the
    wait is not in ``get_next``).

    Args:
        clock: Monotonic clock in seconds. Defaults to time.perf_counter.

    Example:
        >>> starts = EpochStartClock()
        >>> starts.start_epoch(); starts.batch_begins(); ...; starts.end_epoch().seconds
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self._began: float | None = None
        self._first_batch: float | None = None

    def start_epoch(self) -> None:
        """The epoch starts (call from on_epoch_begin)."""
        self._began = self._clock()
        self._first_batch = None

    def batch_begins(self) -> None:
        """A batch call begins (call from on_train_batch_begin); only the epoch's first counts."""
        if self._began is not None and self._first_batch is None:
            self._first_batch = self._clock() - self._began

    def end_epoch(self) -> EpochStart | None:
        """The epoch's start, or None when it had no batch call (or never started)."""
        if self._began is None or self._first_batch is None:
            return None
        start = EpochStart(self._first_batch, self._clock() - self._began)
        self._began = None
        return start
