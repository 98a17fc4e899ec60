"""tfopt.Run on what model.fit takes besides TFRecord shards: NumPy arrays, a pandas DataFrame and
a tf.data.Dataset: real fits, the validation each brings, the trial on real batches, a resumed
run that ends with an uninterrupted run's weights, and bad input refused before training."""

from __future__ import annotations

import numpy as np
import pytest

from tfopt.errors import InvalidArgumentError

keras = pytest.importorskip("keras")


def signal(n=320, features=6, seed=0):
    """Examples whose class is whether their features sum above the middle: learnable."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, features), dtype=np.float32)
    y = (x.sum(axis=1) > features / 2).astype(np.int64)
    return x, y


def classifier(features=6, inputs=None):
    if inputs is None:
        inputs = [keras.Input((features,))]
        joined = inputs[0]
    else:
        joined = keras.layers.Concatenate()([keras.layers.Reshape((1,))(i) for i in inputs])
    hidden = keras.layers.Dense(16, activation="relu")(joined)
    return keras.Model(inputs, keras.layers.Dense(2)(hidden))


def compile_and_fit(run, epochs=3, model_fn=classifier, **fit):
    with run.scope():
        model = model_fn()
    run.compile(model, keras.optimizers.Adam(0.01),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
    return model, run.fit(model, epochs=epochs, verbose=0, **fit)


def test_arrays_train_with_a_held_out_fraction_as_keras_validation_split(tf, tmp_path):
    import tfopt

    x, y = signal()
    run = tfopt.Run((x, y), batch_size=32, validation=0.25, seed=0, steps_per_execution=1)
    assert run.steps_per_epoch == 8  # 240 of 320 examples, 32 a step
    text = run.describe()
    assert "tfopt.Run on tuple(float32[320, 6], int64[320])[0:240]" in text
    assert "the last 0.25 of the examples (80)" in text and "arrays in memory" in text
    assert "0.1" not in text.split("data")[0]  # no value of the arrays anywhere
    _, history = compile_and_fit(run, epochs=20)
    assert history.history["val_accuracy"][-1] > 0.8  # learnt, evaluated on the held-out 80
    assert len(history.history["loss"]) == 20


def test_a_dataframe_reaches_named_inputs_or_one_matrix(tf):
    pd = pytest.importorskip("pandas")
    import tfopt

    x, y = signal(features=3)
    frame = pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "target": y})
    run = tfopt.Run(frame, label="target", batch_size=32, validation=0.2, seed=1,
                    steps_per_execution=1)
    assert "3 feature columns" in run.describe()
    _, history = compile_and_fit(run, epochs=6, model_fn=lambda: classifier(3))
    assert history.history["val_accuracy"][-1] > 0.7
    given = tfopt.Run(frame[:256], label="target", batch_size=32, validation=frame[256:],
                      steps_per_execution=1)  # a DataFrame as validation= (not compared by ==)
    assert "the given DataFrame[64 rows x 4 columns]" in given.describe()
    named = tfopt.Run(frame, label="target", batch_size=32, seed=1, steps_per_execution=1)
    inputs = [keras.Input((), name=name) for name in ("c", "a", "b")]
    _, history = compile_and_fit(named, epochs=2, model_fn=lambda: classifier(inputs=inputs))
    assert len(history.history["loss"]) == 2


def test_a_dataset_keeps_its_batches_or_is_batched_and_validates_on_the_given_one(tf):
    import tfopt

    x, y = signal()
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    val = tf.data.Dataset.from_tensor_slices(signal(64, seed=1)).batch(16)
    batched = tfopt.Run(examples.shuffle(320, seed=0).batch(40), validation=val,
                        steps_per_execution=1)
    assert batched.plan.global_batch is None and batched.steps_per_epoch == 8
    assert "its own batches kept as the global batch" in batched.describe()
    _, history = compile_and_fit(batched, epochs=2)
    assert "val_loss" in history.history
    unbatched = tfopt.Run(examples, batch_size=64, steps_per_execution=1)
    assert unbatched.plan.global_batch == 64 and unbatched.steps_per_epoch == 5
    assert "batched here to the global batch 64" in unbatched.describe()
    compile_and_fit(unbatched, epochs=1)


def test_epochs_of_a_dataset_are_its_passes_as_in_model_fit(tf):
    """A dataset of 6 batches at 4 steps per call: each epoch must still be one pass (Keras
    would train 8 batches an epoch off a stream that goes on), so the losses are Keras's."""
    import tfopt

    dataset = tf.data.Dataset.from_tensor_slices(signal(240)).batch(40)

    def fit_losses(fit):
        keras.utils.set_random_seed(3)
        return fit()

    def plain():
        model = classifier()
        model.compile(keras.optimizers.Adam(0.01),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model.fit(dataset, epochs=3, verbose=0).history["loss"]

    def through_run():
        run = tfopt.Run(dataset, validation=None, steps_per_execution=4, precision="float32")
        assert run.plan.steps_per_execution == 3 and "divides the epoch's 6 steps" in \
            run.describe()
        return compile_and_fit(run, epochs=3)[1].history["loss"]

    np.testing.assert_allclose(fit_losses(through_run), fit_losses(plain), rtol=1e-5)


def test_the_trial_times_the_users_model_on_its_own_batches_and_is_kept(tf, tmp_path):
    import tfopt

    x, y = signal(170 * 8)
    run = tfopt.Run((x, y), batch_size=8, workdir=tmp_path / "run", seed=0)
    assert run.plan.spe_source.value == "trial"
    model, _ = compile_and_fit(run, epochs=1)
    assert set(run.steps_per_execution_trial) == {1, 4, 16}
    # the trial's choice (1, 4 or 16) lowered to divide the epoch's 170 steps
    assert model.steps_per_execution in (1, 2, 10)
    # then XLA, timed at that steps_per_execution: both rates, the choice compiled
    assert set(run.xla_trial) == {False, True} and isinstance(run.plan.jit_compile, bool)
    assert model.jit_compile == run.plan.jit_compile
    assert "examples/s with XLA" in run.describe()
    assert ", the input alone " in run.plan.xla_reason  # the arrays' own rate, timed
    again = tfopt.Run((x, y), batch_size=8, workdir=tmp_path / "run", seed=0)
    again_model, _ = compile_and_fit(again, epochs=1)
    assert again.plan.spe_source.value == "cached"
    assert again.plan.jit_compile == run.plan.jit_compile == again_model.jit_compile
    assert "from the workdir" in again.plan.xla_reason


def test_xla_stays_off_for_layers_it_cannot_compile_and_batches_that_change_shape(tf):
    import tfopt

    x, y = signal(170 * 8)

    def with_lookup():
        inputs = keras.Input((6,))
        codes = keras.layers.IntegerLookup(vocabulary=[0, 1], name="codes")(
            keras.layers.Lambda(lambda v: keras.ops.cast(v > 0.5, "int64"))(inputs))
        joined = keras.layers.Concatenate()([inputs, keras.ops.cast(codes, "float32")])
        return keras.Model(inputs, keras.layers.Dense(2)(joined))

    blocked = tfopt.Run((x, y), batch_size=8, steps_per_execution=1)
    compile_and_fit(blocked, epochs=1, model_fn=with_lookup)
    assert blocked.plan.jit_compile is False and "'codes'" in blocked.plan.xla_reason
    # sequences padded per batch: a shape for each length, so XLA would compile each
    lengths = np.arange(170 * 8) // 8 % 5 + 1  # each batch of 8 its own length
    sequences = tf.data.Dataset.from_tensor_slices(lengths).map(
        lambda n: (tf.ones([n, 6]), n % 2)).padded_batch(8)
    varying = tfopt.Run(sequences, validation=None, steps_per_execution=1)

    def pooled():
        inputs = keras.Input((None, 6))
        pooled = keras.layers.GlobalAveragePooling1D()(inputs)
        return keras.Model(inputs, keras.layers.Dense(2)(pooled))

    compile_and_fit(varying, epochs=1, model_fn=pooled)
    assert varying.plan.jit_compile is False and "x axis 1" in varying.plan.xla_reason


def test_a_trial_asked_for_times_xla_on_a_short_epoch_unless_the_model_cannot_be_copied(tf):
    import tfopt

    x, y = signal(64)  # 8 steps an epoch: too short for a trial unless asked for
    asked = tfopt.Run((x, y), batch_size=8, validation=None, jit_compile="trial")
    compile_and_fit(asked, epochs=1)
    assert set(asked.xla_trial) == {False, True} and all(asked.xla_trial.values())
    assert asked.plan.jit_compile in (True, False) and "examples/s with XLA" in asked.plan.xla_reason

    class Scale(keras.layers.Layer):  # a config that does not rebuild it
        def __init__(self, factor, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def get_config(self):  # leaves its own argument out
            return {"name": self.name}

        def call(self, inputs):
            return inputs * self.factor

    def custom():
        inputs = keras.Input((6,))
        return keras.Model(inputs, keras.layers.Dense(2)(Scale(2.0)(inputs)))

    uncopied = tfopt.Run((x, y), batch_size=8, validation=None, jit_compile="trial",
                         steps_per_execution="auto")
    _, history = compile_and_fit(uncopied, epochs=1, model_fn=custom)
    assert len(history.history["loss"]) == 1  # trained all the same
    assert uncopied.plan.jit_compile == "auto" and not uncopied.xla_trial
    assert "clone_model cannot copy it (TypeError" in uncopied.plan.xla_reason
    assert "get_config" in uncopied.describe()


class Interrupt(Exception):
    pass


class StopAfter(keras.callbacks.Callback):
    def __init__(self, epoch):
        super().__init__()
        self.epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.epoch:
            raise Interrupt


# A dataset of known length is one repeated stream: a resumed run draws the seeds of the passes
# done (opening an iterator per pass) and goes on with the same orders.
@pytest.mark.parametrize("kind", ["arrays", "dataset"])
def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tf, tmp_path, kind):
    import tfopt

    x, y = signal()

    def source():
        if kind == "arrays":
            return (x, y)
        return (tf.data.Dataset.from_tensor_slices((x, y))
                .shuffle(320, seed=5, reshuffle_each_iteration=True).batch(32))

    def run(workdir, stop=None):
        keras.utils.set_random_seed(0)
        made = tfopt.Run(source(), batch_size=32 if kind == "arrays" else None,
                         workdir=workdir, seed=0, steps_per_execution=1, precision="float32")
        extra = [StopAfter(stop)] if stop else []
        model, _ = compile_and_fit(made, epochs=4, callbacks=extra)
        return model

    reference = run(tmp_path / "whole").get_weights()
    with pytest.raises(Interrupt):
        run(tmp_path / "cut", stop=2)
    resumed = run(tmp_path / "cut")
    for a, b in zip(reference, resumed.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("source", "options", "match"), [
    (lambda tf: (np.zeros((10, 2)), np.zeros(9)), {}, "arrays of different lengths"),
    (lambda tf: (np.zeros((10, 2)), np.zeros(10)), {"validation": 1.5},
     "validation=1.5: expected a fraction"),
    (lambda tf: (np.zeros((10, 2)), np.zeros(10)), {"label": "y"}, "label='y': only for a "
                                                                   "DataFrame"),
    (lambda tf: tf.data.Dataset.range(5), {}, "expected \\(x, y\\) or \\(x, y, sample_weight"),
    (lambda tf: tf.data.Dataset.from_tensor_slices((np.zeros((4, 2)), np.zeros(4))),
     {"validation": 0.5}, "a fraction is held out of arrays or a DataFrame"),
])
def test_bad_input_is_refused_before_training_and_nothing_is_written(tf, tmp_path, source,
                                                                     options, match):
    import tfopt

    with pytest.raises(InvalidArgumentError, match=match):
        tfopt.Run(source(tf), workdir=tmp_path / "run", **options)
    assert not (tmp_path / "run").exists()


def test_an_endless_dataset_needs_steps_per_epoch_and_a_dataframe_numeric_columns(tf, tmp_path):
    pd = pytest.importorskip("pandas")
    import tfopt

    x, y = signal(64)
    endless = tfopt.Run(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16),
                        steps_per_execution=1)
    with pytest.raises(InvalidArgumentError, match="repeats forever; pass run.fit\\(model, "
                                                   "epochs, steps_per_epoch=N\\)"):
        compile_and_fit(endless, epochs=1)
    _, history = compile_and_fit(endless, epochs=1, steps_per_epoch=3)
    assert len(history.history["loss"]) == 1
    frame = pd.DataFrame({"a": x[:, 0], "city": ["x"] * 64, "target": y})
    run = tfopt.Run(frame, label="target", workdir=tmp_path / "df", steps_per_execution=1)
    with pytest.raises(InvalidArgumentError, match="'city' are not numeric"):
        compile_and_fit(run, epochs=1, model_fn=lambda: classifier(1))
    assert not (tmp_path / "df").exists()


