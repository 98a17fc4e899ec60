"""The plan in words (tfopt/data/plan_notes.py): each note and decoding reason from the typed
values it is written from, and the planner attaching them. Without TensorFlow."""

from __future__ import annotations

import dataclasses

from tfopt.data.config import PipelineConfig
from tfopt.data.plan import SERVICE_PROCESSING_MODE, CacheFallback, CacheMode, choose_decode, plan
from tfopt.data.plan_notes import (
    NOTHING_FITS_NOTE,
    UNCOUNTED_SKIPS_NOTE,
    cache_fallback_note,
    cached_decode_reason,
    crop_decode_reason,
    device_crop_note,
    estimated_records_note,
    full_decode_reason,
    one_pass_note,
    reduced_decode_reason,
    service_note,
)
from tfopt.data.plan_types import Facts

MIB = 1 << 20
JPEGS = Facts(files=10, records=1000, total_bytes=100_000 * 1000, mean_record_bytes=100_000.0,
              image_key="image", label_key="label", image_encoding="jpeg",
              mean_image_pixels=500 * 400, min_image_side=400, available_memory=16 << 30,
              usable_cores=8)


def test_each_cache_fallback_says_why():
    assert cache_fallback_note(CacheMode.DECODED, CacheFallback.TOO_LARGE, 600 * MIB) == (
        "decoded data not cached: it would not fit the RAM budget (600 MiB); caching the "
        "encoded records instead")
    unknown = cache_fallback_note(CacheMode.FINAL, CacheFallback.SIZE_UNKNOWN, None)
    assert unknown.startswith("final data not cached: its size is unknown without a manifest")
    nothing = cache_fallback_note(CacheMode.DECODED, CacheFallback.NOTHING_FITS, None)
    assert nothing == NOTHING_FITS_NOTE == "the data does not fit the RAM budget: no cache"
    # a read (a fit) of one pass or less, under cache="auto"
    assert one_pass_note(CacheMode.FINAL, 320, 1000) == (
        "no cache for this read: it takes 320 examples in all, less than one pass of the 1,000 "
        "records, and a cache serves only the passes after the one that fills it (a longer "
        "read caches the final data; cache=True keeps it for any read)")
    assert "it takes 1,000 examples in all, exactly one pass of the 1,000 records" in (
        one_pass_note(CacheMode.FINAL, 1000, 1000))


def test_the_planner_attaches_the_notes_of_its_decisions():
    training = PipelineConfig(batch_size=32, training=True, image_size=224)
    unknown = plan(training, dataclasses.replace(JPEGS, records=None))
    assert unknown.notes == (cache_fallback_note(CacheMode.DECODED, CacheFallback.SIZE_UNKNOWN,
                                                 None),)
    estimated = plan(training, dataclasses.replace(JPEGS, records=None, estimated_records=990,
                                                   gzip_expansion=1.5))
    assert estimated.notes == (estimated_records_note(990, 1.5, 100_000.0),)
    assert "GZIP expanding them 1.50x" in estimated.notes[0]
    device = plan(training.replace(image_size=(24, 24), random_crop="device"), JPEGS)
    assert device.notes == (device_crop_note(27, (24, 24)),)
    served = plan(PipelineConfig(batch_size=32, image_size=224, service="grpc://d:5050"), JPEGS)
    assert served.notes[-1] == service_note("grpc://d:5050", SERVICE_PROCESSING_MODE)
    assert "processing mode 'distributed_epoch'" in served.notes[-1]
    bare = dataclasses.replace(JPEGS, shards_counted=False)
    skipping = plan(PipelineConfig(batch_size=32, image_size=224, skip_corrupt=True), bare)
    assert skipping.notes[-1] == UNCOUNTED_SKIPS_NOTE
    fit = plan(PipelineConfig(batch_size=32, image_size=224), JPEGS, examples_read=1000)
    assert fit.notes == (one_pass_note(CacheMode.FINAL, 1000, 1000),)


def test_each_decoding_strategy_gives_its_reason():
    cached = choose_decode(encoding="jpeg", random_crop=True, target=(224, 224), min_side=1400,
                           cache_decoded=True)
    assert cached.reason == cached_decode_reason(jpeg=True, ratio=4, side=256)
    assert "each JPEG at its own" in cached.reason
    assert "(a JPEG at a reduced scale" in cached_decode_reason(jpeg=True, ratio=1, side=256)
    assert cached_decode_reason(jpeg=False, ratio=1, side=256).startswith(
        "decoded once into the cache")
    png = choose_decode(encoding="png", random_crop=False, target=(100, 100), min_side=420,
                        cache_decoded=False)
    assert png.reason == full_decode_reason("png") == "png images: full decode"
    reduced = choose_decode(encoding="jpeg", random_crop=False, target=(100, 100), min_side=480,
                            cache_decoded=False)
    assert reduced.reason == reduced_decode_reason(target=(100, 100), ratio=4, min_side=480,
                                                   keep=115)
    crop = choose_decode(encoding="jpeg", random_crop=True, target=(224, 224), min_side=320,
                         cache_decoded=False)
    assert crop.reason == crop_decode_reason(True) == (
        "decode only the random-resized-crop window (tf.io.decode_and_crop_jpeg)")
