"""Measured rates, drained in-graph: elements per second of a dataset for a time budget.

Python's ``next()`` costs more per element than many stages do, so a ``tf.function`` pulls
``chunk`` elements per call in a ``tf.while_loop`` (``get_next_as_optional``, so a finite
dataset ends cleanly), the chunk grows until a call is long enough that the call's own cost is
lost in it (``_CALL_SECONDS``), and the rate is counted after a warm-up (buffers filling,
AUTOTUNE's first choices); the budget starts at the first element. An infinite ``repeat()``
is fine: the budget ends the draining, not the data.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import tensorflow as tf

_CALL_SECONDS = 0.02
_WARMUP_FRACTION = 0.3


@dataclass(frozen=True)
class Measurement:
    elements: int  # counted after the warm-up (all of them when the data ended during it)
    seconds: float
    exhausted: bool  # the dataset ended before the budget did
    total: int = 0  # every element drained, the warm-up's included (a whole pass if exhausted)
    wall: float = 0.0  # from the first call to the last element: the wait for the first included

    @property
    def rate(self) -> float:
        return self.elements / self.seconds if self.seconds > 0 else 0.0


@tf.function(reduce_retracing=True)
def _drain(iterator, n):
    def cond(count, done):
        return tf.logical_and(count < n, tf.logical_not(done))

    def body(count, done):
        has_value = iterator.get_next_as_optional().has_value()
        return count + tf.cast(has_value, tf.int64), tf.logical_not(has_value)

    count, done = tf.while_loop(cond, body, [tf.constant(0, tf.int64), tf.constant(False)])
    return count, done


def drain(iterator, seconds: float, clock=time.perf_counter,
          warmup: float | None = None) -> Measurement:
    """Pull elements from ``iterator`` for about ``seconds`` from its first element; the rate
    after the warm-up (``warmup`` seconds, default 30% of ``seconds``; the budget then runs on
    after it)."""
    # trace for this iterator's elements before the clock starts: a prefix that ends within
    # the warm-up (a list of a few files) is timed whole, and tracing would be most of it
    _drain(iterator, tf.constant(0, tf.int64))
    begin = clock()
    total, done = (int(value) for value in _drain(iterator, tf.constant(1, tf.int64)))
    # the budget starts at the first element: the wait for it (a shuffle buffer filling) is
    # start-up, and a budget that counted it could end within the wait and count a single
    # element, a rate that says nothing of the pipeline
    start = clock()
    if done:
        return Measurement(total, max(start - begin, 1e-9), True, total, start - begin)
    warm_until = start + (_WARMUP_FRACTION * seconds if warmup is None else warmup)
    end = start + seconds + (0.0 if warmup is None else warmup)
    chunk, counted, counted_from, after = 2, 0, None, start
    while True:
        before = clock()
        count, done = _drain(iterator, tf.constant(chunk, tf.int64))
        count, done = int(count), bool(done)
        after = clock()
        total += count
        if counted_from is not None:
            counted += count
        elif after >= warm_until:
            counted_from = after  # the warm-up ends with this call
        if done or after >= end:
            break
        if after - before < _CALL_SECONDS:
            chunk = min(chunk * 2, 1 << 20)
    wall = after - begin
    if counted_from is None or counted == 0:  # ended (or one slow call) inside the warm-up
        return Measurement(total - 1, max(after - start, 1e-9), done, total, wall) if total > 1 \
            else Measurement(total, max(wall, 1e-9), done, total, wall)
    return Measurement(counted, max(after - counted_from, 1e-9), done, total, wall)


def finish_pass(iterator, drained: Measurement, clock=time.perf_counter) -> Measurement:
    """The pass ``drain`` began on ``iterator``, drained to its end and timed whole from the
    first call: a whole pass without starting another (for a shuffle of all the data, a new
    pass means filling its buffer again; that doubled the analysis of a photo pipeline)."""
    if drained.exhausted:
        return Measurement(drained.total, max(drained.wall, 1e-9), True, drained.total,
                           drained.wall)
    start = clock()
    total = drained.total + _to_end(iterator)
    wall = drained.wall + clock() - start
    return Measurement(total, max(wall, 1e-9), True, total, wall)


def whole_passes(dataset, seconds: float, skip: int = 0, clock=time.perf_counter,
                 first: Measurement | None = None, spent_before: float = 0.0) -> Measurement:
    """The rate of a finite ``dataset`` over whole passes, each from a new iterator to its end
    (as epochs run: a shuffle buffer's filling and the iterator's start-up included), for
    about ``seconds`` and at least one pass, after ``skip`` untimed passes (a cache filling).
    ``first``: a pass already timed (:func:`finish_pass`), counted as the first of them where
    it took ``seconds`` or more; a shorter one is timed again. ``spent_before``: seconds of the
    budget already spent on this dataset (the drain that found its pass short): the passes
    get the rest, and at least one.
    Where every element has a static shape, a pass is pulled in batches (``batch(256)``):
    pulling element by element costs more per element than many stages do.

    A rate read inside one pass is not the pass's rate: a shuffle yields nothing while its
    buffer fills and then empties it without waiting on its input (a window late in a pass of
    a decode-bound pipeline reads well above its epoch rate).
    """
    if int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY:
        # no pass ends: drained instead (a caller with a cache to fill gives drain a warm-up)
        return drain(iter(dataset), seconds)
    # pulled a batch at a time where every element has a static shape: pulling each element
    # through get_next_as_optional costs more than a cheap stage's work on it, enough to make
    # the source of small elements (a translation pipeline's sentence pairs) its bottleneck
    # when a far costlier map comes after it
    batched = _batched(dataset)
    passes, to_end = (dataset, _to_end) if batched is None else (batched, _rows_to_end)
    if batched is not None:
        # traced and run once for these elements before any clock starts, on an iterator
        # that yields nothing: a new structure's trace, and its function's first run, are
        # start-up, and counted in a short prefix's pass they made a source of a few dozen
        # paths the bottleneck of an image pipeline
        _drain_rows(iter(batched.take(0)))
    for _ in range(skip):
        to_end(iter(passes))
    elements, spent = (0, 0.0)
    # the budget is kept in wall time too: each pass's iterator is released outside the clock
    # (below), and where passes are a few milliseconds long, as a cached prefix's are, the
    # releases took as long as the passes and doubled the analysis
    deadline = clock() + seconds - spent_before
    if first is not None and first.wall >= seconds:
        # a pass as long as the budget is counted, not run again; a shorter one is timed again
        # (it was pulled element by element; and every prefix of a pipeline is then timed
        # alike: a cache's filling pass counted for some and not others made a batch after a
        # cache read far costlier than the shuffle under it)
        elements, spent = first.total, first.wall
    while (spent < seconds - spent_before and clock() < deadline) or elements == 0:
        start = clock()
        iterator = iter(passes)
        count = to_end(iterator)
        spent += clock() - start
        # released after the clock stops: with autotuning on, TensorFlow (2.21) now and then
        # blocks an iterator's release until its tuning thread's current sleep ends (the
        # sleeps double, up to a minute), a stall of up to the pass's own length that says
        # nothing of the pipeline
        del iterator
        elements += count
        if count == 0:
            break
    return Measurement(elements, max(spent, 1e-9), True, elements)


_PASS_BATCH = 256


def _batched(dataset):
    """``dataset.batch(_PASS_BATCH)`` where every part of its elements is a tensor of static
    shape (batching then copies, and never fails on shapes), else None."""
    parts = tf.nest.flatten(dataset.element_spec)
    if not parts or not all(isinstance(part, tf.TensorSpec) and part.shape.is_fully_defined()
                            and part.dtype not in (tf.variant, tf.resource) for part in parts):
        return None
    return dataset.batch(_PASS_BATCH)


@tf.function(reduce_retracing=True)
def _drain_rows(iterator):
    """Every remaining element of a batched iterator: the rows of all its batches."""
    def cond(rows, done):
        return tf.logical_not(done)

    def body(rows, done):
        optional = iterator.get_next_as_optional()
        has_value = optional.has_value()
        count = tf.cond(has_value, lambda: tf.shape(
            tf.nest.flatten(optional.get_value())[0], out_type=tf.int64)[0],
            lambda: tf.constant(0, tf.int64))
        return rows + count, tf.logical_not(has_value)

    rows, _ = tf.while_loop(cond, body, [tf.constant(0, tf.int64), tf.constant(False)])
    return rows


def _rows_to_end(iterator) -> int:
    return int(_drain_rows(iterator))


def _to_end(iterator) -> int:
    total, chunk = 0, 1 << 10
    while True:
        count, done = _drain(iterator, tf.constant(chunk, tf.int64))
        total += int(count)
        if bool(done):
            return total
        chunk = min(chunk * 2, 1 << 20)


def rate(dataset, seconds: float, whole_passes_within: float = 0.0) -> Measurement:
    """The rate of ``dataset``: drained for ``seconds``, or over whole passes where a pass
    ended within that time, or where its cardinality is finite and a pass should take at most
    ``whole_passes_within`` seconds at the drained rate (0: only when one ended)."""
    iterator = iter(dataset)
    measured = drain(iterator, seconds)
    if needs_whole_passes(dataset, measured, whole_passes_within):
        return whole_passes(dataset, seconds, first=finish_pass(iterator, measured))
    return measured


def needs_whole_passes(dataset, drained: Measurement, within: float = 0.0) -> bool:
    """Whether ``dataset``'s rate should come from whole passes rather than from ``drained``:
    its pass ended inside the drain, or (``within`` > 0) its cardinality is finite and a pass
    takes at most ``within`` seconds at the drained rate."""
    if drained.exhausted:
        return True
    if within <= 0 or drained.rate <= 0:
        return False
    length = int(dataset.cardinality())
    return length > 0 and length / drained.rate <= within
