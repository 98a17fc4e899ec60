"""``tfopt profile --try`` for the input: the fit's own input against tfopt's, measured.

For a ``tf.data.Dataset``, tfopt's input is :func:`tfopt.optimize`'s rewrite of it (the same
elements in the same order: parallel calls, prefetch, a cache where it fits); for arrays or a
DataFrame, the in-memory ``tf.data`` pipeline ``tfopt.Run`` builds for them (the same
examples, shuffled anew each pass as Keras shuffles arrays). Both are timed as the profile
times the fit itself: Keras's ``fit`` on the script's model, the input the only difference,
in alternating rounds whose medians count. Each round opens a new iterator, so a cache the
rewrite adds fills in every round: that ratio is the first epoch's. Where a pass takes at most
:data:`FILL_SECONDS`, one pass is read first and the rounds run again on the filled cache:
the ratio of the epochs after the first, what a fit of several epochs mostly runs at.
"""

from __future__ import annotations

import dataclasses
import time

from tfopt.profile.measure import ROUNDS, median_rate, time_fit

__all__ = ["InputTrial", "alternated", "try_input"]

DEFAULT_BATCH = 32  # Keras's fit batches arrays by 32 where no batch_size is given
OPTIMIZE_SECONDS = 6.0  # tfopt.optimize's own analysis and measurement
FILL_SECONDS = 30.0  # a cache is filled for the trial where one pass takes at most this


@dataclasses.dataclass(frozen=True)
class InputTrial:
    """The input trial's outcome: the ratio of the fit's rate on tfopt's input over its rate
    on the script's (None where nothing was timed), what tfopt's input changed, and why it
    was not timed where it was not. Where the rewrite caches, ``ratio`` is the epochs' after
    the first (the cache filled by one pass first) and ``first_epoch_ratio`` the first's."""

    ratio: float | None
    changes: list[str]
    reason: str = ""
    first_epoch_ratio: float | None = None
    fit_arguments: dict | None = dataclasses.field(default=None, compare=False)  # tfopt's


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
    ratio = alternated(fit, model, arguments, changed, seconds)
    if ratio is None:
        return InputTrial(None, changes, "the fit ended before a step could be timed")
    if kind != "dataset" or not any(change.startswith("cache") for change in changes):
        return InputTrial(ratio, changes, fit_arguments=changed)
    if not _filled(candidate["x"]):
        return InputTrial(ratio, changes, first_epoch_ratio=ratio, fit_arguments=changed)
    cached = alternated(fit, model, arguments, changed, seconds)  # the epochs after the first
    return InputTrial(cached or ratio, changes, first_epoch_ratio=ratio, fit_arguments=changed)


def alternated(fit, model, arguments: dict, changed: dict, seconds: float,
               changed_model=None) -> float | None:
    """The fit's rate with ``changed`` (and ``changed_model``, by default the same model) over
    its rate with ``arguments``: the medians of ``ROUNDS`` alternating rounds; None where no
    round timed a step."""
    changed_model = model if changed_model is None else changed_model
    plain_rates, tfopt_rates = [], []
    for _ in range(ROUNDS):
        plain = time_fit(fit, model, arguments, 1, 1_000_000, seconds)
        faster = time_fit(fit, changed_model, changed, 1, 1_000_000, seconds)
        if plain is not None and faster is not None:
            plain_rates.append(plain)
            tfopt_rates.append(faster)
    if not plain_rates:
        return None
    return median_rate(tfopt_rates).examples_per_s / median_rate(plain_rates).examples_per_s


def _filled(dataset) -> bool:
    """Read one whole pass of ``dataset`` so that its cache holds it (an in-memory cache
    serves every later iterator once one pass completed), within :data:`FILL_SECONDS`; a pass
    that takes longer is left unread (its partial cache is dropped) and False returned."""
    import tensorflow as tf

    if int(dataset.cardinality()) in (int(tf.data.INFINITE_CARDINALITY), 0):
        return False
    deadline = time.monotonic() + FILL_SECONDS
    for _ in dataset:
        if time.monotonic() > deadline:
            return False
    return True
