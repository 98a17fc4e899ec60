"""Which batch size trains fastest: a few timed steps per batch size, examples/s for each.

:func:`throughput_sweep` times a compiled Keras model; :func:`pick_batch_size` chooses from the
rates: the fastest, or the smallest within ``tolerance`` of it (smaller batches generalise as
well or better and leave memory free).

Example:
    >>> sweep = throughput_sweep(model, [32, 64, 128], steps=10)
    >>> sweep.chosen
    64
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tfopt._validate import flag, number, whole_number
from tfopt.errors import InvalidArgumentError
from tfopt.tune.model import ModelState, check_compiled, synthetic_batch
from tfopt.tune.results import SweepPoint, SweepResult

__all__ = ["pick_batch_size", "throughput_sweep"]

logger = logging.getLogger("tfopt")

DEFAULT_TOLERANCE = 0.05  # the sweep's "within 5 % of the best"


def pick_batch_size(rates: dict[int, float], tolerance: float = DEFAULT_TOLERANCE) -> tuple[int, int]:
    """The best batch size by examples/s, and the smallest within ``tolerance`` of it.

    Args:
        rates: Examples/s per batch size.
        tolerance: Fraction of the best's examples/s a smaller batch may lose, in [0, 1).
            Defaults to 0.05.

    Returns:
        ``(best, chosen)``.

    Raises:
        InvalidArgumentError: No rates, or a tolerance out of range.

    Example:
        >>> pick_batch_size({32: 900.0, 64: 980.0, 128: 1000.0})
        (128, 64)
    """
    if not rates:
        raise InvalidArgumentError("rates is empty: sweep at least one batch size")
    tolerance = number(tolerance, "tolerance", low=0, high=1, open_high=True,
                       expected="a fraction in [0, 1), e.g. 0.05 for 5 %")
    best = max(rates, key=lambda b: (rates[b], -b))
    floor = rates[best] * (1 - tolerance)
    chosen = min(b for b, rate in rates.items() if rate >= floor)
    return best, chosen


def throughput_sweep(
    model,
    batch_sizes: Sequence[int],
    *,
    dataset_fn: Callable[[int], Any] | None = None,
    steps: int = 10,
    warmup: int = 2,
    tolerance: float = DEFAULT_TOLERANCE,
    restore: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    on_point: Callable[[SweepPoint], None] | None = None,
) -> SweepResult:
    """Training examples/s of a model at each batch size, and the batch size to pick.

    For each batch size: ``warmup`` untimed steps (tracing, allocator growth), then ``steps``
    steps timed one by one with ``clock``; examples/s is the batch size over the median step
    time, which shrugs off a step disturbed by other work on the machine. With ``dataset_fn``
    each step takes its next batch from that dataset, so input time counts as in ``fit``;
    without it one random batch of the model's shapes is reused (compute only).

    Args:
        model: A compiled Keras model.
        batch_sizes: The batch sizes to time, e.g. ``[32, 64, 128]``.
        dataset_fn: ``dataset_fn(batch_size)`` returns an iterable of ``(x, y)`` batches
            (a ``tf.data.Dataset``, repeating or long enough; a tfopt pipeline built with
            ``cache=False``, since a few steps would only fill a cache in part: see
            ``docs/data.md``). Defaults to random data.
        steps: Timed steps per batch size. Defaults to 10.
        warmup: Untimed steps first. Defaults to 2.
        tolerance: See :func:`pick_batch_size`. Defaults to 0.05.
        restore: Put back weights and optimizer variables afterwards. Defaults to True.
        clock: Time source in seconds. Defaults to time.perf_counter.
        on_point: Called with each :class:`SweepPoint` as it is measured. Defaults to None.

    Returns:
        A :class:`SweepResult`.

    Raises:
        InvalidArgumentError: No batch sizes, a count below 1, a dataset that ran out.

    Example:
        >>> sweep = throughput_sweep(model, [32, 64, 128], steps=10)
        >>> print(sweep.describe()); sweep.chosen
        64
    """
    check_compiled(model, "throughput_sweep")
    if isinstance(batch_sizes, (str, bytes)) or not isinstance(batch_sizes, Iterable):
        raise InvalidArgumentError(
            f"batch_sizes={batch_sizes!r}: expected a list of batch sizes, e.g. [32, 64, 128] "
            f"(one size: [{batch_sizes!r}])")
    sizes = [whole_number(b, "batch size", 1, "a positive integer") for b in batch_sizes]
    if not sizes:
        raise InvalidArgumentError("batch_sizes is empty: give at least one, e.g. [32, 64, 128]")
    steps = whole_number(steps, "steps", 1, "a positive integer")
    warmup = whole_number(warmup, "warmup", 0, "an integer >= 0")
    pick_batch_size({1: 1.0}, tolerance)  # validate before the slow part
    state = ModelState(model) if flag(restore, "restore") else None
    points = []
    try:
        for batch_size in sizes:
            if dataset_fn is None:
                fixed = synthetic_batch(model, batch_size)
                batches = iter(lambda fixed=fixed: fixed, None)  # the same batch forever
            else:
                batches = iter(dataset_fn(batch_size))
            times = []
            for index in range(warmup + steps):
                began = clock()
                try:
                    x, y = next(batches)
                except StopIteration:
                    raise InvalidArgumentError(
                        f"dataset_fn({batch_size}) ran out after {index} batches; it needs "
                        f"{warmup + steps} (use .repeat())") from None
                model.train_on_batch(x, y)  # returns host values: the step has finished
                if index >= warmup:
                    times.append(clock() - began)
            median = statistics.median(times)
            rate = batch_size / median if median > 0 else math.inf
            points.append(SweepPoint(batch_size, rate, median, steps))
            if on_point is not None:
                on_point(points[-1])
            logger.info("batch-size sweep %d: %.1f examples/s", batch_size, rate)
    finally:
        if state is not None:
            state.restore()
    best, chosen = pick_batch_size({p.batch_size: p.examples_per_second for p in points},
                                   tolerance)
    return SweepResult(tuple(points), best, chosen, tolerance, synthetic=dataset_fn is None)
