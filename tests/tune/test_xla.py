"""XLA by trial: the layers that block it, batches that change shape, and a real trial on a
small model (the losses compared, both rates measured, the rule applied)."""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")


def test_layers_that_cannot_compile_are_named(tf):
    from tfopt.tune.xla import xla_blockers

    inputs = keras.Input((1,), dtype="string")
    lookup = keras.layers.StringLookup(vocabulary=["a", "b"], name="words")
    model = keras.Model(inputs, keras.layers.Dense(2)(lookup(inputs)))
    assert xla_blockers(model) == ["words"]
    plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    assert xla_blockers(plain) == []
    # tfopt's own augmentation layer compiles (tests/data/test_augment_layer.py): no blocker,
    # where Keras's RandomRotation-type layers are
    from tfopt.data.augment.layer import Augment

    images = keras.Input((32, 32, 3), dtype="uint8")
    augmented = Augment(output_size=24, random_crop=True, horizontal_flip=0.5, seed=0)(images)
    pooled = keras.layers.GlobalAveragePooling2D()(augmented)
    assert xla_blockers(keras.Model(images, keras.layers.Dense(2)(pooled))) == []


def test_axes_of_unknown_size_ragged_and_sparse_parts_are_named(tf):
    from tfopt.tune.xla import variable_axes

    fixed = tf.data.Dataset.from_tensor_slices((np.zeros((8, 5)), np.zeros(8))).batch(4)
    assert variable_axes(fixed.element_spec) == []
    lengths = tf.data.Dataset.from_tensor_slices([1, 2, 3])
    padded = lengths.map(lambda n: tf.range(n)).padded_batch(2)
    assert variable_axes((padded.element_spec, tf.TensorSpec([None]))) == ["x axis 1"]
    ragged = lengths.map(lambda n: tf.range(n)).ragged_batch(2).element_spec
    named = {"tokens": ragged, "length": tf.TensorSpec([None])}
    assert variable_axes((named, tf.TensorSpec([None]))) == ["x[tokens]: RaggedTensorSpec"]


def test_a_trial_compares_the_losses_times_both_and_keeps_xla_only_when_faster(tf):
    from tfopt.tune.xla import XLA_GAIN, trial_xla

    rng = np.random.default_rng(0)
    x = rng.random((256, 16), dtype=np.float32)
    y = (x.sum(axis=1) > 8).astype(np.int64)
    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

    def make():
        inputs = keras.Input((16,))
        hidden = keras.layers.Dense(32, activation="relu")(inputs)
        return keras.Model(inputs, keras.layers.Dense(2)(hidden))

    compiled = []

    def compile_fn(model, steps_per_execution, jit_compile):
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=steps_per_execution, jit_compile=jit_compile)
        compiled.append(jit_compile)

    trial = trial_xla(make, compile_fn, batches, 4, policy="float32", epoch_examples=256)
    assert sorted(compiled) == [False, True] and set(trial.rates) == {False, True}
    assert all(rate > 0 for rate in trial.rates.values()) and trial.loss_gap < 1e-3
    faster = trial.rates[True] >= XLA_GAIN * trial.rates[False]
    assert trial.chosen == (faster and "paid back" not in trial.reason
                            and "not in every round" not in trial.reason)
    assert trial.reason.startswith("on" if trial.chosen else "off")


def test_the_rule_caps_each_steps_rate_at_the_inputs_and_weighs_the_compile():
    from tfopt.tune.xla import choose_xla

    warm = {False: 1.0, True: 3.0}  # XLA's first call 2 s longer
    # a step 1.5x faster, the input keeping up with both, a long epoch: on
    assert choose_xla({False: 1000, True: 1500}, warm, 5000, 100_000) == (True, (
        "on: at least 1.03x the plain step's rate on this model and data and the input "
        "keeping up, the losses on one batch agreeing"))
    # the same steps, no input timed: on, said without the input
    chosen, reason = choose_xla({False: 1000, True: 1500}, warm, None, None)
    assert chosen and "input" not in reason
    # the input gives less than 1.03x the plain step: the fit waits for it either way
    chosen, reason = choose_xla({False: 1000, True: 1500}, warm, 1020, 100_000)
    assert not chosen and reason.startswith("off: the input gives 1,020 examples/s alone")
    # XLA's step too slow, whatever the input
    chosen, reason = choose_xla({False: 1000, True: 1020}, warm, 5000, 100_000)
    assert not chosen and reason.startswith("off: not 1.03x")
    # capped at the input (1100/s), the epoch saves 10,000 * (1/1000 - 1/1100) = 0.9 s, less
    # than the 2 s XLA's compile costs; uncapped it would save 3.3 s
    assert choose_xla({False: 1000, True: 1500}, warm, 1100, 10_000)[0] is False
    assert choose_xla({False: 1000, True: 1500}, warm, None, 10_000)[0] is True
    # a median 1.2x faster, but one round slower than the plain round beside it: noise
    rounds = {False: [1000, 1000, 900], True: [1200, 1250, 850]}
    chosen, reason = choose_xla({False: 1000, True: 1200}, warm, None, None, rounds)
    assert not chosen and "not in every round" in reason
    rounds[True][2] = 950
    assert choose_xla({False: 1000, True: 1200}, warm, None, None, rounds)[0] is True


def test_an_input_slower_than_the_plain_step_keeps_xla_off(tf):
    import time

    from tfopt.tune.xla import input_rate, trial_xla

    rng = np.random.default_rng(0)
    x = rng.random((512, 16), dtype=np.float32)
    y = (x.sum(axis=1) > 8).astype(np.int64)

    def slow(features, labels):  # 20 ms a batch of 64: at most 3,200 examples/s
        def wait(values):
            time.sleep(0.02)
            return values

        return tf.py_function(wait, [features], tf.float32), labels

    batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).map(slow).map(
        lambda features, labels: (tf.ensure_shape(features, [None, 16]), labels)).repeat()
    feed = input_rate(batches, count=8)
    assert 1000 < feed < 3200 * 1.05, feed
    assert input_rate(batches.take(3)) is None  # one batch after the untimed two: no rate
    # a read takes as many batches however fast they come (a count, not a time): a rerun's
    # read starts as many passes of a shuffle inside a repeat, drawing the same seeds
    pulled = []

    def counted(features, labels):
        def note(values):
            pulled.append(1)
            return values

        return tf.py_function(note, [features], tf.float32), labels

    exact = tf.data.Options()  # no prefetch added at run time: nothing read ahead
    exact.experimental_optimization.inject_prefetch = False
    exact.autotune.enabled = False
    input_rate(tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat().map(counted)
               .with_options(exact), count=5)
    assert len(pulled) == 2 + 5  # the untimed two, then the five timed

    def make():
        inputs = keras.Input((16,))
        return keras.Model(inputs, keras.layers.Dense(2)(inputs))

    def compile_fn(model, steps_per_execution, jit_compile):
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      steps_per_execution=steps_per_execution, jit_compile=jit_compile)

    held = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    trial = trial_xla(make, compile_fn, held, 4, policy="float32", feed=feed)
    # a one-layer step on batches in memory runs far above the input's rate
    assert trial.rates[False] > 2 * feed, trial.rates
    assert not trial.chosen and trial.input_rate == feed
    assert trial.reason.startswith(f"off: the input gives {feed:,.0f} examples/s alone"), \
        trial.reason
