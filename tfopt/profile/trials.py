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

__all__ = ["Trial", "TRIAL_STEPS", "try_changes"]

TRIAL_STEPS = 32  # steps per timed round: whole calls for 1 and 16 steps per call
MORE_STEPS_PER_CALL = 16


@dataclasses.dataclass(frozen=True)
class Trial:
    """One candidate measured: its step ratio against the unchanged copy (None where its loss
    disagreed and it was not timed), whether the loss agreed, and the two losses."""

    kind: str
    ratio: float | None
    same_training: bool
    loss: float
    base_loss: float


def _compile_arguments(model, recorded: dict, **changes) -> dict:
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


def _copy(model, batch, weights, policy: str | None):
    copy = copy_model(model)
    if not copy.built:
        copy(batch)
    copy.set_weights(weights)
    if policy is not None:
        compute_in(copy, policy)
    return copy


def _loss(model, batch) -> float:
    with quiet_fit_warnings():
        return float(model.evaluate(batch, verbose=0, return_dict=True)["loss"])


def try_changes(model, recorded: dict, held: tf.data.Dataset, candidates: dict) -> list[Trial]:
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
    setups = {}
    for kind, change in {"base": {}, **candidates}.items():
        change = dict(change)
        copy = _copy(model, x, weights, change.pop("policy", None))
        arguments = _compile_arguments(model, recorded, **{
            "jit_compile": jit, "steps_per_execution": spe, **change})
        copy.compile(**arguments)
        setups[kind] = (copy, arguments["steps_per_execution"])
    losses = {kind: _loss(copy, one) for kind, (copy, _) in setups.items()}
    base = losses["base"]
    timed, trials = {"base": setups["base"]}, {}
    for kind in candidates:
        half = "policy" in candidates[kind]
        tolerance = LOSS_TOLERANCE["half" if half else "float32"]
        gap = abs(losses[kind] - base) / max(abs(base), 1e-6)
        agrees = gap <= tolerance  # NaN fails
        trials[kind] = Trial(kind, None, agrees, losses[kind], base)
        if agrees:
            timed[kind] = setups[kind]
    if len(timed) > 1:
        rates = time_setups({kind: (lambda m=copy: m, spe_) for kind, (copy, spe_)
                             in timed.items()}, lambda model, spe_: None, held, TRIAL_STEPS)
        for kind in timed:
            if kind != "base":
                trials[kind] = dataclasses.replace(trials[kind],
                                                   ratio=rates[kind] / rates["base"])
    return [trials[kind] for kind in candidates]
