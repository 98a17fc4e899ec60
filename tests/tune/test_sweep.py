"""The throughput sweep: a fake model and clock for the choice, a real model for the state."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import tune_fixtures
from tune_fixtures import assert_same_state, snapshot

from tfopt.errors import InvalidArgumentError
from tfopt.tune.results import SweepResult
from tfopt.tune.sweep import pick_batch_size, throughput_sweep

mlp = pytest.fixture(scope="module", name="mlp")(tune_fixtures.tiny_mlp)


def test_sweep_on_a_real_model_restores_the_state(mlp):
    before = snapshot(mlp)
    sweep = throughput_sweep(mlp, [8, 32], steps=3, warmup=1)
    assert [p.batch_size for p in sweep.points] == [8, 32]
    assert all(p.examples_per_second > 0 and p.steps == 3 for p in sweep.points)
    assert sweep.synthetic and sweep.chosen in (8, 32)
    assert_same_state(mlp, before)


def test_loose_sweep_arguments_get_clear_errors(mlp):
    with pytest.raises(InvalidArgumentError, match=r"batch_sizes=32: expected a list .*\[32\]"):
        throughput_sweep(mlp, 32)
    with pytest.raises(InvalidArgumentError, match="warmup=True: expected an integer >= 0"):
        throughput_sweep(mlp, [8], warmup=True)
    # numpy integers are integers
    sweep = throughput_sweep(mlp, [np.int64(4)], steps=np.int64(1), warmup=np.int32(0))
    assert sweep.chosen == 4 and isinstance(sweep.chosen, int)


# -- the sweep with a fake model and a fake clock -------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeModel:
    """train_on_batch advances the fake clock by a cost per batch size; the first call is slow."""

    # "compiled": an optimizer already built, without variables to save and restore
    optimizer = types.SimpleNamespace(built=True, variables=[])

    def __init__(self, clock, seconds_per_step):
        self.clock, self.seconds_per_step, self.seen = clock, seconds_per_step, set()

    def train_on_batch(self, x, y):
        size = len(x)
        self.clock.now += self.seconds_per_step[size] + (0 if size in self.seen else 100.0)
        self.seen.add(size)

    def get_weights(self):
        return []

    def set_weights(self, weights):
        pass


def fake_sweep(seconds_per_step, tolerance):
    clock = FakeClock()
    model = FakeModel(clock, seconds_per_step)

    def dataset_fn(batch_size):
        return iter(lambda: (np.zeros(batch_size), np.zeros(batch_size)), None)

    return throughput_sweep(model, list(seconds_per_step), dataset_fn=dataset_fn, steps=4,
                            warmup=1, tolerance=tolerance, clock=clock)


def test_sweep_picks_the_best_or_the_smallest_within_tolerance():
    # 320, 336.8 and 345.9 examples/s: 64 is within 5 % of 128, 32 is not
    timings = {32: 0.1, 64: 0.19, 128: 0.37}
    sweep = fake_sweep(timings, tolerance=0.05)
    assert [round(p.examples_per_second, 1) for p in sweep.points] == [320.0, 336.8, 345.9]
    assert [p.step_seconds for p in sweep.points] == pytest.approx([0.1, 0.19, 0.37])
    assert (sweep.best, sweep.chosen) == (128, 64)
    assert not sweep.synthetic
    assert fake_sweep(timings, tolerance=0.0).chosen == 128
    assert fake_sweep(timings, tolerance=0.1).chosen == 32
    table = sweep.describe()
    assert "best" in table and "chosen batch size: 64" in table
    assert json.loads(json.dumps(sweep.to_json()))["chosen"] == 64


def test_sweep_reports_a_dataset_that_runs_out():
    clock = FakeClock()
    model = FakeModel(clock, {8: 0.1})
    with pytest.raises(InvalidArgumentError, match=r"ran out after 3 batches.*repeat"):
        throughput_sweep(model, [8], dataset_fn=lambda b: [(np.zeros(b), np.zeros(b))] * 3,
                         steps=4, warmup=1, clock=clock)


def test_pick_batch_size():
    assert pick_batch_size({32: 900.0, 64: 980.0, 128: 1000.0}) == (128, 64)
    assert pick_batch_size({32: 1000.0, 64: 1000.0}) == (32, 32)  # a tie goes to the smaller
    with pytest.raises(InvalidArgumentError, match="tolerance"):
        pick_batch_size({32: 1.0}, tolerance=1.0)
    with pytest.raises(InvalidArgumentError, match="empty"):
        pick_batch_size({})
    assert isinstance(SweepResult((), 1, 1, 0.05), SweepResult)
