"""Timing math with a fake clock: exact step times, throughput, warm-up and input-stall shares."""

from __future__ import annotations

import math

import pytest

from tfopt.errors import InvalidArgumentError
from tfopt.train.timing import (
    EpochStartClock,
    InputBound,
    StallMeter,
    StepTimer,
    classify_input_bound,
    percentile,
)


class FakeClock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now

    def tick(self, seconds):
        self.now += seconds


def run_calls(meter, clock, calls, **end_kwargs):
    """calls: (gap before begin, duration, steps) triples."""
    for gap, duration, steps in calls:
        clock.tick(gap)
        meter.begin()
        clock.tick(duration)
        meter.end(steps=steps, **end_kwargs)


def test_percentile_interpolates_like_numpy():
    values = [4.0, 1.0, 3.0, 2.0, 10.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(4.0 + 0.6 * 6.0)  # between 4 and 10
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 10.0
    assert percentile([7.0], 90) == 7.0
    assert math.isnan(percentile([], 50))
    with pytest.raises(InvalidArgumentError, match="q must be"):
        percentile(values, 101)


def test_step_timer_excludes_warmup_and_counts_gaps_in_wall_time():
    clock = FakeClock()
    timer = StepTimer(warmup_steps=2, clock=clock)
    timer.start_epoch()
    # two warm-up calls (slow: tracing), then three counted ones of 0.1, 0.2, 0.3 s
    run_calls(timer, clock, [(0, 5.0, 1), (0, 1.0, 1), (0.5, 0.1, 1), (0.05, 0.2, 1),
                             (0.05, 0.3, 1)], batch_size=10)
    summary = timer.summary()
    assert summary.steps == 3
    assert summary.examples == 30
    # from the first counted begin to the last end: 0.1 + 0.05 + 0.2 + 0.05 + 0.3
    assert summary.seconds == pytest.approx(0.7)
    assert summary.examples_per_second == pytest.approx(30 / 0.7)
    assert summary.steps_per_second == pytest.approx(3 / 0.7)
    assert summary.step_time_median == pytest.approx(0.2)
    assert summary.step_time_p90 == pytest.approx(0.28)


def test_step_timer_steps_per_execution_counts_n_steps_per_call():
    clock = FakeClock()
    timer = StepTimer(warmup_steps=0, clock=clock)
    timer.start_epoch()
    run_calls(timer, clock, [(0, 0.4, 4), (0, 0.8, 4), (0, 0.2, 2)], batch_size=8)
    summary = timer.summary()
    assert summary.steps == 10
    assert summary.examples == 80
    assert summary.seconds == pytest.approx(1.4)
    # per-step times: 0.1, 0.2, 0.1 -> median 0.1
    assert summary.step_time_median == pytest.approx(0.1)
    assert summary.examples_per_second == pytest.approx(80 / 1.4)


def test_step_timer_warmup_only_in_first_epoch_and_call_straddling_it_is_skipped():
    clock = FakeClock()
    timer = StepTimer(warmup_steps=3, clock=clock)
    timer.start_epoch()
    # a call of 4 steps starts inside the 3-step warm-up: skipped whole
    run_calls(timer, clock, [(0, 9.0, 4), (0, 0.4, 4)], batch_size=1)
    assert timer.summary().steps == 4
    timer.start_epoch()
    assert not timer.in_warmup
    # the gap before the first call of an epoch is not part of that epoch's time
    run_calls(timer, clock, [(3.0, 0.2, 4)], batch_size=1)
    summary = timer.summary()
    assert summary.steps == 4 and summary.seconds == pytest.approx(0.2)


def test_step_timer_unknown_batch_size_and_empty_epoch_give_nan():
    clock = FakeClock()
    timer = StepTimer(warmup_steps=5, clock=clock)
    timer.start_epoch()
    run_calls(timer, clock, [(0, 1.0, 1)])
    empty = timer.summary()
    assert empty.steps == 0 and math.isnan(empty.examples_per_second)
    assert math.isnan(empty.step_time_median)
    timer = StepTimer(warmup_steps=0, clock=clock)
    run_calls(timer, clock, [(0, 0.5, 1)], batch_size=None)
    summary = timer.summary()
    assert math.isnan(summary.examples_per_second)
    assert summary.steps_per_second == pytest.approx(2.0)
    assert set(summary.to_logs()) == {"examples_per_second", "steps_per_second",
                                      "step_time_median", "step_time_p90"}


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_timers_reject_bad_warmup(bad):
    with pytest.raises(InvalidArgumentError, match="warmup_steps"):
        StepTimer(warmup_steps=bad)
    with pytest.raises(InvalidArgumentError, match="warmup_steps"):
        StallMeter(warmup_steps=bad)


def test_end_without_begin_and_bad_steps_are_errors():
    timer = StepTimer(warmup_steps=0, clock=FakeClock())
    with pytest.raises(InvalidArgumentError, match="without a matching begin"):
        timer.end()
    timer.begin()
    with pytest.raises(InvalidArgumentError, match="steps=0: expected an int >= 1"):
        timer.end(steps=0)
    with pytest.raises(InvalidArgumentError, match="steps=True: expected an int >= 1"):
        timer.end(steps=True)


@pytest.mark.parametrize(
    ("percent", "kind"),
    [(0.0, InputBound.NOT), (4.99, InputBound.NOT), (5.0, InputBound.MODERATE),
     (19.9, InputBound.MODERATE), (20.0, InputBound.HIGH), (100.0, InputBound.HIGH),
     (math.nan, InputBound.NOT)],
)
def test_classification_uses_profiler_thresholds(percent, kind):
    assert classify_input_bound(percent) is kind


def test_advice_names_the_fix():
    assert "tfopt.build_pipeline" in InputBound.HIGH.advice
    assert "prefetch" in InputBound.MODERATE.advice
    # a pipeline tfopt did not build: the analysis that finds its slow stage
    assert "tfopt.analyze(dataset)" in InputBound.HIGH.advice
    assert "tfopt.analyze(dataset)" in InputBound.MODERATE.advice
    assert "tfopt.optimize(dataset)" in InputBound.HIGH.advice
    assert "tfopt.analyze" not in InputBound.NOT.advice


def test_stall_meter_without_inner_waits_gaps_are_waits():
    clock = FakeClock()
    meter = StallMeter(warmup_steps=1, clock=clock)
    meter.start_epoch()
    # warm-up call, then gaps 0.3 (before the first counted call: not counted), 0.1, 0.1
    # between three counted calls of 0.2 s each
    run_calls(meter, clock, [(0, 4.0, 1), (0.3, 0.2, 1), (0.1, 0.2, 1), (0.1, 0.2, 1)])
    summary = meter.summary()
    assert summary.wait_seconds == pytest.approx(0.2)
    assert summary.gap_seconds == pytest.approx(0.2)
    assert summary.compute_seconds == pytest.approx(0.6)
    assert summary.input_bound_percent == pytest.approx(25.0)
    assert summary.kind is InputBound.HIGH


def test_stall_meter_inner_waits_are_the_wait_and_gaps_only_time():
    clock = FakeClock()
    meter = StallMeter(warmup_steps=0, clock=clock)
    meter.start_epoch()
    run_calls(meter, clock, [(0, 0.95, 4), (0.1, 0.95, 4)])
    summary = meter.summary(inner_wait_seconds=0.12)
    assert summary.wait_seconds == pytest.approx(0.12)
    assert summary.compute_seconds == pytest.approx(1.78)
    assert summary.gap_seconds == pytest.approx(0.1)
    assert summary.input_bound_percent == pytest.approx(6.0)  # 0.12 of 2.0 s
    assert summary.kind is InputBound.MODERATE
    capped = meter.summary(inner_wait_seconds=50.0)
    assert capped.compute_seconds == 0.0
    assert capped.input_bound_percent == pytest.approx(95.0)
    assert set(summary.to_logs()) == {"input_bound_percent", "input_wait_seconds",
                                      "compute_seconds", "step_gap_seconds"}


def test_stall_meter_new_epoch_resets_and_empty_epoch_is_nan():
    clock = FakeClock()
    meter = StallMeter(warmup_steps=0, clock=clock)
    meter.start_epoch()
    run_calls(meter, clock, [(0, 1.0, 1), (1.0, 1.0, 1)])
    assert meter.summary().input_bound_percent == pytest.approx(100 / 3)
    meter.start_epoch()
    assert math.isnan(meter.summary().input_bound_percent)
    run_calls(meter, clock, [(7.0, 1.0, 1)])  # the gap from the previous epoch is not counted
    assert meter.summary().input_bound_percent == 0.0


def test_epoch_start_is_the_time_to_the_first_batch_call_and_slow_needs_both_thresholds():
    clock = FakeClock()
    starts = EpochStartClock(clock)
    assert starts.end_epoch() is None  # never started
    starts.start_epoch()
    clock.tick(0.75)
    starts.batch_begins()
    clock.tick(1.0)
    starts.batch_begins()  # only the first call of the epoch counts
    clock.tick(8.25)
    start = starts.end_epoch()
    assert (start.seconds, start.epoch_seconds, start.share) == (0.75, 10.0, 0.075)
    assert start.slow
    starts.start_epoch()
    clock.tick(0.75)
    starts.batch_begins()
    clock.tick(19.25)
    assert not starts.end_epoch().slow  # 0.75 s of a 20-s epoch: under 5 %
    starts.start_epoch()
    clock.tick(0.4)
    starts.batch_begins()
    clock.tick(0.6)
    assert not starts.end_epoch().slow  # 40 % of the epoch, but under half a second
    starts.start_epoch()
    clock.tick(1.0)
    assert starts.end_epoch() is None  # an epoch without a batch call has no start to time