def test_a_layer_failing_under_the_mixed_policy_is_told_how_to_build_without_it(tf):
    import tfopt

    x, y = signal(64)
    run = tfopt.Run((x, y), batch_size=16, precision="mixed_bfloat16", steps_per_execution=1)

    class Offset(keras.layers.Layer):  # float32 arithmetic on the input it is given in bfloat16
        def call(self, inputs):
            return inputs + tf.ones_like(inputs, dtype=tf.float32)

    with run.scope():
        # Keras alone fails here under a mixed policy; the scope adapts in float32
        normalizer = keras.layers.Normalization()
        normalizer.adapt(tf.data.Dataset.from_tensor_slices(x).batch(16))
        assert normalizer.compute_dtype == "bfloat16"
    with pytest.raises(Exception) as raised, run.scope():
        Offset()(x[:2])
    notes = "\n".join(getattr(raised.value, "__notes__", []))
    assert "built under the mixed_bfloat16 policy" in notes
    assert "precision='float32'" in notes


def test_compile_keeps_a_half_precision_output_in_float32_and_says_so(tf):
    import tfopt

    x, y = signal(64)
    run = tfopt.Run((x, y), batch_size=16, precision="mixed_bfloat16", steps_per_execution=1)
    with run.scope():
        inputs = keras.Input((6,))
        hidden = keras.layers.Dense(8, activation="relu", name="hidden")(inputs)
        model = keras.Model(inputs, keras.layers.Dense(2, activation="softmax", name="pred")(hidden))
    assert str(model(x[:2]).dtype) == "<dtype: 'bfloat16'>"
    run.compile(model, "adam", "sparse_categorical_crossentropy")
    assert str(model(x[:2]).dtype) == "<dtype: 'float32'>"
    assert model.get_layer("hidden").compute_dtype == "bfloat16"  # the rest stays mixed
    assert run.precision_changes == ["output layer 'pred' computes in float32 (built in "
                                     "bfloat16): the loss reads full-precision outputs"]
    assert run.precision_warnings == []
    run.fit(model, epochs=1, verbose=0)


