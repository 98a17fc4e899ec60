"""The built-in models: small ones for benchmarks and examples, tiny ones for tuning."""

from __future__ import annotations

import numpy as np
import pytest

import tfopt
from tfopt.errors import InvalidArgumentError
from tfopt.models import build_model
from tfopt.train.precision import check_model_precision


def test_built_in_models_take_uint8_and_give_float32_logits(float32_policy):
    from tfopt.models import build_model

    with tfopt.enable_policy("mixed_bfloat16"):
        cnn = build_model("cnn", image_size=32, classes=5)
    batch = np.zeros((2, 32, 32, 3), np.uint8)
    logits = cnn(batch)
    assert tuple(logits.shape) == (2, 5) and logits.dtype.name == "float32"
    assert cnn.get_layer("stage1_a_conv").compute_dtype == "bfloat16"
    assert check_model_precision(cnn) == []
    mlp = build_model("mlp", image_size=32, classes=3)
    assert tuple(mlp(batch).shape) == (2, 3)
    with pytest.raises(InvalidArgumentError, match="cnn, mlp"):
        build_model("vit")
    with pytest.raises(InvalidArgumentError, match="image_size"):
        build_model("cnn", image_size=8)


def test_builtin_model_needs_eight_pixels():
    from tfopt.models import compiled_model

    with pytest.raises(InvalidArgumentError, match="image_size=4: expected an int of at least 8"):
        compiled_model("cnn", image_size=4, size="tiny")


def test_tiny_models_are_compiled_and_named_for_tuning():
    from tfopt.models import compiled_model

    for name in ("cnn", "mlp"):
        model = compiled_model(name, image_size=8, classes=4, size="tiny")
        assert model.name == f"tfopt_tune_{name}" and model.optimizer is not None
        assert tuple(model(np.zeros((2, 8, 8, 3), np.uint8)).shape) == (2, 4)
    with pytest.raises(InvalidArgumentError, match="size='huge'"):
        build_model("cnn", size="huge")
