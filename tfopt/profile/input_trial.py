"""``tfopt profile --try`` for the input: the fit's own input against tfopt's, measured.

For a ``tf.data.Dataset``, tfopt's input is :func:`tfopt.optimize`'s rewrite of it (the same
elements in the same order: parallel calls, prefetch, a cache where it fits); for arrays or a
DataFrame, the in-memory ``tf.data`` pipeline ``tfopt.Run`` builds for them (the same
examples, shuffled anew each pass as Keras shuffles arrays). Both are timed as the profile
times the fit itself: Keras's ``fit`` on the script's model, the input the only difference,
in alternating rounds whose medians count. Each round opens a new iterator, so a cache the
rewrite adds is filling in every round: the ratio is the first epoch's, the least the
rewrite gives.
"""

from __future__ import annotations

import dataclasses

from tfopt.profile.measure import ROUNDS, median_rate, time_fit

__all__ = ["InputTrial", "try_input"]

DEFAULT_BATCH = 32  # Keras's fit batches arrays by 32 where no batch_size is given
OPTIMIZE_SECONDS = 6.0  # tfopt.optimize's own analysis and measurement


@dataclasses.dataclass(frozen=True)
class InputTrial:
    """The input trial's outcome: the ratio of the fit's rate on tfopt's input over its rate
    on the script's (None where nothing was timed), what tfopt's input changed, and why it
    was not timed where it was not."""

    ratio: float | None
    changes: list[str]
    reason: str = ""


def _optimized(x) -> tuple[object | None, list[str], str]:
    from tfopt.analysis.optimize import optimize
    from tfopt.errors import TfoptError

    try:
        optimization = optimize(x, seconds=OPTIMIZE_SECONDS, report=True)
    except TfoptError as error:
        return None, [], f"tfopt.optimize cannot rewrite this pipeline: {error}"
    changes = [f"{change.kind} ({change.stage})" for change in optimization.changes]
    if not changes:
        return None, [], "tfopt.optimize finds no rewrite that pays on this pipeline"
    return optimization.dataset, changes, ""


def _in_memory(arguments: dict) -> tuple[dict | None, list[str], str]:
    from tfopt.data.input_pipeline import array_batches, array_steps
    from tfopt.data.inputs import read_input
    from tfopt.errors import TfoptError

    parts = [arguments.get("x"), arguments.get("y")]
    if arguments.get("sample_weight") is not None:
        parts.append(arguments["sample_weight"])
    if parts[1] is None:
        return None, [], "the fit's arrays come without y (a dataset-like x): not tried"
    try:
        arrays = read_input(tuple(parts))
    except TfoptError as error:
        return None, [], f"tfopt.Run would not take these arrays: {error}"
    batch = int(arguments.get("batch_size") or DEFAULT_BATCH)
    dataset = array_batches(arrays, arrays.x, batch, training=True, seed=0)
    call = {"x": dataset, "steps_per_epoch": array_steps(len(arrays), batch, False)}
    return call, ["an in-memory tf.data pipeline (tfopt.Run's for arrays and DataFrames): "
                  "batches gathered in parallel, prefetched"], ""


def _kept(arguments: dict) -> dict:
    """The script's fit arguments that still apply with another input (its class weights,
    initial epoch); the input's own (x, y, batch size, shuffling, validation) are replaced."""
    dropped = {"x", "y", "sample_weight", "batch_size", "shuffle", "validation_split",
               "validation_data", "validation_steps", "validation_batch_size",
               "validation_freq", "steps_per_epoch"}
    return {key: value for key, value in arguments.items() if key not in dropped}


def try_input(fit, model, arguments: dict, kind: str, seconds: float) -> InputTrial:
    """Time the fit on tfopt's input against the script's, ``ROUNDS`` rounds each,
    alternating, ``seconds`` a round at most."""
    if kind == "dataset":
        dataset, changes, reason = _optimized(arguments["x"])
        candidate = None if dataset is None else {
            "x": dataset, "steps_per_epoch": arguments.get("steps_per_epoch")}
    elif kind in ("arrays", "dataframe"):
        candidate, changes, reason = _in_memory(arguments)
    else:
        return InputTrial(None, [], f"a {kind} input: tfopt has no rewrite to try for it")
    if candidate is None:
        return InputTrial(None, [], reason)
    changed = {**_kept(arguments), **candidate}
    plain_rates, tfopt_rates = [], []
    for _ in range(ROUNDS):
        plain = time_fit(fit, model, arguments, 1, 1_000_000, seconds)
        faster = time_fit(fit, model, changed, 1, 1_000_000, seconds)
        if plain is not None and faster is not None:
            plain_rates.append(plain)
            tfopt_rates.append(faster)
    if not plain_rates:
        return InputTrial(None, changes, "the fit ended before a step could be timed")
    ratio = (median_rate(tfopt_rates).examples_per_s / median_rate(plain_rates).examples_per_s)
    return InputTrial(ratio, changes)
