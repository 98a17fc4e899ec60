"""The batch-size search: exact search sequences, margins, bad values, real trials."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import tune_fixtures
from tune_fixtures import assert_same_state, snapshot

from tfopt.errors import InvalidArgumentError
from tfopt.tune.results import BatchTrial
from tfopt.tune.search import apply_margin, find_batch_size, search_batch_size

mlp = pytest.fixture(scope="module", name="mlp")(tune_fixtures.tiny_mlp)
model_module = pytest.fixture(name="model_module")(tune_fixtures.model_module)


def sizes(result):
    return [trial.batch_size for trial in result.trials]


# -- the search, driven by a fake fits-hook ------------------------------------------------------


def test_search_doubles_then_bisects_in_multiples_of_8():
    result = search_batch_size(lambda b: b <= 300)
    assert sizes(result) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 384, 320, 288, 304, 296]
    assert result.largest_power_of_two == 256  # where the doubling stopped
    assert result.largest_fit == 296  # largest multiple of 8 that fits
    assert result.recommended == 264  # 0.9 * 296 = 266.4, down to a multiple of 8
    assert not result.capped
    assert [t.fits for t in result.trials][-6:] == [False, False, False, True, False, True]


def test_search_is_logarithmic():
    for limit in (37, 300, 1000, 3000):
        result = search_batch_size(lambda b, limit=limit: b <= limit, granularity=1)
        assert result.largest_fit == limit
        assert len(result.trials) <= 2 * math.ceil(math.log2(limit)) + 2


def test_search_from_a_larger_start_and_a_limit_that_is_not_a_power_of_two():
    result = search_batch_size(lambda b: b <= 70, start=16, max_batch_size=100)
    assert sizes(result) == [16, 32, 64, 100, 80, 72]
    assert result.largest_fit == 64 and result.recommended == 56


def test_search_capped_by_the_limit_keeps_it_without_margin():
    result = search_batch_size(lambda b: True, max_batch_size=4096)
    assert sizes(result) == [2 ** k for k in range(13)]
    assert result.capped and result.largest_fit == result.recommended == 4096


def test_search_when_nothing_fits_goes_down_to_one():
    result = search_batch_size(lambda b: False, start=8)
    assert sizes(result) == [8, 4, 2, 1]
    assert result.largest_fit is None and result.recommended is None
    assert "no batch size fits" in result.describe()


def test_oom_exceptions_count_as_does_not_fit_and_others_propagate(tf):
    def fits(batch_size):
        if batch_size > 100:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
        return True

    result = search_batch_size(fits)
    assert result.largest_fit == 96
    assert "ResourceExhaustedError" in result.trials[-2].detail or not result.trials[-2].fits

    def broken(batch_size):
        raise ValueError("shapes do not match")

    with pytest.raises(ValueError, match="shapes"):
        search_batch_size(broken)


def test_hook_may_return_trials_and_on_trial_sees_each():
    seen = []
    result = search_batch_size(lambda b: BatchTrial(b, b <= 4, peak_bytes=b * 10, detail="x"),
                               max_batch_size=16, on_trial=seen.append)
    assert [t.batch_size for t in seen] == sizes(result) == [1, 2, 4, 8, 6, 5]
    assert result.largest_fit == 4 and result.trials[0].peak_bytes == 10


@pytest.mark.parametrize(("largest", "margin", "expected"), [
    (296, 0.9, 264), (256, 0.9, 224), (80, 0.9, 72), (300, 1.0, 296), (8, 0.9, 7), (5, 0.9, 4),
    (1, 0.9, 1), (4096, 0.5, 2048),
])
def test_margin_rounds_down_to_a_multiple_of_8(largest, margin, expected):
    assert apply_margin(largest, margin) == expected


@pytest.mark.parametrize("kwargs", [{"margin": 0}, {"margin": 1.5}, {"start": 0},
                                    {"max_batch_size": -1}, {"start": 64, "max_batch_size": 32},
                                    {"granularity": 0}])
def test_search_rejects_bad_values_before_any_trial(kwargs):
    calls = []
    with pytest.raises(InvalidArgumentError):
        search_batch_size(calls.append, **kwargs)
    assert calls == []


def test_numpy_integers_are_integers():
    assert search_batch_size(lambda b: b <= 24, max_batch_size=np.int64(64)).largest_fit == 24
    assert apply_margin(np.int64(296)) == 264


def test_the_search_runs_without_tensorflow():
    code = ("import sys; from tfopt.tune.search import search_batch_size; "
            "print(search_batch_size(lambda b: b <= 300).recommended, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["264", "False"]


# -- real trials on a tiny model ----------------------------------------------------------------


def test_real_trials_respect_the_budget_and_restore_the_state(mlp):
    before = snapshot(mlp)
    # the float32 input alone is 12.6 MB at batch 4096 (16x16x3): a budget of 6 MB stops the
    # search below it, whichever way memory is measured (allocator or resident memory)
    budget = 6_000_000
    result = find_batch_size(mlp, memory_budget=budget, max_batch_size=4096)
    assert result.memory_measure in ("tf-allocator", "rss")
    assert 1 <= result.largest_fit < 4096 and not result.capped
    for trial in result.trials:
        assert trial.peak_bytes is not None
        assert trial.fits == (trial.peak_bytes <= budget), trial
    assert result.recommended == apply_margin(result.largest_fit)
    assert_same_state(mlp, before)
    assert "random data" in " ".join(result.notes)
    json.dumps(result.to_json())


def test_real_trials_without_budget_on_cpu_only_stop_at_the_limit(mlp):
    before = snapshot(mlp)
    calls = []

    def make_batch(batch_size):
        calls.append(batch_size)
        return np.zeros((batch_size, 16, 16, 3), np.uint8), np.zeros(batch_size, np.int64)

    result = find_batch_size(mlp, memory_budget=None, max_batch_size=32, make_batch=make_batch)
    assert calls == [1, 1, 2, 4, 8, 16, 32]  # a warm-up step first
    assert result.capped and result.recommended == 32
    assert_same_state(mlp, before)


def test_isolate_needs_a_spec(mlp):
    with pytest.raises(InvalidArgumentError, match="module:function"):
        find_batch_size(mlp, isolate=True)
    with pytest.raises(InvalidArgumentError, match="expected 'module:function'"):
        find_batch_size("not a spec", isolate=True)


def test_isolated_search(model_module):
    result = find_batch_size(f"{model_module}:build", isolate=True, memory_budget=None,
                             start=256, max_batch_size=512)
    assert sizes(result) == [256, 512] and result.capped
    assert result.memory_measure == "isolated"
