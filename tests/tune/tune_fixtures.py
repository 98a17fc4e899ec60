"""Shared by the tuning tests: a tiny compiled model, a module of model specs, state checks.

Plain functions, made fixtures by the tests that use them (``pytest.fixture(name=...)(...)``): a
conftest.py here would shadow the top one that other tests import helpers from.
"""

from __future__ import annotations

import textwrap

import numpy as np

from tfopt.models import compiled_model


def tiny_mlp():
    """A tiny compiled MLP at 16 px, trained one step (non-initial optimizer state to restore)."""
    model = compiled_model("mlp", image_size=16, classes=10, size="tiny")
    x = np.zeros((4, 16, 16, 3), np.uint8)
    model.train_on_batch(x, np.zeros(4, np.int64))  # non-initial optimizer state to restore
    return model


def snapshot(model):
    """Copies of the weights and optimizer variables."""
    return ([w.copy() for w in model.get_weights()],
            [v.numpy().copy() for v in model.optimizer.variables])


def assert_same_state(model, before):
    """Nothing changed since ``before = snapshot(model)``."""
    weights, optimizer_values = snapshot(model)
    assert len(weights) == len(before[0]) and len(optimizer_values) == len(before[1])
    for now, then in zip(weights + optimizer_values, before[0] + before[1], strict=True):
        np.testing.assert_array_equal(now, then)


def model_module(tmp_path, monkeypatch):
    """A module of model specs in ``tmp_path``, importable and the current folder: its name."""
    (tmp_path / "tune_models.py").write_text(textwrap.dedent("""
        import os, signal
        from tfopt.models import compiled_model

        def build(image_size=8):
            return compiled_model("mlp", image_size=image_size, classes=3, size="tiny")

        def uncompiled():
            import keras
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])

        def killed():
            os.kill(os.getpid(), signal.SIGKILL)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return "tune_models"
