"""``tfopt profile --try``: the changes that measured faster, measured together, as
``tfopt.Run`` applies them: one copy of the model with every model-side change that paid
(precision, ``jit_compile``, steps per call), fed by tfopt's input where that paid, against
the script's own fit, the whole fit timed in alternating rounds.

Gains do not multiply: half precision and XLA may speed up the same kernels, and a step sped
up further waits for input longer. So the whole is measured, not the product of its parts.
Its loss on one batch is checked against the unchanged model first, as each part's was.
"""

from __future__ import annotations

import dataclasses

from tfopt.profile.advice import WORTH
from tfopt.profile.input_trial import alternated
from tfopt.profile.trials import compile_arguments, copy_with_weights, first_line, loss_on
from tfopt.tune.xla import LOSS_TOLERANCE

__all__ = ["Together", "try_together"]

MODEL_KINDS = ("precision", "xla", "steps_per_execution")


@dataclasses.dataclass(frozen=True)
class Together:
    """The measured whole: the parts combined, the fit's ratio against the script's (None
    where not timed, ``reason`` says why), and whether the loss agreed."""

    parts: list[str]
    change: dict
    ratio: float | None
    same_training: bool
    reason: str = ""

    def to_json(self) -> dict:
        return {"kind": "together", "parts": self.parts, "change": self.change,
                "measured_speedup": self.ratio, "same_training": self.same_training,
                **({"reason": self.reason} if self.reason else {})}


def _paid(trial: dict) -> bool:
    ratio = trial.get("measured_speedup")
    return ratio is not None and ratio >= WORTH and trial.get("same_training", True)


def try_together(call, held, trials: list[dict], input_arguments: dict | None,
                 seconds: float) -> Together | None:
    """Measure every change in ``trials`` that paid, at once; None where fewer than two paid
    (one change alone was measured already).

    Args:
        call: The caught fit (its model, compile and fit arguments).
        held: Batches held in memory: the loss check's batch.
        trials: The ``--try`` records so far (``kind``, ``change``, ``measured_speedup``).
        input_arguments: The fit's arguments with tfopt's input, where its trial ran.
        seconds: A round's length at most.
    """
    paid = [trial for trial in trials if _paid(trial)
            and (trial["kind"] in MODEL_KINDS or trial["kind"] == "input_pipeline")]
    if len(paid) < 2:
        return None
    parts = [trial["kind"] for trial in paid]
    change: dict = {}
    for trial in paid:
        if trial["kind"] in MODEL_KINDS:
            change.update(trial["change"])
    model, fit_arguments = call.model, call.arguments
    changed = (dict(input_arguments) if "input_pipeline" in parts and input_arguments
               else dict(fit_arguments))
    one = held.take(1)
    try:
        copy = copy_with_weights(model, next(iter(one))[0], model.get_weights(),
                                 change.get("policy"))
        copy.compile(**compile_arguments(model, call.compile_arguments, **{
            "jit_compile": bool(getattr(model, "jit_compile", False)),
            "steps_per_execution": int(getattr(model, "steps_per_execution", 1) or 1),
            **{key: value for key, value in change.items() if key != "policy"}}))
        base, loss = loss_on(model, one), loss_on(copy, one)
    except Exception as error:  # TensorFlow's and Keras's errors vary: all are reported
        return Together(parts, change, None, False,
                        f"a copy of the model cannot run them ({first_line(error)})")
    tolerance = LOSS_TOLERANCE["half" if "policy" in change else "float32"]
    if not abs(loss - base) / max(abs(base), 1e-6) <= tolerance:  # NaN fails
        return Together(parts, change, None, False,
                        f"its loss on one batch ({loss:.6g}) is not the unchanged "
                        f"model's ({base:.6g})")
    ratio = alternated(call.fit, model, fit_arguments, changed, seconds, changed_model=copy)
    if ratio is None:
        return Together(parts, change, None, True, "the fit ended before a step was timed")
    return Together(parts, change, ratio, True)
