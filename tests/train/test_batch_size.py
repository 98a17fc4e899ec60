"""The batch-size finder and throughput sweep: exact search sequences, margins, state restored."""

from __future__ import annotations

import json
import math
import textwrap
import types

import numpy as np
import pytest

from tfopt.errors import InvalidArgumentError, TfoptError
from tfopt.train.batch_size import (
    BatchTrial,
    SweepResult,
    _builtin_model,
    _isolated_trial,
    apply_margin,
    find_batch_size,
    is_oom_error,
    load_model_spec,
    pick_batch_size,
    search_batch_size,
    throughput_sweep,
)


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


def test_is_oom_error_recognises_the_forms(tf):
    assert is_oom_error(tf.errors.ResourceExhaustedError(None, None, "x"))
    assert is_oom_error(tf.errors.InternalError(None, None, "Dst tensor is not initialized. OOM"))
    assert is_oom_error(tf.errors.UnknownError(None, None, "CUDA_ERROR_OUT_OF_MEMORY: out of memory"))
    assert is_oom_error(MemoryError())
    assert is_oom_error(RuntimeError("RESOURCE_EXHAUSTED: Failed to allocate 2.00GiB"))
    try:
        try:
            raise MemoryError
        except MemoryError as inner:
            raise RuntimeError("step failed") from inner
    except RuntimeError as outer:
        assert is_oom_error(outer)
    assert not is_oom_error(ValueError("no room for a zoom"))
    assert not is_oom_error(tf.errors.InvalidArgumentError(None, None, "label 12 out of range"))


# -- real trials on a tiny model ----------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp():
    model = _builtin_model("mlp", image_size=16, classes=10)
    x = np.zeros((4, 16, 16, 3), np.uint8)
    model.train_on_batch(x, np.zeros(4, np.int64))  # non-initial optimizer state to restore
    return model


def snapshot(model):
    return ([w.copy() for w in model.get_weights()],
            [v.numpy().copy() for v in model.optimizer.variables])


def assert_same_state(model, before):
    weights, optimizer_values = snapshot(model)
    assert len(weights) == len(before[0]) and len(optimizer_values) == len(before[1])
    for now, then in zip(weights + optimizer_values, before[0] + before[1], strict=True):
        np.testing.assert_array_equal(now, then)


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


def test_resident_memory_after_a_larger_trial_is_interpolated_not_counted_again(
        mlp, monkeypatch):
    # resident memory as malloc makes it: a step of b examples needs BASE + b * PER, and what
    # the largest step so far took stays resident afterwards
    from tfopt.train import batch_size as module

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
    monkeypatch.setattr(module, "_resident_bytes", lambda: state["rss"])
    monkeypatch.setattr(module, "_RssSampler", Sampler)
    budget = 200 * per
    result = find_batch_size(mlp, memory_budget=budget, max_batch_size=512, make_batch=make_batch)
    assert result.memory_measure == "rss"
    extra = module._ModelState(mlp).variable_bytes()
    for trial in result.trials:  # every trial's memory is its own, not the 256 trial's
        assert trial.peak_bytes == pytest.approx(trial.batch_size * per + extra, abs=1), trial
    assert "estimated from the trials at 128 and 256" in result.trials[-1].detail
    # the largest multiple of 8 within the budget: the memory of the search is exact
    assert result.largest_fit == (budget - extra) // per // 8 * 8


def test_uncompiled_models_and_loose_arguments_get_clear_errors(mlp):
    import keras

    raw = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    for function in (find_batch_size, lambda model: throughput_sweep(model, [8])):
        with pytest.raises(InvalidArgumentError, match="is not compiled; call model.compile"):
            function(raw)
        with pytest.raises(InvalidArgumentError, match="expected a compiled Keras model"):
            function(42)
    with pytest.raises(InvalidArgumentError, match=r"batch_sizes=32: expected a list .*\[32\]"):
        throughput_sweep(mlp, 32)
    with pytest.raises(InvalidArgumentError, match="warmup=True: expected an integer >= 0"):
        throughput_sweep(mlp, [8], warmup=True)
    # numpy integers are integers
    sweep = throughput_sweep(mlp, [np.int64(4)], steps=np.int64(1), warmup=np.int32(0))
    assert sweep.chosen == 4 and isinstance(sweep.chosen, int)
    assert search_batch_size(lambda b: b <= 24, max_batch_size=np.int64(64)).largest_fit == 24
    assert apply_margin(np.int64(296)) == 264


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


def test_sweep_on_a_real_model_restores_the_state(mlp):
    before = snapshot(mlp)
    sweep = throughput_sweep(mlp, [8, 32], steps=3, warmup=1)
    assert [p.batch_size for p in sweep.points] == [8, 32]
    assert all(p.examples_per_second > 0 and p.steps == 3 for p in sweep.points)
    assert sweep.synthetic and sweep.chosen in (8, 32)
    assert_same_state(mlp, before)


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


# -- model specs and isolated trials ----------------------------------------------------------


@pytest.fixture
def model_module(tmp_path, monkeypatch):
    (tmp_path / "tune_models.py").write_text(textwrap.dedent("""
        import os, signal
        from tfopt.train.batch_size import _builtin_model

        def build(image_size=8):
            return _builtin_model("mlp", image_size=image_size, classes=3)

        def uncompiled():
            import keras
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

        def killed():
            os.kill(os.getpid(), signal.SIGKILL)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return "tune_models"


def test_load_model_spec_errors_name_the_spec(model_module):
    assert load_model_spec(f"{model_module}:build").output_shape == (None, 3)
    with pytest.raises(InvalidArgumentError, match=r"'nocolon': expected 'module:function'"):
        load_model_spec("nocolon")
    with pytest.raises(InvalidArgumentError, match="cannot import module 'no_such_mod_xyz'"):
        load_model_spec("no_such_mod_xyz:build")
    with pytest.raises(InvalidArgumentError, match="has no function 'nope'"):
        load_model_spec(f"{model_module}:nope")
    with pytest.raises(InvalidArgumentError, match="expected a compiled Keras model"):
        load_model_spec(f"{model_module}:uncompiled")


def test_isolate_needs_a_spec(mlp):
    with pytest.raises(InvalidArgumentError, match="module:function"):
        find_batch_size(mlp, isolate=True)
    with pytest.raises(InvalidArgumentError, match="expected 'module:function'"):
        find_batch_size("not a spec", isolate=True)


def test_isolated_trials_in_fresh_processes(model_module):
    fits = _isolated_trial(f"{model_module}:build", {"image_size": 8}, 64, 1, 10 << 20, 120)
    assert fits.fits and fits.peak_bytes > 0
    over = _isolated_trial(f"{model_module}:build", {}, 64, 1, 1000, 120)
    assert not over.fits and "budget" in over.detail
    killed = _isolated_trial(f"{model_module}:killed", {}, 64, 1, None, 120)
    assert not killed.fits and "signal 9" in killed.detail
    with pytest.raises(TfoptError, match="has no function 'nope'"):
        _isolated_trial(f"{model_module}:nope", {}, 64, 1, None, 120)


def test_isolated_search(model_module):
    result = find_batch_size(f"{model_module}:build", isolate=True, memory_budget=None,
                             start=256, max_batch_size=512)
    assert sizes(result) == [256, 512] and result.capped
    assert result.memory_measure == "isolated"


def test_builtin_model_needs_eight_pixels():
    from tfopt.train.batch_size import _builtin_model

    with pytest.raises(InvalidArgumentError, match="image_size=4: expected an int of at least 8"):
        _builtin_model("cnn", image_size=4)
