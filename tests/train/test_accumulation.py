"""Gradient accumulation: k micro-batches equal one big batch; schedules count real updates."""

from __future__ import annotations

import numpy as np
import pytest

from tfopt.errors import InvalidArgumentError
from tfopt.train.accumulation import (
    AccumulationPlan,
    UpdateStepSchedule,
    configure_accumulation,
    make_optimizer,
)

BATCH = 8
STEPS = 4


@pytest.fixture
def keras(tf):
    import keras

    keras.mixed_precision.set_global_policy("float32")
    try:
        yield keras
    finally:
        keras.mixed_precision.set_global_policy("float32")


def data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 5)).astype("float32")
    y = (x @ rng.normal(size=(5, 2)) + 0.1 * rng.normal(size=(n, 2))).astype("float32")
    return x, y


def model_with(keras, optimizer):
    # the same initial weights every call; no batch norm, so a micro-batch's gradient depends on
    # its own examples only
    keras.utils.set_random_seed(7)
    model = keras.Sequential(
        [keras.Input((5,)), keras.layers.Dense(6, activation="tanh"), keras.layers.Dense(2)]
    )
    model.compile(optimizer, "mse")
    return model


def largest_change(weights, other):
    return max(float(np.abs(u - v).max()) for u, v in zip(weights, other, strict=True))


def max_diff(a, b):
    return largest_change(a.get_weights(), b.get_weights())


def test_plan_from_sizes():
    plan = AccumulationPlan.from_sizes(256, 64)
    assert (plan.steps, plan.effective_batch_size, plan.batch_size) == (4, 256, 64)
    assert AccumulationPlan.from_sizes(64, 64).steps == 1
    assert plan.replace(steps=2, effective_batch_size=128).effective_batch_size == 128


def test_plan_rejects_a_batch_that_does_not_divide():
    with pytest.raises(InvalidArgumentError) as info:
        AccumulationPlan.from_sizes(100, 64)
    message = str(info.value)
    assert "effective_batch_size=100" in message and "batch_size=64" in message
    assert "64 or 128" in message  # the nearest valid effective sizes
    with pytest.raises(InvalidArgumentError, match="effective_batch_size=32 is not a multiple"):
        AccumulationPlan.from_sizes(32, 64)


@pytest.mark.parametrize("bad", [0, -8, 8.0, True, "8", None])
def test_plan_rejects_non_positive_integers(bad):
    with pytest.raises(InvalidArgumentError, match="batch_size=.*: expected a positive integer"):
        AccumulationPlan.from_sizes(64, bad)


def test_plan_invariant():
    with pytest.raises(InvalidArgumentError, match="3 \\* 8 != 32"):
        AccumulationPlan(3, 32, 8)


def test_configure_sets_keras_accumulation(keras):
    optimizer = keras.optimizers.SGD(0.1)
    plan = configure_accumulation(optimizer, 32, 8)
    assert plan == AccumulationPlan(4, 32, 8)
    assert optimizer.gradient_accumulation_steps == 4
    # one micro-batch per update: Keras wants None, not 1
    assert configure_accumulation(optimizer, 8, 8).steps == 1
    assert optimizer.gradient_accumulation_steps is None


def test_configure_rejects_non_optimizers(keras):
    with pytest.raises(InvalidArgumentError, match="make_optimizer"):
        configure_accumulation("adam", 32, 8)


def test_configure_after_compile_before_fit_works_and_after_fit_fails(keras):
    x, y = data()
    optimizer = keras.optimizers.SGD(0.1)
    model = model_with(keras, optimizer)  # compile does not build the optimizer
    configure_accumulation(optimizer, 32, 8)
    model.train_on_batch(x[:8], y[:8])
    assert int(optimizer.iterations) == 0  # a micro-batch is not an update
    built = keras.optimizers.SGD(0.1)
    model_with(keras, built).train_on_batch(x[:8], y[:8])
    with pytest.raises(InvalidArgumentError, match="already built without gradient accumulation"):
        configure_accumulation(built, 32, 8)


def test_k_micro_batches_equal_one_big_batch(keras):
    x, y = data(n=64)
    initial = model_with(keras, keras.optimizers.SGD(0.1))
    big = model_with(keras, keras.optimizers.SGD(0.1))
    big.fit(x, y, batch_size=BATCH * STEPS, epochs=1, shuffle=False, verbose=0)  # 2 updates
    optimizer = keras.optimizers.SGD(0.1)
    configure_accumulation(optimizer, BATCH * STEPS, BATCH)
    small = model_with(keras, optimizer)
    small.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)  # 8 micro-batches
    assert int(optimizer.iterations) == 2
    assert max_diff(small, initial) > 1e-2  # training moved the weights
    assert max_diff(small, big) < 1e-5
    # without accumulation the same 8 small batches make 8 updates: visibly different weights
    plain = model_with(keras, keras.optimizers.SGD(0.1))
    plain.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    assert max_diff(plain, big) > 1e-2


