"""One deliberately flawed small pipeline per recommendation kind, and a good one that gets none
of the wrong kinds. Each asserts the kind and the stage it names."""

from __future__ import annotations

import time

import pytest
from analysis_helpers import random_jpeg, slow, tf

import tfopt

AUTOTUNE = tf.data.AUTOTUNE
SPEED_KINDS = ("parallelize", "prefetch", "cache", "vectorize", "python", "store_smaller",
               "deterministic")
WARNING_KINDS = ("cache_after_random", "shuffle_buffer")


def only(report, kind):
    found = [r for r in report.recommendations if r.kind == kind]
    assert len(found) == 1, report.describe()
    assert found[0].message and "\n" not in found[0].message
    return found[0]


def matmul_work(x):
    m = tf.fill([96, 96], tf.cast(x, tf.float32) * 1e-4)
    return tf.reduce_sum(tf.matmul(m, m))


def test_cache_at_the_highest_stage_that_fits_below_every_random_one():
    dataset = (tf.data.Dataset.range(200)
               .map(matmul_work, num_parallel_calls=AUTOTUNE, name="work")
               .batch(8, name="batches")
               .map(lambda b: b + tf.random.uniform([8]), name="jitter")
               .prefetch(2))
    report = tfopt.analyze(dataset, seconds=1.0, cores=2)
    rec = only(report, "cache")
    assert rec.stage == "batches"  # not after the random map
    assert rec.expected_speedup > 1.1
    assert ".cache()" in rec.message


def test_cache_at_the_top_when_only_a_prefetch_follows():
    # nothing after the cache point costs anything but reading the cache back: the model must
    # still see the speed-up (it once read "no cost left" as "no gain" and advised nothing)
    dataset = (tf.data.Dataset.range(200)
               .map(matmul_work, num_parallel_calls=AUTOTUNE, name="work")
               .batch(8, name="batches").prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=1.0, cores=2), "cache")
    assert rec.stage == "batches"
    assert rec.expected_speedup > 2


def test_no_cache_where_the_epoch_exceeds_the_ram_budget_or_a_cache_exists():
    dataset = (tf.data.Dataset.range(200).map(matmul_work, num_parallel_calls=AUTOTUNE)
               .batch(8).prefetch(2))
    assert "cache" not in tfopt.analyze(dataset, seconds=0.6, ram_budget=100).kinds()
    cached = tf.data.Dataset.range(200).map(matmul_work).cache().batch(8).prefetch(2)
    assert "cache" not in tfopt.analyze(cached, seconds=0.6).kinds()


def test_vectorize_a_cheap_map_before_a_batch():
    dataset = (tf.data.Dataset.range(1000).repeat().map(lambda x: x * 2 + 1, name="cheap")
               .batch(64).prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=1.0, cores=2), "vectorize")
    assert rec.stage == "cheap"
    assert rec.expected_speedup > 1.1 and ".batch(64).map(f)" in rec.message


def test_python_stage_behind_the_gil():
    dataset = (tf.data.Dataset.range(10).repeat()
               .map(lambda x: tf.py_function(lambda v: v * 2, [x], tf.int64),
                    num_parallel_calls=AUTOTUNE, name="py")
               .batch(16).prefetch(2))
    report = tfopt.analyze(dataset, seconds=1.0, cores=2)
    rec = only(report, "python")
    assert rec.stage == "py" == report.bottleneck
    assert "GIL" in rec.message and "parallelize" not in report.kinds()


def test_store_smaller_when_decode_dominates_and_images_are_much_larger():
    big_jpeg = random_jpeg(384)
    dataset = (tf.data.Dataset.from_tensors(big_jpeg).repeat()
               .map(tf.io.decode_jpeg, num_parallel_calls=AUTOTUNE, name="decode")
               .map(lambda i: tf.image.resize(i, [48, 48], method="nearest"),
                    num_parallel_calls=AUTOTUNE, name="resize")
               .batch(8).prefetch(2))
    report = tfopt.analyze(dataset, seconds=1.5, cores=2)
    rec = only(report, "store_smaller")
    assert rec.stage == "decode" == report.bottleneck
    assert "tfopt convert --max-size 48" in rec.message


def test_no_store_smaller_when_the_model_sees_the_decoded_size():
    big_jpeg = random_jpeg(384)
    dataset = (tf.data.Dataset.from_tensors(big_jpeg).repeat()
               .map(tf.io.decode_jpeg, num_parallel_calls=AUTOTUNE, name="decode")
               .batch(2).prefetch(2))
    assert "store_smaller" not in tfopt.analyze(dataset, seconds=1.0, cores=2).kinds()


def test_cache_after_random_is_a_correctness_warning():
    dataset = (tf.data.Dataset.range(100)
               .map(lambda x: tf.cast(x, tf.float32) + tf.random.uniform([]), name="noise")
               .cache(name="frozen").batch(4).prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=0.6), "cache_after_random")
    assert rec.stage == "frozen" and rec.expected_speedup == 1.0
    assert "noise" in rec.message


@pytest.mark.parametrize("buffer, epoch, why", [(4, 10**5, "below one batch"),
                                               (40, 10**5, "below 1%")])
def test_shuffle_buffer_too_small_to_mix(buffer, epoch, why):
    dataset = (tf.data.Dataset.range(epoch).shuffle(buffer, name="mix").batch(32)
               .prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=0.5), "shuffle_buffer")
    assert rec.stage == "mix" and rec.expected_speedup == 1.0 and why in rec.message


def test_shuffle_buffer_over_the_ram_budget():
    dataset = (tf.data.Dataset.range(10**5).map(lambda x: tf.fill([256], x), name="rows")
               .shuffle(10**4, name="mix").batch(32).prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=0.6, ram_budget=1 << 20), "shuffle_buffer")
    assert rec.stage == "mix" and "RAM budget" in rec.message


def _uneven(x):
    time.sleep(0.03 if int(x) % 16 == 0 else 0.0005)  # sleeps: the CPU's load barely matters
    return x


def test_deterministic_order_that_costs_measured_speed():
    dataset = (tf.data.Dataset.range(10**6).shuffle(100)
               .map(lambda x: tf.py_function(_uneven, [x], tf.int64), num_parallel_calls=4,
                    deterministic=True, name="uneven")
               .prefetch(2))
    rec = only(tfopt.analyze(dataset, seconds=3.0, cores=2), "deterministic")
    assert rec.stage == "uneven" and rec.expected_speedup >= 1.15
    assert "deterministic=False" in rec.message


def test_a_good_pipeline_gets_none_of_the_wrong_kinds():
    dataset = (tf.data.Dataset.range(10**4).shuffle(10**4, name="mix")
               .map(slow, num_parallel_calls=AUTOTUNE, deterministic=False, name="slow")
               .batch(16).prefetch(AUTOTUNE))
    report = tfopt.analyze(dataset, seconds=1.5, cores=2)
    assert report.bottleneck == "slow"
    assert not set(report.kinds()) & set(SPEED_KINDS + WARNING_KINDS), report.describe()
