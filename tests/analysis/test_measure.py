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
    # the first iterator only traces the batched drain, and is released before any clock
    assert events == ["released", "clock", "clock", "released"]


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
