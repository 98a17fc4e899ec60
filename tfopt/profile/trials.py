"""``tfopt profile --try``: the model-side changes measured instead of estimated.

Each candidate (half precision, XLA, more steps per call) is a copy of the script's model with
the script's weights, compiled as the script compiled it but for that one change, beside a
copy with no change; the copies' losses on one batch are compared first (a change that
computes something else is not timed), then all are timed in alternating rounds on the same
batches held in memory (``tfopt.tune``'s trial: the median of the rounds counts). The ratio is
of the step alone: while the fit waits for input, it gains less.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from tfopt.train.precision import compute_in
from tfopt.tune.model import copy_model
from tfopt.tune.steps_per_execution import quiet_fit_warnings, time_setups
from tfopt.tune.xla import LOSS_TOLERANCE

__all__ = ["Trial", "TRIAL_STEPS", "compile_arguments", "copy_with_weights", "first_line",
           "loss_on", "trial_steps", "try_changes"]

TRIAL_STEPS = 32  # steps per timed round at most: whole calls for 1 and 16 steps per call
ROUND_SECONDS = 2.0  # a timed round of a long step is cut to about this many seconds
MORE_STEPS_PER_CALL = 16


@dataclasses.dataclass(frozen=True)
class Trial:
    """One candidate measured: its step ratio against the unchanged copy (None where its loss
    disagreed and it was not timed), whether the loss agreed, the two losses, and why it was
    not timed where a copy could not run at all (``reason``)."""

    kind: str
    ratio: float | None
    same_training: bool
    loss: float | None
    base_loss: float | None
    reason: str = ""


def compile_arguments(model, recorded: dict, **changes) -> dict:
    arguments = dict(recorded) if recorded else {
        "optimizer": model.optimizer, "loss": getattr(model, "loss", None)}
    optimizer = arguments.get("optimizer")
    if isinstance(optimizer, keras.optimizers.Optimizer):  # one optimizer serves one model
        arguments["optimizer"] = optimizer.__class__.from_config(optimizer.get_config())
    for key in ("metrics", "weighted_metrics"):  # metric objects hold state: names only
        value = arguments.get(key)
        if isinstance(value, (list, tuple)):
            arguments[key] = [m for m in value if isinstance(m, str)] or None
        elif value is not None and not isinstance(value, str):
            arguments[key] = None
    arguments.pop("kwargs", None)
    arguments.update(changes)
    return arguments


def copy_with_weights(model, batch, weights, policy: str | None):
    copy = copy_model(model)
    if not copy.built:
        copy(batch)
    copy.set_weights(weights)
    if policy is not None:
        compute_in(copy, policy)
    return copy


def loss_on(model, batch) -> float:
    with quiet_fit_warnings():
        return float(model.evaluate(batch, verbose=0, return_dict=True)["loss"])


def first_line(error: Exception) -> str:
    """The line of ``error`` that says what went wrong: TensorFlow's messages end with the
    node and op names, after it."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()
             and not line.strip().startswith("[[")]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"[:200]


def trial_steps(step_seconds: float, whole: int = 1) -> int:
    """Steps per timed round: :data:`TRIAL_STEPS`, fewer for a step so long that a round would
    take more than :data:`ROUND_SECONDS` (a 0.5 s step: 4), in whole calls of ``whole``."""
    fit = int(ROUND_SECONDS / step_seconds) if step_seconds > 0 else TRIAL_STEPS
    steps = max(whole, min(TRIAL_STEPS, fit))
    return max(whole, steps // whole * whole)


def try_changes(model, recorded: dict, held: tf.data.Dataset, candidates: dict,
                steps: int = TRIAL_STEPS) -> list[Trial]:
    """Measure ``candidates`` (kind -> {"policy": name} or compile changes such as
    ``{"jit_compile": True}``) against the model as compiled.

    Args:
        model: The script's compiled model.
        recorded: The arguments the script gave ``compile`` (empty: read off the model).
        held: Batches held in memory, repeating.
        candidates: What to try, by kind.
    """
    one = held.take(1)
    x = next(iter(one))[0]
    weights = model.get_weights()
    spe = int(getattr(model, "steps_per_execution", 1) or 1)
    jit = bool(getattr(model, "jit_compile", False))
    setups, losses, failed = {}, {}, {}
    for kind, change in {"base": {}, **candidates}.items():
        change = dict(change)
        try:  # a copy that cannot run (a lookup table Keras's clone leaves empty) is named
            copy = copy_with_weights(model, x, weights, change.pop("policy", None))
            arguments = compile_arguments(model, recorded, **{
                "jit_compile": jit, "steps_per_execution": spe, **change})
            copy.compile(**arguments)
            losses[kind] = loss_on(copy, one)
        except Exception as error:  # TensorFlow's and Keras's errors vary: all are reported
            failed[kind] = f"a copy of the model cannot run it ({first_line(error)})"
            continue
        setups[kind] = (copy, arguments["steps_per_execution"])
    if "base" in failed:
        return [Trial(kind, None, False, None, None, failed["base"].replace(
            "it (", "a step (", 1)) for kind in candidates]
    base = losses["base"]
    timed, trials = {"base": setups["base"]}, {}
    for kind in [kind for kind in candidates if kind in failed]:
        trials[kind] = Trial(kind, None, False, None, base, failed[kind])
    for kind in [kind for kind in candidates if kind not in failed]:
        half = "policy" in candidates[kind]
        tolerance = LOSS_TOLERANCE["half" if half else "float32"]
        gap = abs(losses[kind] - base) / max(abs(base), 1e-6)
        agrees = gap <= tolerance  # NaN fails
        trials[kind] = Trial(kind, None, agrees, losses[kind], base)
        if agrees:
            timed[kind] = setups[kind]
    if len(timed) > 1:
        rates = time_setups({kind: (lambda m=copy: m, spe_) for kind, (copy, spe_)
                             in timed.items()}, lambda model, spe_: None, held, steps)
        for kind in timed:
            if kind != "base":
                trials[kind] = dataclasses.replace(trials[kind],
                                                   ratio=rates[kind] / rates["base"])
    return [trials[kind] for kind in candidates]
