"""Measured rates, drained in-graph: elements per second of a dataset for a time budget.

Python's ``next()`` costs 70-200 us per element, more than many stages; here a ``tf.function``
pulls ``chunk`` elements per call in a ``tf.while_loop`` (``get_next_as_optional``, so a finite
dataset ends cleanly), the chunk grows until a call takes about 20 ms, and the rate is counted
after a warm-up (buffers filling, AUTOTUNE's first choices); the budget starts at the first
element. An infinite ``repeat()`` is fine: the budget ends the draining, not the data.
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
    # the warm-up (a list of a few files) is timed whole, and tracing took 0.3 s of it here
    _drain(iterator, tf.constant(0, tf.int64))
    begin = clock()
    total, done = (int(value) for value in _drain(iterator, tf.constant(1, tf.int64)))
    # the budget starts at the first element: the wait for it (a shuffle buffer filling, 0.4 s
    # for a repeated shuffle of records here) is start-up, and a share shorter than the wait
    # once measured one element in it, a rate of 2 records a second
    start = clock()
    if done:
        return Measurement(total, max(start - begin, 1e-9), True, total)
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
    if counted_from is None or counted == 0:  # ended (or one slow call) inside the warm-up
        return Measurement(total - 1, max(after - start, 1e-9), done, total) if total > 1 else (
            Measurement(total, max(after - begin, 1e-9), done, total))
    return Measurement(counted, max(after - counted_from, 1e-9), done, total)
