"""Fixtures for the GPU tests: a fake NVML in sys.modules, TensorFlow hidden."""

from __future__ import annotations

import sys

import pytest

from tfopt.gpu.testing import FakeGpu, make_fake_nvml


@pytest.fixture
def install_nvml(monkeypatch):
    """Return a function that builds a fake pynvml and puts it in sys.modules["pynvml"]."""

    def install(gpus=None, **options):
        module = make_fake_nvml([FakeGpu()] if gpus is None else gpus, **options)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install


@pytest.fixture
def no_tensorflow(monkeypatch):
    """Make TensorFlow look uninstalled (find_spec returns None, import fails)."""
    monkeypatch.setitem(sys.modules, "tensorflow", None)
