"""tfopt profile --try's input trial on real fits: the script's input against tfopt's, each
kind of source, and the inputs it has nothing to try for."""

import keras
import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

from tfopt.profile.input_trial import try_input


def fit(model, **arguments):
    return model.fit(**arguments)


@pytest.fixture()
def model():
    keras.utils.set_random_seed(0)
    made = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"),
                             keras.layers.Dense(1)])
    made.compile(optimizer="adam", loss="mse")
    return made


def test_arrays_are_timed_against_run_s_in_memory_pipeline(model):
    x = np.random.default_rng(0).normal(size=(4096, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    trial = try_input(fit, model, {"x": x, "y": y, "batch_size": 64, "validation_split": 0.1},
                      "arrays", 0.5)
    assert trial.ratio is not None and trial.ratio > 0 and trial.reason == ""
    assert "in-memory tf.data pipeline" in trial.changes[0]


def test_a_dataframe_is_timed_as_its_matrix(model):
    frame = pd.DataFrame(np.random.default_rng(1).normal(size=(2048, 8)).astype("float32"),
                         columns=[f"c{i}" for i in range(8)])
    trial = try_input(fit, model, {"x": frame, "y": frame.sum(axis=1).to_numpy(),
                                   "batch_size": 32}, "dataframe", 0.5)
    assert trial.ratio is not None and trial.ratio > 0


def test_a_slow_sequential_map_is_rewritten_and_timed(model):
    def slow(x, y):  # a map whose calls cost time: worth parallel calls on 2 cores
        for _ in range(40):
            x = tf.sin(x) + 0.001 * tf.linalg.matmul(tf.ones((8, 8)), tf.reshape(x, (8, 1)))[:, 0]
        return x, y

    rows = np.random.default_rng(2).normal(size=(2048, 8)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((rows, rows[:, :1])).map(slow).batch(32)
    trial = try_input(fit, model, {"x": dataset}, "dataset", 1.0)
    assert trial.changes, trial.reason  # what optimize changed, named
    assert trial.ratio is not None and trial.ratio > 0


def test_inputs_without_a_rewrite_say_why(model):
    def batches():
        while True:
            yield np.zeros((8, 8), "float32"), np.zeros((8, 1), "float32")

    trial = try_input(fit, model, {"x": batches()}, "generator", 0.5)
    assert trial.ratio is None and "generator" in trial.reason
    trial = try_input(fit, model, {"x": np.zeros((64, 8), "float32")}, "arrays", 0.5)
    assert trial.ratio is None and "without y" in trial.reason


def test_a_long_step_is_timed_in_short_rounds_of_whole_calls():
    from tfopt.profile.trials import TRIAL_STEPS, trial_steps

    assert trial_steps(0.001) == TRIAL_STEPS
    assert trial_steps(0.5) == 4  # about 2 s a round
    assert trial_steps(0.5, whole=16) == 16 and trial_steps(0.001, whole=16) == 32
    assert trial_steps(30.0) == 1


def test_a_fit_far_slower_than_its_step_is_input_bound_whatever_the_rounds_spread():
    from tfopt.profile.measure import Rate
    from tfopt.profile.profile import _noise

    def rates(*values):
        return [Rate(value, 10, 1.0, 0.01, "steps") for value in values]

    # the step alone 400-1000 examples/s (a wide spread), the fit 10-12 batches/s of 4: 48/s
    assert _noise(rates(10, 12), rates(400, 1000), batch=4) == 0.0
    # one round alone slowed by a pause of the machine's does not hide it
    assert _noise(rates(10, 12), rates(30, 400, 1000), batch=4) == 0.0
    # rounds that overlap: the spread is the noise a share must exceed
    assert _noise(rates(10, 12), rates(45, 60), batch=4) == pytest.approx((60 - 45) / 45)
    # a fit 1.6x slower than its step, one round alone far slower than the others (seen:
    # a 46 % wait hidden behind a 46 % spread): the rounds stand apart, one of each aside
    assert _noise(rates(1810, 1840, 1935), rates(9018, 11899, 13078), batch=4) == 0.0
    assert _noise(rates(1810, 1840, 2900), rates(9018, 11899, 13078), batch=4) == 0.0
    # ...but not where the slow round alone is slower than the fit's median round
    assert _noise(rates(1810, 1840, 1935), rates(7000, 11899, 13078), batch=4) == \
        pytest.approx((13078 - 7000) / 11899)
    # ...where the input alone is slow enough to make the step wait (6,900 examples/s: the
    # sequential map's), not where it is 80 times the step's rate (seen: a model vectorising
    # its text, a 13 % "wait" within a 36 % spread)
    assert _noise(rates(1810, 1840, 1935), rates(9018, 11899, 13078), batch=4,
                  input_rate=6900) == 0.0
    assert _noise(rates(1810, 1840, 1935), rates(9018, 11899, 13078), batch=4,
                  input_rate=911960) == pytest.approx((13078 - 9018) / 11899)
    # an input alone no faster than the step alone makes it wait, whatever the rounds (seen:
    # the sequential map's input 9,709 examples/s, its step 12,300, the rounds overlapping)
    assert _noise(rates(1810, 1840, 3000), rates(7000, 11899, 13078), batch=4,
                  input_rate=9709) == 0.0
    assert _noise(rates(1810, 1840, 3000), rates(7000, 11899, 13078), batch=4,
                  input_rate=12000) == pytest.approx((3000 - 1810) / 1840)
    # nor where the fastest round with the input beats the median round alone
    assert _noise(rates(1810, 1840, 3000), rates(9018, 11899, 13078), batch=4) == \
        pytest.approx((3000 - 1810) / 1840)
