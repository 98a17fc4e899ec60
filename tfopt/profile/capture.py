"""Run a user's training script unmodified and catch its ``Model.fit``.

The script runs in this process as ``python SCRIPT.py ARGS`` would run it (``sys.argv``,
``__name__ == "__main__"``, the script's folder first on ``sys.path``). While it runs,
``keras.Model.fit``, ``compile`` and ``train_on_batch`` and ``tf.GradientTape.gradient`` are
wrapped: ``compile`` records its arguments (the trials compile copies of the model as the
script did), the chosen ``fit`` call is handed to the measurement instead of training, and the
script is then stopped by an exception it cannot catch with ``except Exception``, so nothing
after that ``fit`` runs (no model saved, no file written by the script past that point).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import runpy
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfopt.errors import InvalidArgumentError

__all__ = ["FitCall", "ScriptOutcome", "run_script"]


@dataclasses.dataclass
class FitCall:
    """The ``fit`` call caught: the model, fit's arguments by name, Keras's own ``fit``, and
    the arguments the script gave ``compile`` for this model (empty where it was compiled
    elsewhere, e.g. loaded compiled)."""

    model: Any
    arguments: dict
    fit: Callable
    compile_arguments: dict


@dataclasses.dataclass
class ScriptOutcome:
    """What became of the script: ``result`` is what the measurement returned where the fit
    was caught; else ``status`` says why not ("failed", "no_fit") and ``message`` in words."""

    result: Any = None
    status: str = "profiled"
    message: str = ""


class _Caught(BaseException):
    """Raised through the script once its fit is measured (``except Exception`` passes it)."""

    def __init__(self, result):
        super().__init__("tfopt profile: the fit was measured; the script stops here")
        self.result = result


class _ProfilerFailed(BaseException):
    """The measurement itself failed: tfopt's error, not the script's."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


def _fit_arguments(fit, model, args, kwargs) -> dict:
    bound = inspect.signature(fit).bind(model, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop("self", None)
    return arguments


def _script_frames(error: BaseException, script: Path) -> str:
    """The traceback from the script's first frame on (tfopt's wrapper frames left out)."""
    frames = traceback.extract_tb(error.__traceback__)
    for index, frame in enumerate(frames):
        if Path(frame.filename).resolve() == script:
            frames = frames[index:]
            break
    lines = traceback.format_list(frames)
    lines += traceback.format_exception_only(type(error), error)
    return "Traceback (most recent call last):\n" + "".join(lines)


@contextlib.contextmanager
def _patched(owner, name: str, make: Callable[[Callable], Callable]):
    own = name in owner.__dict__  # else inherited (keras.Model's fit is its trainer's)
    original = getattr(owner, name)
    setattr(owner, name, make(original))
    try:
        yield original
    finally:
        if own:
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def _check_script(script) -> Path:
    path = Path(script)
    if not path.is_file():
        raise InvalidArgumentError(f"{script}: no such script (expected a Python file)")
    try:
        source = path.read_bytes()
    except OSError as error:
        raise InvalidArgumentError(f"{script}: cannot be read ({error.strerror})") from None
    try:
        compile(source, str(path), "exec")
    except (SyntaxError, ValueError) as error:
        raise InvalidArgumentError(f"{script}: not a Python script ({error})") from None
    return path.resolve()


def run_script(script, args: list[str], measure: Callable[[FitCall], Any],
               fit_number: int = 1) -> ScriptOutcome:
    """Run ``script`` with ``args`` until its ``fit_number``-th ``Model.fit`` call, then
    ``measure(FitCall)`` instead of that fit, and stop the script.

    Returns:
        A :class:`ScriptOutcome`: ``result`` from ``measure``; or status "failed" (the
        script's own error before that fit, as its traceback) or "no_fit" (it ended without
        one; ``train_on_batch`` loops and custom loops with ``GradientTape`` are named).

    Raises:
        InvalidArgumentError: the script is not a readable Python file, or ``fit_number`` < 1.
        Whatever ``measure`` raises, as it raised it.
    """
    if not isinstance(fit_number, int) or fit_number < 1:
        raise InvalidArgumentError(f"fit={fit_number!r}: expected a positive whole number "
                                   "(1: the script's first fit call)")
    path = _check_script(script)
    import keras
    import tensorflow as tf

    fits = {"count": 0}
    compiled: dict[int, dict] = {}
    loops = {"train_on_batch": 0, "gradient": 0}

    def wrap_fit(original):
        def fit(self, *args, **kwargs):
            fits["count"] += 1
            if fits["count"] != fit_number:
                return original(self, *args, **kwargs)
            call = FitCall(self, _fit_arguments(original, self, args, kwargs), original,
                           compiled.get(id(self), {}))
            try:
                result = measure(call)
            except BaseException as error:  # noqa: BLE001 (tfopt's failure, told apart)
                raise _ProfilerFailed(error) from error
            raise _Caught(result)
        return fit

    def wrap_compile(original):
        def compile_(self, *args, **kwargs):
            bound = inspect.signature(original).bind(self, *args, **kwargs)
            compiled[id(self)] = {k: v for k, v in bound.arguments.items() if k != "self"}
            return original(self, *args, **kwargs)
        return compile_

    def counting(key):
        def wrap(original):
            def counted(*args, **kwargs):
                loops[key] += 1
                return original(*args, **kwargs)
            return counted
        return wrap

    saved_argv, saved_path = list(sys.argv), list(sys.path)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(path.parent))
    try:
        with _patched(keras.Model, "fit", wrap_fit), \
                _patched(keras.Model, "compile", wrap_compile), \
                _patched(keras.Model, "train_on_batch", counting("train_on_batch")), \
                _patched(tf.GradientTape, "gradient", counting("gradient")):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except _Caught as caught:
                return ScriptOutcome(caught.result)
            except _ProfilerFailed as failed:
                raise failed.error from None
            except SystemExit as exit_:
                if exit_.code not in (None, 0):
                    return ScriptOutcome(status="failed", message=(
                        f"{script} exited with status {exit_.code} before its fit call "
                        f"number {fit_number}"))
            except BaseException as error:  # noqa: BLE001 (the script's own error, reported)
                return ScriptOutcome(status="failed", message=_script_frames(error, path))
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return ScriptOutcome(status="no_fit", message=_no_fit_message(script, fits["count"],
                                                                  fit_number, loops))


def _no_fit_message(script, fits: int, fit_number: int, loops: dict) -> str:
    if fits:
        return (f"{script} called Model.fit {fits} time(s), not {fit_number}: nothing "
                "profiled (--fit N picks the call)")
    if loops["train_on_batch"]:
        return (f"{script} trains with Model.train_on_batch ({loops['train_on_batch']} calls) "
                "and never calls Model.fit: train_on_batch loops are not covered by tfopt "
                "profile")
    if loops["gradient"]:
        return (f"{script} trains with its own loop (tf.GradientTape) and never calls "
                "Model.fit: custom training loops are not covered by tfopt profile")
    return f"{script} ended without calling Model.fit: nothing to profile"
