"""tfopt.analysis.measure: how a pass is timed."""

from __future__ import annotations

import builtins
import weakref

from analysis_helpers import tf

from tfopt.analysis import measure


def test_a_pass_is_timed_to_its_last_element_and_its_iterator_released_after(monkeypatch):
    # with autotuning on, TensorFlow 2.21 now and then holds an iterator's release until its
    # tuning thread wakes (seconds): a pass's time must end at its last element, before it
    events = []

    def tracked_iter(dataset):
        iterator = builtins.iter(dataset)
        weakref.finalize(iterator, events.append, "released")
        return iterator

    def clock():
        events.append("clock")
        return float(len(events))

    monkeypatch.setattr(measure, "iter", tracked_iter, raising=False)
    measured = measure.whole_passes(tf.data.Dataset.range(10), 0.0, clock=clock)
    assert measured.elements == 10
    # the first iterator only traces the batched drain, and is released before any clock;
    # the first reading is the budget's deadline, then the pass's start and end
    assert events == ["released", "clock", "clock", "clock", "released"]


def test_the_releases_between_passes_count_against_the_budget(monkeypatch):
    # released outside the pass's time, but not outside the budget: passes of a few
    # milliseconds, each released as slowly as it ran, took twice the budget
    now = [0.0]

    def clock():
        now[0] += 0.001
        return now[0]

    def slowly_released_iter(dataset):
        iterator = builtins.iter(dataset)
        weakref.finalize(iterator, now.__setitem__, 0, now[0] + 0.1)
        return iterator

    monkeypatch.setattr(measure, "iter", slowly_released_iter, raising=False)
    measured = measure.whole_passes(tf.data.Dataset.range(10), 1.0, clock=clock)
    # about 1 s / 0.1 s passes, where counting the passes' time alone ran about 500
    assert 5 * 10 <= measured.elements <= 15 * 10, measured
    assert measured.seconds < 0.1  # the rate is still the passes' own time


def test_a_share_already_spent_leaves_the_passes_the_rest_and_at_least_one():
    now = [0.0]

    def clock():
        now[0] += 0.01
        return now[0]

    def passes(**spent):
        return measure.whole_passes(tf.data.Dataset.range(10), 1.0, clock=clock,
                                    **spent).elements // 10

    assert passes(spent_before=1.5) == 1
    assert 5 <= passes(spent_before=0.8) <= 12 < 25 <= passes() <= 60


def test_whole_passes_count_every_element_batched_or_not():
    # static shapes: pulled a batch at a time (a last, partial batch included); ragged sizes
    # cannot be batched and are pulled element by element
    assert measure.whole_passes(tf.data.Dataset.range(1000), 0.0).elements == 1000
    varied = tf.data.Dataset.range(1, 40).map(lambda n: tf.zeros([n]))
    assert measure._batched(varied) is None
    assert measure.whole_passes(varied, 0.0).elements == 39
    pairs = tf.data.Dataset.from_tensor_slices((["a"] * 300, list(range(300))))
    measured = measure.whole_passes(pairs, 0.05)
    assert measured.elements % 300 == 0 and measured.elements >= 300
