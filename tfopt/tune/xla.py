"""XLA (``jit_compile``) chosen by a trial on the user's model and batches.

Keras 3's ``jit_compile="auto"`` never tries XLA on a CPU, under a ``tf.distribute`` strategy,
or when one layer says it cannot compile; where it compiles, it may be slower or recompile for
every new input shape. So the choice is measured: the same model compiled with and without
XLA, the two losses on one batch compared (XLA reorders and fuses arithmetic: a loss far from
the plain step's is a wrong compile, not rounding), then both timed in alternating rounds on
the user's batches. XLA is kept only where it is faster beyond the trial's noise and an epoch's
saving pays for its longer compile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import keras
import tensorflow as tf

from tfopt._internals.keras_model import all_layers
from tfopt.tune.steps_per_execution import held_batches, time_setups

__all__ = ["XLA_GAIN", "XlaTrial", "trial_xla", "variable_axes", "xla_blockers"]

# XLA must beat the plain step by more than the trial's round-to-round noise to be kept
XLA_GAIN = 1.03
# the compiled step's loss may differ from the plain one's by reordered rounding: relative
# gaps within these are rounding, beyond them a different computation
LOSS_TOLERANCE = {"float32": 1e-3, "half": 3e-2}


@dataclasses.dataclass(frozen=True)
class XlaTrial:
    """The outcome of :func:`trial_xla`.

    Attributes:
        chosen: Compile with XLA.
        rates: Examples/s without (False) and with (True) XLA; empty where the losses
            disagreed and nothing was timed.
        compile_seconds: The first call of each (tracing, compiling, one call), by the same
            keys.
        loss_gap: The relative gap between the two losses on one batch.
        reason: Why, in words.
    """

    chosen: bool
    rates: dict[bool, float]
    compile_seconds: dict[bool, float]
    loss_gap: float
    reason: str


def xla_blockers(model) -> list[str]:
    """The names of ``model``'s layers that say XLA cannot compile them (``supports_jit``
    False: text vectorisation, lookups, hashing, some random augmentation); with any of them
    Keras compiles the model without XLA even when asked."""
    return [layer.name for layer in [model, *all_layers(model)]
            if not getattr(layer, "supports_jit", True)]


def variable_axes(element_spec) -> list[str]:
    """Where a batch's shape may change from one batch to the next (axes of unknown size
    after the batch axis, ragged or sparse parts): XLA compiles a step for each shape it
    meets. Named as ``x[0] axis 1``; [] when every batch has one shape (a partial last batch
    aside, which adds one compile)."""
    found = []

    def visit(path, spec):
        if isinstance(spec, (tf.RaggedTensorSpec, tf.SparseTensorSpec)):
            found.append(f"{path}: {type(spec).__name__}")
            return
        shape = getattr(spec, "shape", None)
        if shape is None or shape.rank is None:
            found.append(f"{path}: unknown rank")
            return
        found.extend(f"{path} axis {axis}" for axis, size in enumerate(shape)
                     if axis > 0 and size is None)

    names = ("x", "y", "sample_weight")
    parts = element_spec if isinstance(element_spec, tuple) else (element_spec,)
    for index, part in enumerate(parts):
        base = names[index] if index < len(names) else f"part {index}"
        for path, spec in keras.tree.flatten_with_path(part):
            joined = "/".join(str(key) for key in path)
            visit(f"{base}[{joined}]" if joined else base, spec)
    return found


def _loss(model, batch) -> float:
    return float(model.evaluate(batch, verbose=0, return_dict=True)["loss"])


def trial_xla(model_fn: Callable[[], keras.Model],
              compile_fn: Callable[[keras.Model, int, bool], None],
              batches: tf.data.Dataset, steps_per_execution: int, *, policy: str,
              epoch_examples: int | None = None) -> XlaTrial:
    """Time the model with and without XLA on real batches, after checking the losses agree.

    Args:
        model_fn: Returns a fresh copy of the model (built, uncompiled, computing as the run
            will).
        compile_fn: ``compile_fn(model, steps_per_execution, jit_compile)`` compiles it as the
            user does.
        batches: A few batches of the training data (read into memory here, once).
        steps_per_execution: The run's, for both.
        policy: The run's precision policy (a half-precision one allows a wider loss gap).
        epoch_examples: Examples in one epoch; XLA's longer compile must be paid back within
            one epoch at the measured rates. None: not checked.

    Returns:
        An :class:`XlaTrial`.
    """
    held = held_batches(batches)
    one_batch = held.take(1)
    plain, compiled = model_fn(), model_fn()
    compiled.set_weights(plain.get_weights())
    compile_fn(plain, steps_per_execution, False)
    compile_fn(compiled, steps_per_execution, True)
    plain_loss, xla_loss = _loss(plain, one_batch), _loss(compiled, one_batch)
    gap = abs(xla_loss - plain_loss) / max(abs(plain_loss), 1e-6)
    tolerance = LOSS_TOLERANCE["float32" if policy == "float32" else "half"]
    if not gap <= tolerance:  # NaN too
        return XlaTrial(False, {}, {}, gap, (
            f"off: the compiled step's loss on one batch ({xla_loss:.6g}) is not the plain "
            f"step's ({plain_loss:.6g}) within {tolerance:g}"))
    warm: dict = {}
    rates = time_setups({False: (lambda: plain, steps_per_execution),
                         True: (lambda: compiled, steps_per_execution)},
                        lambda model, spe: None, held, max(16, steps_per_execution),
                        warmups=warm)
    faster = rates[True] >= XLA_GAIN * rates[False]
    extra = warm[True] - warm[False]
    saved = (epoch_examples * (1 / rates[False] - 1 / rates[True])
             if epoch_examples is not None else None)
    if not faster:
        return XlaTrial(False, rates, warm, gap, (
            f"off: not {XLA_GAIN:g}x the plain step's rate on this model and data"))
    if saved is not None and saved < extra:
        return XlaTrial(False, rates, warm, gap, (
            "off: faster, but its longer compile is not paid back within an epoch"))
    return XlaTrial(True, rates, warm, gap, (
        f"on: at least {XLA_GAIN:g}x the plain step's rate on this model and data, the "
        "losses on one batch agreeing"))