def test_the_trial_keeps_a_half_precision_policy_only_where_it_pays_on_this_model(tf, tmp_path):
    import tfopt

    x, y = signal(170 * 8)
    run = tfopt.Run((x, y), batch_size=8, workdir=tmp_path / "run", seed=0)
    suggested = run.plan.policy
    if suggested == "float32":
        pytest.skip("this machine computes in float32 already: nothing for the trial to weigh")
    model, _ = compile_and_fit(run, epochs=1)
    rates = run.precision_trial
    assert set(rates) == {suggested, "float32"}
    chosen = suggested if rates[suggested] >= 1.1 * rates["float32"] else "float32"
    assert run.plan.policy == chosen
    assert {layer.compute_dtype for layer in model.layers[:-1]} == {
        "float32" if chosen == "float32" else suggested.removeprefix("mixed_")}
    assert model.layers[-1].compute_dtype == "float32"  # the output, whatever the choice
    again = tfopt.Run((x, y), batch_size=8, workdir=tmp_path / "run", seed=0)
    model, _ = compile_and_fit(again, epochs=1)  # the earlier trial's choice, not a new trial
    assert again.plan.spe_source.value == "cached" and again.plan.policy == chosen
    assert again.precision_trial == pytest.approx(rates)


def test_a_recurrent_model_no_trial_times_computes_in_float32_on_a_cpu(tf):
    import tfopt

    rng = np.random.default_rng(0)
    x = rng.random((96, 10, 3), dtype=np.float32)
    y = (x[:, :, 0].sum(axis=1) > 5).astype(np.int64)
    run = tfopt.Run((x, y), batch_size=16)  # 6 steps an epoch: no trial fits
    if run.plan.policy == "float32":
        pytest.skip("this machine's rule gives float32: nothing to keep out of half precision")

    def recurrent():
        inputs = keras.Input((10, 3))
        return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.LSTM(8)(inputs)))

    model, history = compile_and_fit(run, epochs=1, model_fn=recurrent)
    assert run.plan.policy == "float32" and "recurrent layers ('lstm')" in run.describe()
    assert model.get_layer("lstm").cell.compute_dtype == "float32"
    assert np.isfinite(history.history["loss"][-1])
    dense = tfopt.Run((x.reshape(96, 30), y), batch_size=16)
    compile_and_fit(dense, epochs=1, model_fn=lambda: classifier(30))
    assert dense.plan.policy != "float32"  # no recurrent layer: the machine's rule stands
