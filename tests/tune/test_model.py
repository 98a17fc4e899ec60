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
