"""The shared pipeline rules (tfopt/rules.py) on hand-made numbers: the memory default, the
cache share and placement, the shuffle buffer, the interleave cycle and the store-smaller rule
that the builder's planner, tfopt.analyze and convert all decide by."""

from __future__ import annotations

import pytest

from tfopt import rules
from tfopt.rules import CacheFallback, CacheMode, ShuffleShortfall

GIB = 1 << 30


def test_the_memory_default_and_the_cache_share():
    assert rules.default_ram_budget(16 * GIB) == 8 * GIB
    assert rules.cache_allowance(10 * GIB) == 6 * GIB
    assert rules.cache_fits(6 * GIB, 10 * GIB) and not rules.cache_fits(6 * GIB + 1, 10 * GIB)


def test_the_cache_goes_to_the_highest_stage_that_fits():
    assert rules.choose_cache(CacheMode.DECODED, 5 * GIB, GIB, 10 * GIB) == rules.CacheChoice(
        CacheMode.DECODED, 5 * GIB)
    assert rules.choose_cache(CacheMode.DECODED, 7 * GIB, GIB, 10 * GIB) == rules.CacheChoice(
        CacheMode.ENCODED, GIB, CacheFallback.TOO_LARGE)
    assert rules.choose_cache(CacheMode.FINAL, None, GIB, 10 * GIB).fallback is (
        CacheFallback.SIZE_UNKNOWN)
    nothing = rules.choose_cache(CacheMode.DECODED, 70 * GIB, 7 * GIB, 10 * GIB)
    assert nothing.mode is CacheMode.NONE and nothing.fallback is CacheFallback.NOTHING_FITS
    # a cache freezes the file order of the pass that fills it: files shuffle only without one
    assert rules.shuffle_files_before(CacheMode.NONE)
    assert not any(rules.shuffle_files_before(mode) for mode in
                   (CacheMode.ENCODED, CacheMode.DECODED, CacheMode.FINAL))


@pytest.mark.parametrize("buffer, epoch, batch, expected", [
    (10, 100_000, 32, ShuffleShortfall.BELOW_BATCH),
    (500, 100_000, 32, ShuffleShortfall.BELOW_EPOCH_FRACTION),
    (1_000, 100_000, 32, None),
    (20, 20, 32, None),  # the whole epoch: a full shuffle
    (5, None, None, None),  # nothing to judge it by
])
def test_what_a_shuffle_buffer_falls_short_of(buffer, epoch, batch, expected):
    assert rules.shuffle_shortfall(buffer, epoch, batch) is expected


def test_the_builders_buffer_meets_the_rule_analyze_judges_by():
    # 32 MiB holds 170 decoded 256-px images: raised to 1 % of a 50,000-image epoch
    image = 256 * 256 * 3
    buffer = rules.shuffle_buffer(shuffle_bytes=32 << 20, element_bytes=image,
                                  epoch_records=50_000, batch_size=32)
    assert (32 << 20) // image == 170
    assert buffer == rules.ShuffleBuffer(500, 500 * image, True)
    # as far as the RAM left allows: 300 of them, and the rule says it falls short
    tight = rules.shuffle_buffer(shuffle_bytes=32 << 20, element_bytes=image,
                                 epoch_records=50_000, batch_size=32, ram_left=300 * image)
    assert tight.records == 300 and not tight.mixes
    # small records: the cap, never more than the epoch
    assert rules.shuffle_buffer(shuffle_bytes=32 << 20, element_bytes=60, epoch_records=10**6,
                                batch_size=64).records == rules.MAX_SHUFFLE_ELEMENTS
    assert rules.shuffle_buffer(shuffle_bytes=32 << 20, element_bytes=60, epoch_records=900,
                                batch_size=64).records == 900


def test_a_cache_serves_only_a_reader_of_more_than_one_pass():
    assert not rules.cache_serves(3200, 3200) and not rules.cache_serves(100, 3200)
    assert rules.cache_serves(3201, 3200)
    assert rules.cache_serves(None, 3200) and rules.cache_serves(100, None)  # unknown: kept


def test_only_an_automatic_cache_goes_for_a_read_it_would_not_serve():
    # cache="auto": kept for a read of more than one pass, or of an unknown length
    assert not rules.keeps_cache("auto", 3200, 3200) and not rules.keeps_cache("auto", 1, 3200)
    assert rules.keeps_cache("auto", 3201, 3200)
    assert rules.keeps_cache("auto", None, 3200) and rules.keeps_cache("auto", 1, None)
    # asked for (in memory or in a file): kept for any read; cache=False: none to keep
    assert rules.keeps_cache(True, 1, 3200) and rules.keeps_cache("/tmp/cache", 1, 3200)
    assert not rules.keeps_cache(False, 3201, 3200) and not rules.keeps_cache(False, None, None)


def test_interleave_cycle():
    assert rules.interleave_cycle(files=100, cores=8) == 8
    assert rules.interleave_cycle(files=100, cores=1) == 2
    assert rules.interleave_cycle(files=1, cores=8) == 1


def test_one_store_smaller_rule_and_size():
    # a 224-px model: 896-px shorter sides and more; stored at most 448 px
    assert rules.store_smaller(895, 224) is None
    verdict = rules.store_smaller(2000, 224, 3000)
    assert verdict == rules.StoreSmaller(2000, 224, 448, (3000 / 448) ** 2)
    # the model unknown (convert): 256 px assumed, so 1,024-px sides and more, 512 px
    assert rules.store_smaller(1023) is None
    assert rules.store_smaller(1536, None, 2048).max_size == 512
    assert rules.store_smaller(None, 224) is None


def test_the_prefetch_depth_is_autotune(tf):
    assert rules.PREFETCH_DEPTH == tf.data.AUTOTUNE