def test_train_on_batch_with_momentum(keras):
    x, y = data(n=32)
    big = model_with(keras, keras.optimizers.SGD(0.05, momentum=0.9))
    small = model_with(keras, make_optimizer("sgd", 32, 8, learning_rate=0.05, momentum=0.9))
    for _ in range(3):  # 3 updates, so momentum carries over between them
        big.train_on_batch(x, y)
        for i in range(4):
            small.train_on_batch(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])
    assert max_diff(small, big) < 1e-5


def test_schedule_steps_in_real_updates(keras):
    # rate 0.1 for update 0, 0 from update 1 on
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([0], [0.1, 0.0])
    x, y = data(n=64)
    optimizer = keras.optimizers.SGD(schedule)
    configure_accumulation(optimizer, 32, 8)
    assert isinstance(optimizer._learning_rate, UpdateStepSchedule)
    model = model_with(keras, optimizer)
    initial = [w.copy() for w in model.get_weights()]
    for i in range(4):
        model.train_on_batch(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])
    after_one = [w.copy() for w in model.get_weights()]
    # Keras alone would call the schedule with micro-step 3 here, get 0.0 and never move
    assert largest_change(after_one, initial) > 1e-3
    assert float(optimizer.learning_rate) == 0.0  # the schedule is at update 1 now
    for i in range(4, 8):
        model.train_on_batch(x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8])
    for a, b in zip(model.get_weights(), after_one, strict=True):
        np.testing.assert_array_equal(a, b)


def test_decaying_schedule_matches_the_big_batch_run(keras):
    def schedule():
        return keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=1, decay_rate=0.5)

    x, y = data(n=96)
    big = model_with(keras, keras.optimizers.SGD(schedule()))
    big.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)  # rates 0.2, 0.1, 0.05
    small = model_with(keras, make_optimizer(keras.optimizers.SGD, 32, 8,
                                             learning_rate=schedule()))
    small.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert max_diff(small, big) < 1e-5
    assert float(small.optimizer.learning_rate) == pytest.approx(0.2 * 0.5**3)


def test_reconfiguring_wraps_the_schedule_once(keras):
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    optimizer = keras.optimizers.SGD(schedule)
    configure_accumulation(optimizer, 32, 8)
    configure_accumulation(optimizer, 16, 8)
    assert optimizer._learning_rate.schedule is schedule and optimizer._learning_rate.steps == 2
    configure_accumulation(optimizer, 8, 8)
    assert optimizer._learning_rate is schedule  # no accumulation: the user's schedule as it was


def test_wrapped_schedule_survives_serialisation(keras):
    optimizer = make_optimizer(
        "adam", 64, 16, learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)
    )
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert restored.gradient_accumulation_steps == 4
    assert isinstance(restored._learning_rate, UpdateStepSchedule)
    assert restored._learning_rate.steps == 4
    assert float(restored._learning_rate(np.int64(9))) == pytest.approx(0.1 * 0.5 ** (2 / 10))


def test_make_optimizer(keras):
    adam = make_optimizer("adam", 512, 128, learning_rate=1e-3)
    assert isinstance(adam, keras.optimizers.Adam)
    assert adam.gradient_accumulation_steps == 4
    assert float(adam.learning_rate) == pytest.approx(1e-3)
    assert make_optimizer(keras.optimizers.RMSprop, 128, 128).gradient_accumulation_steps is None
    with pytest.raises(InvalidArgumentError, match="unknown optimizer name 'adamm'"):
        make_optimizer("adamm", 64, 16)
    with pytest.raises(InvalidArgumentError, match="do not pass it"):
        make_optimizer("sgd", 64, 16, gradient_accumulation_steps=2)
    with pytest.raises(InvalidArgumentError, match="not a multiple"):
        make_optimizer("sgd", 60, 16)
    with pytest.raises(InvalidArgumentError, match="Optimizer subclass or a name"):
        make_optimizer(int, 64, 16)


def test_accumulation_under_mixed_float16_loss_scaling(keras):
    x, y = data(n=32)
    keras.mixed_precision.set_global_policy("mixed_float16")
    optimizer = keras.optimizers.SGD(0.1)
    model = model_with(keras, optimizer)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    # configured through the wrapper: the inner optimizer accumulates
    configure_accumulation(model.optimizer, 32, 8)
    assert optimizer.gradient_accumulation_steps == 4
    before = [w.copy() for w in model.get_weights()]
    # a micro-batch whose scaled gradients overflow float16 is skipped by the LossScaleOptimizer
    # (it halves the scale) and not counted by the inner optimizer, so the update comes after
    # 4 finite micro-batches, which may take more than 4 calls (here the second overflows)
    for call in range(12):
        start = call % 4 * 8
        model.train_on_batch(x[start:start + 8], y[start:start + 8])
        if int(optimizer._iterations) == 4:
            break
        for a, b in zip(model.get_weights(), before, strict=True):
            np.testing.assert_array_equal(a, b)  # fewer than 4 counted micro-batches: no update
    assert int(optimizer._iterations) == 4 and int(optimizer.iterations) == 1
    assert largest_change(model.get_weights(), before) > 1e-3
