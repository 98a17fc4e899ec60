"""Fused batch normalisation: Keras's results, TensorFlow's fused kernel, Keras's fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
import tensorflow as tf  # noqa: E402

from tfopt.train.fused_batch_norm import fuse_batch_norm, is_fused  # noqa: E402
from tfopt.train.precision import enable_policy  # noqa: E402


def conv_bn_model(momentum=0.9, **bn):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12, 12, 3))
    x = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization(momentum=momentum, name="bn", **bn)(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(3, dtype="float32")(x))


def twin_models(**bn):
    """The same model twice, the second fused; moving statistics made non-trivial."""
    plain, fused = conv_bn_model(**bn), conv_bn_model(**bn)
    rng = np.random.default_rng(1)
    for layer in plain.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            weights = [rng.uniform(0.5, 1.5, w.shape).astype("float32") for w in layer.weights]
            layer.set_weights(weights)
    fused.set_weights(plain.get_weights())
    assert fuse_batch_norm(fused) == 1
    return plain, fused


def batch(n=16):
    rng = np.random.default_rng(2)
    return (rng.normal(2.0, 3.0, (n, 12, 12, 3)).astype("float32"),
            rng.integers(0, 3, n).astype("int32"))


def test_training_and_inference_match_keras_in_float32():
    plain, fused = twin_models()
    x, y = batch()
    for training in (True, False):
        np.testing.assert_allclose(fused(x, training=training), plain(x, training=training),
                                   rtol=1e-4, atol=1e-5)
    # gradients, and the moving statistics after one step of the training call
    plain, fused = twin_models()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    grads = []
    for model in (plain, fused):
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
        grads.append(tape.gradient(value, model.trainable_variables))
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=1e-5)
    plain_bn, fused_bn = plain.get_layer("bn"), fused.get_layer("bn")
    np.testing.assert_allclose(fused_bn.moving_mean.numpy(), plain_bn.moving_mean.numpy(),
                               rtol=1e-5)
    # the kernel's moving variance takes the unbiased batch variance: n / (n - 1) of the
    # batch's share (1 - momentum), n = 16 x 12 x 12 here
    n = 16 * 12 * 12
    plain_var, start = plain_bn.moving_variance.numpy(), twin_models()[0].get_layer(
        "bn").moving_variance.numpy()
    expected = 0.9 * start + (plain_var - 0.9 * start) * n / (n - 1)
    np.testing.assert_allclose(fused_bn.moving_variance.numpy(), expected, rtol=1e-4)


def test_fit_under_mixed_bfloat16_learns_like_keras():
    results = {}
    x, y = batch(64)
    for name in ("plain", "fused"):
        with enable_policy("mixed_bfloat16"):
            model = conv_bn_model()
        if name == "fused":
            assert fuse_batch_norm(model) == 1
        model.compile(keras.optimizers.SGD(0.05),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, batch_size=16, epochs=4, verbose=0, shuffle=False)
        results[name] = (history.history["loss"], model.predict(x, verbose=0))
    plain_loss, fused_loss = results["plain"][0], results["fused"][0]
    assert fused_loss[-1] < fused_loss[0]
    np.testing.assert_allclose(fused_loss, plain_loss, rtol=0.05)  # bfloat16 rounding
    np.testing.assert_allclose(results["fused"][1], results["plain"][1], atol=0.1)


def test_layers_the_kernel_cannot_take_keep_keras_code():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    dense_bn = keras.layers.BatchNormalization(name="dense_bn")(keras.layers.Dense(4)(inputs))
    model = keras.Model(inputs, dense_bn)
    # a 2-D input still falls back at call time, with Keras's results
    assert fuse_batch_norm(model) == 1 and is_fused(model.get_layer("dense_bn"))
    x = np.random.default_rng(0).normal(size=(8, 6)).astype("float32")
    reference = keras.layers.BatchNormalization()
    reference.build((None, 4))
    reference.set_weights(model.get_layer("dense_bn").get_weights())
    hidden = model.layers[1](x)
    np.testing.assert_allclose(model(x, training=True), reference(hidden, training=True),
                               rtol=1e-5, atol=1e-6)
    for options in ({"synchronized": True}, {"axis": 1}):
        assert fuse_batch_norm(conv_bn_model(**options)) == 0


def test_fusing_twice_changes_nothing_and_a_saved_model_loads_as_plain_keras(tmp_path):
    plain, fused = twin_models()
    assert fuse_batch_norm(fused) == 1
    x, _ = batch()
    path = tmp_path / "model.keras"
    fused.save(path)
    loaded = keras.models.load_model(path)
    assert not is_fused(loaded.get_layer("bn"))
    np.testing.assert_allclose(loaded(x, training=False), fused(x, training=False),
                               rtol=1e-4, atol=1e-5)


def test_not_a_model_is_named():
    from tfopt.errors import InvalidArgumentError
    from tfopt.train.sync_batch_norm import synchronize_batch_norm

    for function in (fuse_batch_norm, synchronize_batch_norm):
        with pytest.raises(InvalidArgumentError, match=r"\(model\): expected a Keras model, "
                                                       r"got str 'model'"):
            function("model")


def test_synchronizing_a_fused_model_is_refused_and_the_other_way_works():
    from tfopt.errors import InvalidArgumentError
    from tfopt.train.sync_batch_norm import synchronize_batch_norm

    fused = conv_bn_model()
    fuse_batch_norm(fused)
    # the fused kernel keeps per-replica statistics: silently undoing one of the two would
    # leave the user believing in the other
    with pytest.raises(InvalidArgumentError, match="fuse_batch_norm already switched 1 layer"):
        synchronize_batch_norm(fused)
    assert not fused.get_layer("bn").synchronized
    synced = conv_bn_model()
    assert synchronize_batch_norm(synced) == 1
    assert fuse_batch_norm(synced) == 0  # synchronized layers keep Keras's code (documented)
