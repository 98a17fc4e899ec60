"""The Augment layer: reproducible draws, fit, save and load with its seed state, XLA, replicas."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
import keras  # noqa: E402  (after TensorFlow, without its banners)
from augment_helpers import ALL_OPS, uint8_batch  # noqa: E402

from tfopt.data.augment.config import AugmentConfig  # noqa: E402
from tfopt.data.augment.functional import (  # noqa: E402
    augment_batch,
)
from tfopt.data.augment.layer import Augment  # noqa: E402
from tfopt.errors import InvalidArgumentError  # noqa: E402


def test_layer_reproducible_across_fresh_models():
    images = uint8_batch(batch=4)

    def two_calls():
        inputs = keras.Input((32, 40, 3), dtype="uint8")
        layer = Augment(seed=11, **ALL_OPS)
        keras.Model(inputs, layer(inputs))
        return [layer(images, training=True).numpy() for _ in range(2)]

    first_model, second_model = two_calls(), two_calls()
    np.testing.assert_array_equal(first_model[0], second_model[0])
    np.testing.assert_array_equal(first_model[1], second_model[1])
    assert not np.allclose(first_model[0], first_model[1])  # successive calls differ


def test_layer_on_an_input_that_is_not_a_batch_of_images_says_so():
    with pytest.raises(InvalidArgumentError, match=r"expected a batch \[batch, height, width, "
                                                   r"channels\], got input shape \(None, 32, 3\)"):
        Augment(seed=0)(keras.Input((32, 3)))


def small_model(**augment_fields):
    inputs = keras.Input((32, 40, 3), dtype="uint8")
    x = Augment(seed=0, name="augment", **augment_fields)(inputs)
    x = keras.layers.Conv2D(4, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(3, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def test_layer_trains_with_fit_and_survives_save_and_load(tmp_path):
    model = small_model(**ALL_OPS)
    assert model.output_shape == (None, 3)
    assert model.get_layer("augment").output.shape == (None, 24, 24, 3)
    model.compile("adam", "sparse_categorical_crossentropy")
    images = uint8_batch(seed=1, batch=16).numpy()
    history = model.fit(images, np.arange(16) % 3, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    state = model.get_layer("augment")._seed_generator.state.numpy()
    assert state[1] == 2  # one fresh seed per training step

    before = model.predict(images, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded.predict(images, verbose=0), before, rtol=1e-5, atol=1e-6)
    assert loaded.get_layer("augment").config == model.get_layer("augment").config


def test_the_seed_generator_state_is_saved_and_loaded(tmp_path):
    images = uint8_batch(seed=2, batch=4)

    def model():
        inputs = keras.Input((32, 40, 3), dtype="uint8")
        return keras.Model(inputs, Augment(output_size=24, random_crop=True, seed=0,
                                           output_dtype="float32")(inputs))

    original = model()
    original(images, training=True)
    original(images, training=True)  # two draws made: the generator has moved on
    original.save_weights(tmp_path / "w.weights.h5")
    original.save(tmp_path / "m.keras")
    third = original(images, training=True).numpy()
    for loaded in (model(), None):
        if loaded is None:
            loaded = keras.models.load_model(tmp_path / "m.keras")
        else:
            loaded.load_weights(tmp_path / "w.weights.h5")
        # continues where the saved layer was, not at its first draw
        np.testing.assert_array_equal(loaded(images, training=True).numpy(), third)


def test_a_resumed_fit_continues_the_augmentation_and_ends_with_the_same_weights(tmp_path):
    from tfopt.train.backup import backup_callbacks

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (32, 16, 16, 3), dtype=np.uint8)
    labels = np.arange(32) % 3

    def fit(epochs, callbacks=()):
        keras.utils.set_random_seed(5)  # the same initial weights every time
        inputs = keras.Input((16, 16, 3), dtype="uint8")
        x = Augment(output_size=12, random_crop=True, seed=0, output_dtype="float32")(inputs)
        x = keras.layers.Flatten()(x)
        model = keras.Model(inputs, keras.layers.Dense(3)(x))
        model.compile(keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
        data = tf.data.Dataset.from_tensor_slices((images, labels)).batch(8)  # fixed order
        model.fit(data, epochs=epochs, verbose=0, callbacks=list(callbacks))
        return model.get_weights()

    straight = fit(4)
    fit(2, backup_callbacks(tmp_path, monitor="loss", delete_backup=False))  # "crashed" after 2
    resumed = fit(4, backup_callbacks(tmp_path, monitor="loss"))  # a new model, from the backup
    for a, b in zip(straight, resumed, strict=True):
        np.testing.assert_array_equal(a, b)


def test_layer_inference_is_deterministic_and_matches_the_function():
    layer = Augment(seed=3, **ALL_OPS)
    images = uint8_batch(batch=4)
    first, second = layer(images).numpy(), layer(images, training=False).numpy()
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, augment_batch(images, training=False, **ALL_OPS))
    clone = Augment.from_config(layer.get_config())
    assert clone.config == layer.config and clone.seed == 3


def test_layer_compiles_with_xla_and_draws_as_without_it():
    # Keras compiles model.fit with XLA by default on GPUs; the same seed must give the same
    # batch either way (tf.random.stateless_uniform floats alone would not)
    images = uint8_batch(batch=4)
    eager, compiled = Augment(seed=5, **ALL_OPS), Augment(seed=5, **ALL_OPS)
    xla = tf.function(lambda x: compiled(x, training=True), jit_compile=True)
    np.testing.assert_allclose(xla(images).numpy(), eager(images, training=True).numpy(),
                               atol=1e-3)
    assert compiled.supports_jit


def test_layer_refuses_mixup_and_cutmix():
    with pytest.raises(InvalidArgumentError, match="augment_dataset"):
        Augment(mixup_alpha=0.2)
    with pytest.raises(InvalidArgumentError, match="cutmix_alpha=1.0"):
        Augment(AugmentConfig(cutmix_alpha=1.0, num_classes=3))


def test_layer_under_mirrored_strategy_gives_replicas_different_draws():
    # logical devices must be set before TensorFlow starts: a fresh process
    script = textwrap.dedent("""
        from tfopt._tf import import_tensorflow
        tf = import_tensorflow()
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        import numpy as np
        from tfopt.data.augment.layer import Augment
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            layer = Augment(seed=5, brightness=0.3, horizontal_flip=0.5)
        images = tf.constant(np.full((4, 8, 8, 3), 100, np.uint8))
        step = tf.function(lambda x: layer(x, training=True))
        for _ in range(2):
            results = strategy.experimental_local_results(strategy.run(step, args=(images,)))
        print(not np.allclose(results[0].numpy(), results[1].numpy()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
