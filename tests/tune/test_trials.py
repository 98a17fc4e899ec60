"""Trials by real training steps: in process (memory interpolated where resident memory lies)
and in fresh processes (``python -m tfopt.tune.trials``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tune_fixtures

from tfopt.errors import TfoptError
from tfopt.tune import memory
from tfopt.tune.model import ModelState
from tfopt.tune.search import find_batch_size
from tfopt.tune.trials import isolated_trial

mlp = pytest.fixture(scope="module", name="mlp")(tune_fixtures.tiny_mlp)
model_module = pytest.fixture(name="model_module")(tune_fixtures.model_module)


def test_resident_memory_after_a_larger_trial_is_interpolated_not_counted_again(
        mlp, monkeypatch):
    # resident memory as malloc makes it: a step of b examples needs BASE + b * PER, and what
    # the largest step so far took stays resident afterwards
    base, per = 100 << 20, 100_000
    state = {"rss": base, "batch": 0}

    class Sampler:
        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            state["rss"] = max(state["rss"], base + state["batch"] * per)
            self.peak = state["rss"]
            return False

    def make_batch(batch_size):
        state["batch"] = batch_size
        return np.zeros((batch_size, 16, 16, 3), np.uint8), np.zeros(batch_size, np.int64)

    monkeypatch.delenv("TF_CPU_ALLOCATOR_USE_BFC", raising=False)
    monkeypatch.setattr(memory, "resident_bytes", lambda: state["rss"])
    monkeypatch.setattr(memory, "RssSampler", Sampler)
    budget = 200 * per
    result = find_batch_size(mlp, memory_budget=budget, max_batch_size=512, make_batch=make_batch)
    assert result.memory_measure == "rss"
    extra = ModelState(mlp).variable_bytes()
    for trial in result.trials:  # every trial's memory is its own, not the 256 trial's
        assert trial.peak_bytes == pytest.approx(trial.batch_size * per + extra, abs=1), trial
    assert "estimated from the trials at 128 and 256" in result.trials[-1].detail
    # the largest multiple of 8 within the budget: the memory of the search is exact
    assert result.largest_fit == (budget - extra) // per // 8 * 8


def test_isolated_trials_in_fresh_processes(model_module):
    # four independent trial processes, each mostly TensorFlow's single-threaded start-up:
    # two at a time, one per core
    trials = {"fits": ("build", {"image_size": 8}, 10 << 20), "over": ("build", {}, 1000),
              "killed": ("killed", {}, None), "nope": ("nope", {}, None)}
    with ThreadPoolExecutor(2) as pool:
        running = {name: pool.submit(isolated_trial, f"{model_module}:{function}", kwargs, 64, 1,
                                     budget, 120)
                   for name, (function, kwargs, budget) in trials.items()}
    fits, over, killed = (running[name].result() for name in ("fits", "over", "killed"))
    assert fits.fits and fits.peak_bytes > 0
    assert not over.fits and "budget" in over.detail
    assert not killed.fits and "signal 9" in killed.detail
    with pytest.raises(TfoptError, match="has no function 'nope'"):
        running["nope"].result()
