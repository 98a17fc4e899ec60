"""The model under trial: loading a ``module:function`` spec, checking it is compiled, random
batches of its shapes, copies of it for trials, and its state saved before trials and put back
after them.

Imports no TensorFlow at import (NumPy inside :func:`synthetic_batch`, Keras inside
:func:`copy_model`).

Example:
    >>> model = load_model_spec("my_project.models:build_classifier")
    >>> state = ModelState(model)
    >>> model.train_on_batch(*synthetic_batch(model, 64))
    >>> state.restore()
"""

from __future__ import annotations

import importlib
import os
import sys

from tfopt.errors import InvalidArgumentError

__all__ = ["ModelState", "check_compiled", "copy_model", "load_model_spec", "split_spec",
           "synthetic_batch"]


def check_compiled(model, function: str) -> None:
    """A compiled Keras model, or an error that says what ``model`` is and what to do."""
    if not hasattr(model, "train_on_batch"):
        raise InvalidArgumentError(
            f"{function}(model): expected a compiled Keras model"
            f"{' or a module:function spec' if function == 'find_batch_size' else ''}, got "
            f"{type(model).__name__} {model!r:.80}")
    if getattr(model, "optimizer", None) is None:
        raise InvalidArgumentError(
            f"{function}(model): model {getattr(model, 'name', '')!r} is not compiled; call "
            "model.compile(optimizer, loss) first (the trials train it)")


def copy_model(model):
    """A copy of ``model`` with new weights, as ``keras.models.clone_model`` makes one, for a
    trial. A ``Lambda`` layer without weights is shared, not rebuilt: Keras refuses to rebuild
    a Python lambda from its config outside its unsafe mode, and a stateless layer called in
    two models computes the same in each. A custom layer whose constructor takes no
    ``**kwargs`` is rebuilt from the arguments it takes.

    Raises:
        TypeError, ValueError, NotImplementedError, KeyError: What Keras raises for a layer it
            cannot rebuild from its config (a custom layer whose ``get_config`` does not give
            back its constructor's arguments).
    """
    import keras

    def copy_layer(layer):
        if isinstance(layer, keras.layers.Lambda) and not layer.weights:
            return layer
        config = layer.get_config()
        try:
            return layer.__class__.from_config(config)
        except TypeError as refused:
            return _rebuild_without_base_arguments(layer, config, refused)

    try:
        return keras.models.clone_model(model, clone_function=copy_layer, recursive=True)
    except ValueError:
        # a subclassed model takes no clone_function: Keras copies it whole from its config
        return keras.models.clone_model(model)


def _rebuild_without_base_arguments(layer, config, refused: TypeError):
    """A custom layer rebuilt from the arguments its own constructor takes.

    Keras adds the base layer's ``trainable`` and ``dtype`` to every layer's config, and a
    constructor written without ``**kwargs`` (as keras.io's examples write their custom
    layers) refuses them: those two are set on the new layer instead.
    """
    import inspect

    parameters = inspect.signature(type(layer).__init__).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        raise refused  # the base arguments were not what it refused
    copy = type(layer)(**{key: value for key, value in config.items() if key in parameters})
    copy.dtype_policy = layer.dtype_policy
    copy.trainable = layer.trainable
    return copy


def split_spec(spec) -> tuple[str, str]:
    """``(module, function)`` of a ``"module:function"`` spec, or an error that shows the form."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise InvalidArgumentError(
            f"model spec {spec!r}: expected 'module:function' (e.g. 'my_models:build_cnn'), a "
            "function that returns a compiled Keras model")
    module_name, function_name = spec.split(":")
    return module_name, function_name


def load_model_spec(spec: str, **kwargs):
    """Call the ``module:function`` named by ``spec`` and return the model it builds.

    The current directory is importable (as for ``python -m``), so ``models:build`` finds
    ``./models.py``. The function must return a compiled Keras model.

    Args:
        spec: ``"package.module:function"``.
        **kwargs: Passed to the function.

    Raises:
        InvalidArgumentError: The spec is malformed, the module or function cannot be found,
            or the result is not a compiled Keras model.

    Example:
        >>> model = load_model_spec("my_project.models:build_classifier")
    """
    module_name, function_name = split_spec(spec)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidArgumentError(
            f"model spec {spec!r}: cannot import module {module_name!r} ({error}); run from "
            "the folder that holds it or add that folder to PYTHONPATH") from error
    function = getattr(module, function_name, None)
    if not callable(function):
        raise InvalidArgumentError(
            f"model spec {spec!r}: module {module_name!r} has no function {function_name!r}")
    model = function(**kwargs)
    if not hasattr(model, "train_on_batch") or getattr(model, "optimizer", None) is None:
        raise InvalidArgumentError(
            f"model spec {spec!r}: {function_name}() returned {type(model).__name__}, expected a "
            "compiled Keras model (call model.compile(...) before returning it)")
    return model


def _loss_name(model) -> str:
    loss = getattr(model, "loss", None)
    if isinstance(loss, str):
        return loss
    return str(getattr(loss, "name", None) or getattr(loss, "__name__", None)
               or type(loss).__name__)


def synthetic_batch(model, batch_size: int, seed: int = 0):
    """Random ``(x, y)`` of the model's input and output shapes: memory depends on shapes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if not getattr(model, "inputs", None):
        raise InvalidArgumentError(
            f"model {model.name!r} has no known input shape (a subclassed model?): pass "
            "make_batch=lambda batch_size: (x, y)")
    xs = []
    for tensor in model.inputs:
        shape = tuple(tensor.shape)[1:]
        if any(side is None for side in shape):
            raise InvalidArgumentError(
                f"model input {tensor.name!r} has shape {tensor.shape} with unknown sides: pass "
                "make_batch=lambda batch_size: (x, y)")
        dtype = str(tensor.dtype)
        if "int" in dtype:
            high = 256 if dtype == "uint8" else 2
            xs.append(rng.integers(0, high, (batch_size, *shape)).astype(dtype))
        else:
            xs.append(rng.random((batch_size, *shape), dtype="float32"))
    out_shape = tuple(model.outputs[0].shape)[1:]
    if "sparse" in _loss_name(model).lower():
        y = rng.integers(0, max(1, out_shape[-1] if out_shape else 1), (batch_size,))
    else:
        y = rng.random((batch_size, *out_shape), dtype="float32")
    return (xs[0] if len(xs) == 1 else xs), y


class ModelState:
    """Weights and optimizer variables saved before trials and put back after them."""

    def __init__(self, model):
        self.model = model
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and not getattr(optimizer, "built", True):
            # build it now, so the variables the trials create exist (at their initial values)
            # in the snapshot and are reset with the rest
            optimizer.build(model.trainable_variables)
        self.optimizer_variables = list(getattr(optimizer, "variables", None) or [])
        self.weights = model.get_weights()
        self.optimizer_values = [v.numpy() for v in self.optimizer_variables]

    def variable_bytes(self) -> int:
        return int(sum(w.nbytes for w in self.weights) + sum(v.nbytes for v in self.optimizer_values))

    def restore(self) -> None:
        self.model.set_weights(self.weights)
        for variable, value in zip(self.optimizer_variables, self.optimizer_values, strict=True):
            variable.assign(value)
        if hasattr(self.model, "reset_metrics"):
            self.model.reset_metrics()

