"""``tfopt.analyze`` on pipelines that PipelineBuilder built recommends nothing the builder
could have done: both decide by the same rules (tfopt/rules.py). One test per kind of data:
demo shards, camera-sized photos, TFRecords written by TensorFlow without a manifest, 50,000
small records, and a RAM budget that leaves only the encoded records cached.

What the builder cannot do is store the images smaller (that is a new conversion), so
``store_smaller`` is the one recommendation allowed, and then with the shared rule's size.
Marked ``alone``: the recommendations rest on measured rates.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tfopt
from tfopt import rules
from tfopt.data.pipeline import PipelineBuilder
from tfopt.data.plan import CacheMode

pytestmark = pytest.mark.alone

SECONDS = 2.0  # analyze's measuring time per pipeline: the verdicts, not the rates, matter here
# what analyze may recommend for a builder's pipeline: what only a conversion does
NOT_THE_BUILDERS = {"store_smaller"}


def assert_nothing_the_builder_could_do(builder: PipelineBuilder, **analyze_options):
    report = tfopt.analyze(builder.build(), seconds=SECONDS,
                           ram_budget=builder.plan.ram_budget, **analyze_options)
    kinds = set(report.kinds())
    assert kinds <= NOT_THE_BUILDERS, (builder.choices.describe() + "\n" + report.describe())
    for rec in report.recommendations:  # the size the builder's own advice names
        side = max(builder.plan.output_size)
        assert f"--max-size {rules.suggested_max_size(side)}" in rec.message, rec.message
    return report


@pytest.fixture(scope="module")
def demo_shards(tmp_path_factory):
    from conftest import make_demo_shards

    return make_demo_shards(tmp_path_factory.mktemp("demo"), count=300, classes=3,
                            min_size=320, max_size=480)


def test_demo_shards(demo_shards):
    # the case: this pipeline once got cache_after_random for its own files shuffle
    builder = PipelineBuilder(demo_shards, batch_size=32, training=True, image_size=96)
    assert builder.plan.cache is CacheMode.DECODED and not builder.plan.shuffle_files
    assert_nothing_the_builder_could_do(builder)


def test_a_ram_budget_that_leaves_only_the_encoded_records_cached(demo_shards):
    full = PipelineBuilder(demo_shards, batch_size=32, training=True, image_size=96)
    encoded, decoded = full.facts.total_bytes, full.plan.cache_estimate_bytes
    assert encoded < decoded
    budget = int((encoded + decoded) / 2 / rules.CACHE_SHARE)  # between the two
    builder = PipelineBuilder(demo_shards, batch_size=32, training=True, image_size=96,
                              ram_budget=budget)
    assert builder.plan.cache is CacheMode.ENCODED
    assert builder.plan.cache_fallback is rules.CacheFallback.TOO_LARGE
    assert builder.plan.shuffle_bytes <= budget - encoded
    assert_nothing_the_builder_could_do(builder)


def test_camera_sized_photos(tmp_path):
    # photos of 2,000-4,000 px on the longer side (demo-data's default for photos)
    tfopt.make_demo_data(tmp_path / "photos", count=4, classes=2, kind="photos", workers=1)
    shards = tfopt.convert(tmp_path / "photos", tmp_path / "shards", workers=1).path
    assert builder_sides(shards) >= 1500
    builder = PipelineBuilder(shards, batch_size=4, training=True, image_size=96)
    assert builder.plan.cache is CacheMode.DECODED
    report = assert_nothing_the_builder_could_do(builder)
    # where analyze says "store smaller", the builder's stall advice says the same size
    if "store_smaller" in report.kinds():
        size = re.search(r"--max-size (\d+)", builder.stall_advice()).group(1)
        assert int(size) == rules.suggested_max_size(96)


def builder_sides(shards) -> int:
    """The smallest sampled shorter side of the images in ``shards``."""
    return PipelineBuilder(shards, batch_size=1, training=True, image_size=8).facts.min_image_side


def test_shards_without_a_manifest(tmp_path, tf):
    from conftest import encode_jpeg, example_of, random_pixels

    folder = tmp_path / "foreign"
    folder.mkdir()
    for shard in range(2):
        with tf.io.TFRecordWriter(str(folder / f"part-{shard}.tfrecord")) as writer:
            for index in range(100):
                pixels = random_pixels(shard * 100 + index, height=72, width=96)
                writer.write(example_of(tf, **{"image/encoded": encode_jpeg(pixels),
                                               "label": [index % 4]}).SerializeToString())
    builder = PipelineBuilder(folder, batch_size=16, training=True, image_size=48)
    assert builder.facts.records == 200 and builder.source.counts_walked  # the header walk's
    assert builder.plan.cache is CacheMode.DECODED
    assert_nothing_the_builder_could_do(builder)


def test_fifty_thousand_small_records(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "rows.npz", x=rng.normal(size=(50_000, 4)).astype(np.float32),
             y=rng.integers(0, 10, 50_000))
    tfopt.convert(tmp_path / "rows.npz", tmp_path / "shards", workers=1)
    builder = PipelineBuilder(tmp_path / "shards", batch_size=64, training=True)
    # a buffer by the shared rule: at least 1 % of the epoch (500), here the cap, 16,384
    assert builder.plan.shuffle_elements >= rules.min_shuffle_records(50_000, 64)
    assert rules.shuffle_shortfall(builder.plan.shuffle_elements, 50_000, 64) is None
    assert_nothing_the_builder_could_do(builder)
