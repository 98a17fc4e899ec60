"""The model under trial: specs that name what is wrong, and the compiled-model check."""

from __future__ import annotations

import pytest
import tune_fixtures

from tfopt.errors import InvalidArgumentError
from tfopt.tune.model import load_model_spec
from tfopt.tune.search import find_batch_size
from tfopt.tune.sweep import throughput_sweep

model_module = pytest.fixture(name="model_module")(tune_fixtures.model_module)


def test_uncompiled_models_get_clear_errors_from_the_finder_and_the_sweep():
    import keras

    raw = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    for function in (find_batch_size, lambda model: throughput_sweep(model, [8])):
        with pytest.raises(InvalidArgumentError, match="is not compiled; call model.compile"):
            function(raw)
        with pytest.raises(InvalidArgumentError, match="expected a compiled Keras model"):
            function(42)


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


def test_copy_model_shares_weightless_lambdas_and_refuses_what_keras_cannot_rebuild(tf):
    import keras
    import numpy as np

    from tfopt.tune.model import copy_model

    inputs = keras.Input((4,))
    doubled = keras.layers.Lambda(lambda v: v * 2.0, name="double")(inputs)
    inner = keras.Sequential([keras.Input((4,)), keras.layers.Lambda(lambda v: v + 1.0),
                              keras.layers.Dense(3)])
    model = keras.Model(inputs, keras.layers.Dense(2)(inner(doubled)))
    copy = copy_model(model)  # clone_model alone refuses the Python lambdas
    assert copy is not model and len(copy.weights) == len(model.weights)
    copy.set_weights(model.get_weights())
    batch = np.arange(8, dtype="float32").reshape(2, 4)
    np.testing.assert_allclose(copy(batch), model(batch), rtol=1e-6)

    class Scale(keras.layers.Layer):  # as keras.io's examples write them: no **kwargs
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def call(self, inputs):
            return inputs * self.factor

    scaled = copy_model(keras.Model(inputs, Scale(3.0)(inputs)))
    assert scaled.layers[-1].factor == 3.0  # rebuilt from its own arguments

    class Hidden(keras.layers.Layer):  # a config that does not rebuild it
        def __init__(self, factor, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def get_config(self):  # leaves its own argument out
            return {"name": self.name}

        def call(self, inputs):
            return inputs * self.factor

    with pytest.raises(TypeError, match="factor"):
        copy_model(keras.Model(inputs, Hidden(3.0)(inputs)))
