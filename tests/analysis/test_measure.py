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
    assert events == ["clock", "clock", "released"]
