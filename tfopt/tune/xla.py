"""XLA (``jit_compile``) chosen by a trial on the user's model and batches.

Keras 3's ``jit_compile="auto"`` never tries XLA on a CPU, under a ``tf.distribute`` strategy,
or when one layer says it cannot compile; where it compiles, it may be slower or recompile for
every new input shape. So the choice is measured: the same model compiled with and without
XLA, the two losses on one batch compared (XLA reorders and fuses arithmetic: a loss far from
the plain step's is a wrong compile, not rounding), then both timed in alternating rounds on
the user's batches. XLA is kept only where it is faster beyond the trial's noise, the input
gives batches fast enough for the faster step to show in the fit (the trial times the step on
batches held in memory; a fit that waits for its input runs at the input's rate with or
without XLA), and an epoch's saving pays for its longer compile.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import keras
import tensorflow as tf

from tfopt._internals.keras_model import all_layers
from tfopt.tune.steps_per_execution import held_batches, time_setups

__all__ = ["INPUT_BATCHES", "XLA_GAIN", "XlaTrial", "choose_xla", "input_rate", "trial_xla",
           "variable_axes", "xla_blockers"]

# XLA must beat the plain step by more than the trial's round-to-round noise to be kept
XLA_GAIN = 1.03
# the compiled step's loss may differ from the plain one's by reordered rounding: relative
# gaps within these are rounding, beyond them a different computation
LOSS_TOLERANCE = {"float32": 1e-3, "half": 3e-2}
# the input's own rate: batches timed after the first few (start-up, buffers filling). A count,
# not a time: a read must take as many batches on every run (a shuffle inside a repeat draws
# new seeds at each pass it starts, and a rerun must resume on the first run's stream)
INPUT_BATCHES = 10
_INPUT_WARMUP_BATCHES = 2


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
        input_rate: Examples/s the training input gave alone (no model), where timed.
    """

    chosen: bool
    rates: dict[bool, float]
    compile_seconds: dict[bool, float]
    loss_gap: float
    reason: str
    input_rate: float | None = None


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


def input_rate(batches: tf.data.Dataset, count: int = INPUT_BATCHES) -> float | None:
    """Examples/s ``batches`` (the training stream as the fit reads it) give with no model:
    its first batches untimed (start-up, buffers filling), then ``count`` batches timed. None
    where fewer than two batches followed the untimed ones (a pass that short says nothing of
    a rate). One iterator, read as far on every run: its shuffles draw the same seeds."""
    iterator = iter(batches)
    try:
        for _ in range(_INPUT_WARMUP_BATCHES):
            next(iterator)
    except StopIteration:
        return None
    examples = batches_read = 0
    started = time.perf_counter()
    for batch in iterator:
        examples += int(tf.shape(tf.nest.flatten(batch)[0])[0])
        batches_read += 1
        if batches_read == count:
            break
    elapsed = time.perf_counter() - started
    return examples / elapsed if batches_read >= 2 and elapsed > 0 else None


def choose_xla(rates: dict[bool, float], compile_seconds: dict[bool, float],
               feed: float | None, epoch_examples: int | None,
               rounds: dict[bool, list[float]] | None = None) -> tuple[bool, str]:
    """Keep XLA or not, and why, from the trial's step rates (examples/s without (False) and
    with (True) XLA, batches held in memory; the medians, and where given the alternating
    ``rounds``), each first call's seconds, the input's own rate ``feed`` (None: not timed)
    and an epoch's examples (None: the payback not checked).

    A fit runs no faster than its input gives batches, so the rates that count are each step's
    capped at ``feed``: XLA must beat the plain step by ``XLA_GAIN`` after the cap, in every
    round beside the plain round it alternated with (a median pulled up by one fast round is
    noise), and the epoch's saving at the capped rates must pay for its longer first call.
    """
    plain, compiled = rates[False], rates[True]
    if feed is not None and feed < XLA_GAIN * plain:
        return False, (
            f"off: the input gives {feed:,.0f} examples/s alone, under {XLA_GAIN:g}x the "
            f"plain step's {plain:,.0f}: the fit waits for its batches with or without XLA")
    if compiled < XLA_GAIN * plain:
        return False, f"off: not {XLA_GAIN:g}x the plain step's rate on this model and data"
    if rounds is not None and not all(
            with_xla > without for with_xla, without in zip(rounds[True], rounds[False], strict=True)):
        return False, ("off: faster in the median, but not in every round beside the plain "
                       "one: within the trial's noise")
    if feed is not None:
        plain, compiled = min(plain, feed), min(compiled, feed)
    extra = compile_seconds[True] - compile_seconds[False]
    if epoch_examples is not None and epoch_examples * (1 / plain - 1 / compiled) < extra:
        return False, "off: faster, but its longer compile is not paid back within an epoch"
    fed = " and the input keeping up" if feed is not None else ""
    return True, (f"on: at least {XLA_GAIN:g}x the plain step's rate on this model and "
                  f"data{fed}, the losses on one batch agreeing")


def _loss(model, batch) -> float:
    return float(model.evaluate(batch, verbose=0, return_dict=True)["loss"])


def trial_xla(model_fn: Callable[[], keras.Model],
              compile_fn: Callable[[keras.Model, int, bool], None],
              batches: tf.data.Dataset, steps_per_execution: int, *, policy: str,
              epoch_examples: int | None = None, feed: float | None = None) -> XlaTrial:
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
        feed: Examples/s the training input gives alone (:func:`input_rate`); the fit runs
            no faster. None: not timed (each step's rate counts as it is).

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
            f"step's ({plain_loss:.6g}) within {tolerance:g}"), feed)
    warm: dict = {}
    rounds: dict = {}
    rates = time_setups({False: (lambda: plain, steps_per_execution),
                         True: (lambda: compiled, steps_per_execution)},
                        lambda model, spe: None, held, max(16, steps_per_execution),
                        warmups=warm, rounds=rounds)
    chosen, reason = choose_xla(rates, warm, feed, epoch_examples, rounds)
    return XlaTrial(chosen, rates, warm, gap, reason, feed)
