"""Time a caught ``fit``: its steps on the script's data, the same steps on batches held in
memory, and the script's input alone.

The step with its input is timed by Keras's own ``fit`` on the script's arguments (only the
callbacks are replaced: the script's own would write files), from the end of the warm-up
calls (tracing) until ``steps`` steps or ``seconds`` have passed; the fit is stopped there by
an exception out of a callback, before Keras evaluates or ends an epoch. The step alone is the
same model on a few of the same batches read into memory and repeated, so its time holds no
input wait: the share of a step spent waiting for input is one minus the two rates' ratio
(the TensorFlow Profiler's classes then apply: under 5 %, 5-20 %, 20 % or more).
"""

from __future__ import annotations

import dataclasses
import statistics
import time

import keras
import tensorflow as tf

from tfopt._internals.keras_data import fit_dataset
from tfopt.tune.steps_per_execution import held_batches, quiet_fit_warnings

__all__ = ["HELD_BATCHES", "ROUNDS", "Rate", "held_fit_batches", "input_rate", "median_rate",
           "spread", "time_fit", "time_held"]

HELD_BATCHES = 4  # batches read into memory for the step alone: enough to vary, little RAM
WARMUP_CALLS = 2  # the first call traces; the second may retrace for a partial shape
MIN_SECONDS = 1.0  # a stretch of steps shorter than this is mostly the clock's noise
ROUNDS = 3  # the step with its input and the step alone, timed alternately; medians count


class _Enough(Exception):
    """Raised out of a callback to end a measuring fit."""


@dataclasses.dataclass(frozen=True)
class Rate:
    """One timed stretch of training steps.

    Attributes:
        examples_per_s: Examples a second over the timed steps.
        steps: Steps timed (after the warm-up).
        seconds: Their wall time.
        step_seconds: The median time of one step (a call's time over its steps).
        ended: Why timing stopped: "steps", "seconds", "epoch" (the epoch ended first) or
            "fit" (the fit ended first).
    """

    examples_per_s: float
    steps: int
    seconds: float
    step_seconds: float
    ended: str


class _StepClock(keras.callbacks.Callback):
    """Times fit's calls after the warm-up; ends the fit by raising :class:`_Enough`."""

    def __init__(self, steps_per_call: int, steps: int, seconds: float):
        super().__init__()
        self.steps_per_call, self.steps, self.seconds = steps_per_call, steps, seconds
        self.calls, self.start, self.ends = 0, None, []
        self.ended = "fit"

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.calls += 1
        if self.calls == WARMUP_CALLS:
            self.start = now
        elif self.calls > WARMUP_CALLS:
            self.ends.append(now)
            elapsed = now - self.start
            if len(self.ends) * self.steps_per_call >= self.steps and elapsed >= MIN_SECONDS:
                self.ended = "steps"
                raise _Enough
            if elapsed >= self.seconds:
                self.ended = "seconds"
                raise _Enough

    def _end_of_epoch(self):
        if self.ends:
            self.ended = "epoch"
            raise _Enough

    def on_test_begin(self, logs=None):
        self._end_of_epoch()  # before Keras evaluates the validation data

    def on_epoch_end(self, epoch, logs=None):
        self._end_of_epoch()

    def rate(self, batch_size: int) -> Rate | None:
        if not self.ends:
            return None
        times = [b - a for a, b in zip([self.start, *self.ends[:-1]], self.ends, strict=True)]
        steps = len(self.ends) * self.steps_per_call
        seconds = self.ends[-1] - self.start
        return Rate(steps * batch_size / seconds, steps, seconds,
                    statistics.median(times) / self.steps_per_call, self.ended)


def _steps_per_call(model) -> int:
    return int(getattr(model, "steps_per_execution", 1) or 1)


def time_fit(fit, model, arguments: dict, batch_size: int, steps: int,
             seconds: float) -> Rate | None:
    """Time ``fit(model, **arguments)`` (Keras's own fit, the script's arguments) with the
    callbacks replaced by the clock, the epochs extended so that a short epoch does not end
    the timing early; None where the fit ended before a step was timed."""
    clock = _StepClock(_steps_per_call(model), steps, seconds)
    call = dict(arguments, callbacks=[clock], verbose=0,
                epochs=int(arguments.get("initial_epoch") or 0) + 1_000_000)
    try:
        with quiet_fit_warnings():
            fit(model, **call)
    except _Enough:
        pass
    return clock.rate(batch_size)


def held_fit_batches(arguments: dict) -> tf.data.Dataset:
    """A few of the batches the fit reads, held in memory and repeated."""
    dataset = fit_dataset(arguments.get("x"), arguments.get("y"),
                          arguments.get("sample_weight"), arguments.get("batch_size"),
                          arguments.get("steps_per_epoch"), arguments.get("class_weight"))
    return held_batches(dataset.take(HELD_BATCHES))


def batch_size_of(held: tf.data.Dataset) -> int:
    """The leading size of the held batches (every part has it)."""
    first = tf.nest.flatten(held.element_spec)[0]
    return int(first.shape[0])


def time_held(fit, model, held: tf.data.Dataset, steps: int, seconds: float) -> Rate | None:
    """The model's steps on ``held`` (no input wait): the step alone."""
    return time_fit(fit, model, {"x": held, "steps_per_epoch": 1_000_000_000}, batch_size_of(held),
                    steps, seconds)


def input_rate(arguments: dict, batch_size: int, seconds: float) -> float | None:
    """Examples a second the fit's input gives alone (its batches drained, no model), or None
    where it gave none within ``seconds``."""
    from tfopt.analysis.measure import rate

    dataset = fit_dataset(arguments.get("x"), arguments.get("y"),
                          arguments.get("sample_weight"), arguments.get("batch_size"),
                          arguments.get("steps_per_epoch"), arguments.get("class_weight"))
    measured = rate(dataset, seconds)
    return measured.rate * batch_size if measured.elements else None


def median_rate(rates: list[Rate]) -> Rate:
    """The round with the median rate (its steps and seconds kept with it)."""
    ordered = sorted(rates, key=lambda rate: rate.examples_per_s)
    return ordered[(len(ordered) - 1) // 2]


def spread(rates: list[Rate]) -> float:
    """How far apart the rounds of one setup are: (fastest - slowest) / median, 0 for one."""
    if len(rates) < 2:
        return 0.0
    values = sorted(rate.examples_per_s for rate in rates)
    return (values[-1] - values[0]) / median_rate(rates).examples_per_s
