"""Machine facts: the peak-memory probe the benchmarks report per method."""

from __future__ import annotations

import sys

import pytest

from tfopt._system import available_memory, peak_rss, reset_peak_rss


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reset is Linux's")
def test_peak_rss_sees_an_allocation_and_resets_after_it():
    assert reset_peak_rss()
    before = peak_rss()
    block = bytearray(256 << 20)  # zero-filled, so every page is touched
    assert peak_rss() >= before + (200 << 20)
    del block
    assert reset_peak_rss()
    assert peak_rss() < before + (100 << 20)  # the peak now starts from today's, smaller, RSS


def test_available_memory_is_a_positive_byte_count():
    assert available_memory() > 1 << 20
