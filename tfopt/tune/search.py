"""The largest batch size that fits: doubling, then a binary search, then a safety margin.

:func:`search_batch_size` is the search alone, driven by any ``fits(batch_size) -> bool`` hook
(no TensorFlow needed); :func:`find_batch_size` drives it with real training steps of a Keras
model, in this process or each trial in a fresh one (:mod:`tfopt.tune.trials`). How memory is
measured and why: ``docs/tune.md``.

Example:
    >>> result = search_batch_size(lambda b: b <= 300)
    >>> result.largest_fit, result.recommended
    (296, 264)
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable

from tfopt._validate import flag, number, whole_number
from tfopt.errors import InvalidArgumentError
from tfopt.tune.memory import MemoryProbe, default_budget
from tfopt.tune.model import (
    ModelState,
    check_compiled,
    load_model_spec,
    split_spec,
    synthetic_batch,
)
from tfopt.tune.oom import is_oom_error
from tfopt.tune.results import MARGIN_MULTIPLE, BatchSizeResult, BatchTrial
from tfopt.tune.trials import InProcessTrials, isolated_trial

__all__ = ["apply_margin", "find_batch_size", "search_batch_size"]

logger = logging.getLogger("tfopt")

DEFAULT_MAX_BATCH_SIZE = 4096
DEFAULT_GRANULARITY = 8  # binary-search step; multiples of 8 fill tensor cores and SIMD lanes
DEFAULT_MARGIN = 0.9  # keep 90 % of the largest batch that fit: steps vary in memory use


_POSITIVE = "a positive integer"  # what every count here expects, in its error message


def apply_margin(largest_fit: int, margin: float = DEFAULT_MARGIN,
                 multiple: int = MARGIN_MULTIPLE) -> int:
    """The batch size to use, given the largest that fit: ``margin`` of it, rounded down.

    Rounded down to a multiple of ``multiple`` when the result is at least ``multiple``; below
    that, rounded down to an integer of at least 1.

    Args:
        largest_fit: The largest batch size that fit.
        margin: Fraction kept, in (0, 1]. Defaults to 0.9.
        multiple: Round down to a multiple of this. Defaults to 8.

    Raises:
        InvalidArgumentError: A value out of range.

    Example:
        >>> apply_margin(296)
        264
    """
    largest_fit = whole_number(largest_fit, "largest_fit", 1, _POSITIVE)
    multiple = whole_number(multiple, "multiple", 1, _POSITIVE)
    margin = number(margin, "margin", low=0, high=1, open_low=True,
                    expected="a fraction in (0, 1], e.g. 0.9")
    # 1e-9: 0.9 * 80 is 72.00000000000001 or 71.99999999999999 depending on the operands
    kept = math.floor(largest_fit * margin + 1e-9)
    if kept >= multiple:
        return kept - kept % multiple
    return max(1, kept)


def _as_trial(batch_size: int, answer, seconds: float) -> BatchTrial:
    if isinstance(answer, BatchTrial):
        return answer
    return BatchTrial(batch_size, bool(answer), seconds=seconds)


def search_batch_size(
    fits: Callable[[int], bool | BatchTrial],
    *,
    start: int = 1,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    granularity: int = DEFAULT_GRANULARITY,
    margin: float = DEFAULT_MARGIN,
    on_trial: Callable[[BatchTrial], None] | None = None,
) -> BatchSizeResult:
    """The largest batch size for which ``fits`` says yes: doubling, then binary search.

    Growth: ``start``, ``2*start``, ``4*start``, ... until a trial fails or ``max_batch_size``
    is reached (the limit itself is tried). Then a binary search between the largest size that
    fit and the smallest that failed, over multiples of ``granularity`` (over all integers
    while the largest fit is below ``granularity``). ``fits`` is assumed monotonic (a batch
    that fits makes every smaller one fit). The number of trials is about
    ``log2(largest / start) + log2(largest / granularity)``.

    Args:
        fits: ``fits(batch_size)`` returns True/False or a :class:`BatchTrial`; an exception
            that :func:`is_oom_error` recognises counts as False, any other propagates.
        start: The first batch size tried. Defaults to 1.
        max_batch_size: The largest batch size tried. Defaults to 4096.
        granularity: Step of the binary search. Defaults to 8.
        margin: Fraction of the largest fit recommended. Defaults to 0.9.
        on_trial: Called with each :class:`BatchTrial` as it ends (progress lines).
            Defaults to None.

    Returns:
        A :class:`BatchSizeResult` with every trial.

    Raises:
        InvalidArgumentError: A value out of range.

    Example:
        >>> result = search_batch_size(lambda b: b <= 300)
        >>> result.largest_power_of_two, result.largest_fit, result.recommended
        (256, 296, 264)
    """
    start = whole_number(start, "start", 1, _POSITIVE)
    max_batch_size = whole_number(max_batch_size, "max_batch_size", 1, _POSITIVE)
    granularity = whole_number(granularity, "granularity", 1, _POSITIVE)
    if start > max_batch_size:
        raise InvalidArgumentError(f"start={start} is above max_batch_size={max_batch_size}")
    apply_margin(1, margin)  # validates the margin before any trial runs
    trials: list[BatchTrial] = []

    def attempt(batch_size: int) -> bool:
        began = time.perf_counter()
        try:
            answer = fits(batch_size)
        except Exception as error:
            if not is_oom_error(error):
                raise
            answer = BatchTrial(batch_size, False, seconds=time.perf_counter() - began,
                                detail=f"{type(error).__name__}: out of memory")
        trial = _as_trial(batch_size, answer, time.perf_counter() - began)
        trials.append(trial)
        if on_trial is not None:
            on_trial(trial)
        logger.info("batch-size trial %d: %s", batch_size, "fits" if trial.fits else
                    f"does not fit ({trial.detail})" if trial.detail else "does not fit")
        return trial.fits

    largest, failed, capped = 0, None, False
    size = start
    while True:
        size = min(size, max_batch_size)
        if not attempt(size):
            failed = size
            break
        largest = size
        if size == max_batch_size:
            capped = True
            break
        size *= 2
    if failed is not None:
        # invariant: largest fits (0 = nothing known), failed does not
        while True:
            step = granularity if largest >= granularity else 1
            low, high = largest // step, -(-failed // step)  # candidates: step * (low, high)
            if high - low <= 1:
                break
            candidate = step * ((low + high) // 2)
            if attempt(candidate):
                largest = candidate
            else:
                failed = candidate
    if largest == 0:
        return BatchSizeResult(None, None, tuple(trials), max_batch_size, margin, False)
    recommended = largest if capped else apply_margin(largest, margin)
    return BatchSizeResult(largest, recommended, tuple(trials), max_batch_size, margin, capped)


def find_batch_size(
    model,
    *,
    isolate: bool = False,
    model_kwargs: dict | None = None,
    make_batch: Callable[[int], tuple] | None = None,
    memory_budget: int | None | str = "auto",
    start: int = 1,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    granularity: int = DEFAULT_GRANULARITY,
    margin: float = DEFAULT_MARGIN,
    steps: int = 1,
    trial_timeout: float | None = None,
    on_trial: Callable[[BatchTrial], None] | None = None,
) -> BatchSizeResult:
    """The largest batch size a model trains with, found by real training steps.

    Runs ``steps`` training steps (``model.train_on_batch``) per trial batch size, searching as
    :func:`search_batch_size` does. In process, the model's weights, optimizer variables and
    metrics are restored afterwards (an unbuilt optimizer is built first, so its variables are
    reset to their initial values). With ``isolate=True`` every trial runs in a new Python
    process that builds the model from its spec, so a real GPU OOM cannot leave this process
    in a bad state (each trial then pays for TensorFlow's start-up, a few seconds).

    Args:
        model: A compiled Keras model, or a ``"module:function"`` spec that builds one
            (required with ``isolate=True``).
        isolate: Run each trial in a subprocess. Defaults to False.
        model_kwargs: Keyword arguments for the spec's function. Defaults to none.
        make_batch: ``make_batch(batch_size) -> (x, y)`` for the trials. Defaults to random
            data of the model's input and output shapes (memory depends only on shapes).
            Not available with ``isolate=True``.
        memory_budget: Bytes a trial step may use, standing in for GPU memory on a CPU;
            ``"auto"`` means half of the RAM available now on a CPU-only machine and no
            budget where there is a GPU (its own memory limits). None: no budget.
            Defaults to "auto".
        start: The first batch size tried. Defaults to 1.
        max_batch_size: The largest batch size tried. Defaults to 4096.
        granularity: Step of the binary search. Defaults to 8.
        margin: Fraction of the largest fit recommended. Defaults to 0.9.
        steps: Training steps per trial (the peak of a step is reached in the first).
            Defaults to 1.
        trial_timeout: Seconds an isolated trial may take before it counts as failed.
            Defaults to None (no limit).
        on_trial: Called with each :class:`BatchTrial` as it ends. Defaults to None.

    Returns:
        A :class:`BatchSizeResult`.

    Raises:
        InvalidArgumentError: A bad spec or value, ``isolate=True`` with a model object.
        TfoptError: An isolated trial failed for a reason other than memory.

    Example:
        >>> result = find_batch_size(model, memory_budget=2 << 30)
        >>> print(result.describe())
        >>> model.fit(data.batch(result.recommended))
    """
    from tfopt._tf import import_tensorflow

    tf = import_tensorflow()
    isolate = flag(isolate, "isolate")
    steps = whole_number(steps, "steps", 1, _POSITIVE)
    if trial_timeout is not None:
        trial_timeout = number(trial_timeout, "trial_timeout", low=0, open_low=True,
                               expected="seconds above 0, or None (no limit)")
    model_kwargs = dict(model_kwargs or {})
    budget = default_budget(tf) if memory_budget == "auto" else memory_budget
    if budget is not None:
        budget = whole_number(budget, "memory_budget", 1, _POSITIVE)
    notes = []
    search = dict(start=start, max_batch_size=max_batch_size, granularity=granularity,
                  margin=margin, on_trial=on_trial)
    if isolate:
        if not isinstance(model, str):
            raise InvalidArgumentError(
                f"isolate=True needs the model as a 'module:function' spec (each trial builds "
                f"it in a new process), got a {type(model).__name__}")
        if make_batch is not None:
            raise InvalidArgumentError("make_batch cannot cross into isolated trials: leave it "
                                       "unset (trials use random data of the model's shapes)")
        split_spec(model)  # the child imports it; its form is checked here, before a trial
        result = search_batch_size(
            lambda b: isolated_trial(model, model_kwargs, b, steps, budget, trial_timeout),
            **search)
        measure = "isolated"
        notes.append("each trial ran in its own process")
    else:
        if isinstance(model, str):
            model = load_model_spec(model, **model_kwargs)
        check_compiled(model, "find_batch_size")
        state = ModelState(model)
        probe = MemoryProbe(tf, state.variable_bytes()) if budget is not None or \
            tf.config.list_logical_devices("GPU") else None
        batch_fn = make_batch or (lambda b: synthetic_batch(model, b))
        trials = InProcessTrials(model, batch_fn, steps, budget, probe)
        try:
            result = search_batch_size(trials, **search)
        finally:
            state.restore()
        measure = probe.kind if probe else "none"
        if measure == "rss":
            notes.append("memory is the process's resident-memory growth during a step plus the "
                         "variables: approximate, on the large side, and interpolated for "
                         "trials smaller than one already run; for exact numbers set "
                         "TF_CPU_ALLOCATOR_USE_BFC=1 before TensorFlow starts, or isolate=True")
    if make_batch is None:
        notes.append("trials trained on random data of the model's shapes")
    return dataclasses.replace(result, memory_budget=budget, memory_measure=measure,
                               notes=tuple(notes))

