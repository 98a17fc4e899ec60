"""The planner on hand-made facts, without TensorFlow: cache against the RAM budget, shuffle
buffer, determinism, repeat, drop_remainder with replicas, sharding, prefetch to the device,
decoding, the rendered choices, and the notes and advice written from a plan."""

from __future__ import annotations

import dataclasses

import pytest

from tfopt.data.choices import PipelineChoices
from tfopt.data.config import PipelineConfig
from tfopt.data.plan import (
    CACHE_SHARE,
    MAX_SHUFFLE_ELEMENTS,
    MIN_AUTOTUNE_RAM,
    CacheFallback,
    CacheMode,
    choose_decode,
    plan,
)
from tfopt.data.plan_notes import partial_pass_note, stall_advice
from tfopt.data.plan_types import (
    DecodeStrategy,
    DistributionSource,
    Facts,
    Prefetch,
    Sharding,
    pass_records,
)
from tfopt.data.sizes import estimate_records, fill_batches, records_per_block
from tfopt.errors import InvalidArgumentError

MIB = 1 << 20
# 1,000 JPEGs of 500x400 px, 100 KB each, in 10 shards, on an 8-core machine with 16 GiB free
IMAGES = Facts(files=10, records=1000, total_bytes=100_000 * 1000, mean_record_bytes=100_000.0,
               image_key="image", label_key="label", image_encoding="jpeg",
               mean_image_pixels=500 * 400, min_image_side=400, available_memory=16 << 30,
               usable_cores=8)
# 10,000 records of 200 bytes, no images
TABLE = Facts(files=2, records=10_000, total_bytes=2_000_000, mean_record_bytes=200.0,
              label_key="label", available_memory=16 << 30, usable_cores=2)


def train(**fields) -> PipelineConfig:
    return PipelineConfig(**{"batch_size": 32, "training": True, "image_size": 224, **fields})


def evaluation(**fields) -> PipelineConfig:
    return PipelineConfig(**{"batch_size": 32, "image_size": 224, **fields})


def test_cache_follows_the_ram_budget():
    decoded = 1000 * 500 * 400 * 3  # whole decoded images: 600 MB
    assert plan(train(), IMAGES).cache is CacheMode.DECODED
    assert plan(train(), IMAGES).cache_estimate_bytes == decoded
    fits_decoded = plan(train(ram_budget=int(decoded / CACHE_SHARE) + 1), IMAGES)
    assert fits_decoded.cache is CacheMode.DECODED and not fits_decoded.notes
    # too small for decoded images, large enough for the encoded records
    small = plan(train(ram_budget=int(IMAGES.total_bytes / CACHE_SHARE) + 1), IMAGES)
    assert small.cache is CacheMode.ENCODED and small.cache_estimate_bytes == IMAGES.total_bytes
    assert small.cache_fallback is CacheFallback.TOO_LARGE
    assert "decoded data not cached: it would not fit the RAM budget (572 MiB)" in small.notes[0]
    none = plan(train(ram_budget=10 * MIB), IMAGES)
    assert none.cache is CacheMode.NONE and none.cache_fallback is CacheFallback.NOTHING_FITS
    assert none.notes == (
        "the data does not fit the RAM budget: no cache",)
    # evaluation caches final images: 1,000 x 224 x 224 x 3 bytes
    final = plan(evaluation(), IMAGES)
    assert final.cache is CacheMode.FINAL and final.cache_estimate_bytes == 1000 * 224 * 224 * 3
    assert plan(evaluation(cache=False), IMAGES).cache is CacheMode.NONE
    # asked for: cached whatever the budget, to a file when a path was given
    forced = plan(train(cache="/tmp/c", ram_budget=MIB), IMAGES)
    assert forced.cache is CacheMode.DECODED and forced.cache_to_file
    assert not plan(train(cache=True, ram_budget=MIB), IMAGES).cache_to_file
    # non-image data caches its records
    assert plan(PipelineConfig(batch_size=32), TABLE).cache is CacheMode.ENCODED


def test_ram_budget_defaults_to_half_the_available_memory_and_feeds_the_autotuner():
    resolved = plan(train(), IMAGES)
    assert resolved.ram_budget == 8 << 30
    assert resolved.autotune_ram_budget == (8 << 30) - resolved.cache_estimate_bytes
    assert plan(train(cache="/tmp/c", ram_budget=MIB), IMAGES).autotune_ram_budget == (
        MIN_AUTOTUNE_RAM)
    assert plan(train(cache=False, ram_budget=MIB), IMAGES).autotune_ram_budget == (
        MIN_AUTOTUNE_RAM)
    assert plan(train(cache=False, ram_budget=1 << 30), IMAGES).autotune_ram_budget == 1 << 30


def test_a_manifest_less_image_source_caches_its_records():
    # without an estimate (GZIP files: their size says nothing of the record count)
    unknown = dataclasses.replace(IMAGES, records=None)
    resolved = plan(train(), unknown)
    assert resolved.cache is CacheMode.ENCODED
    assert resolved.cache_fallback is CacheFallback.SIZE_UNKNOWN
    assert "its size is unknown without a manifest" in resolved.notes[0]
    assert resolved.steps_per_epoch is None and not resolved.known_length


def test_a_manifest_less_image_source_is_planned_from_its_estimated_record_count():
    estimated = dataclasses.replace(IMAGES, records=None, estimated_records=990)
    resolved = plan(train(), estimated)
    assert resolved.cache is CacheMode.DECODED  # as for tfopt's own shards
    assert resolved.cache_estimate_bytes == 990 * 500 * 400 * 3
    assert "about 990 records, estimated from the file sizes" in resolved.notes[0]
    # the estimate sizes the cache, never the epoch
    assert resolved.steps_per_epoch is None and not resolved.known_length
    assert plan(evaluation(), estimated).cache is CacheMode.FINAL


def test_the_record_estimate_counts_the_framing_and_skips_compressed_files():
    assert estimate_records(116_000 * 1000, 116_000 - 16) == 1000
    # GZIP files: their sizes times the measured expansion; no estimate without one
    assert estimate_records(58_000 * 1000, 116_000 - 16, expansion=2.0) == 1000
    assert estimate_records(1 << 30, 50_000.0, expansion=None) is None
    assert estimate_records(1 << 30, None) is None


def test_shuffle_buffer_is_the_shuffle_bytes_over_the_element_size():
    # decoded images in the cache: 600,000 bytes per element
    assert plan(train(), IMAGES).shuffle_elements == (32 << 20) // 600_000
    # never below what mixes (tfopt.rules.min_shuffle_records): one batch, 1 % of the epoch
    assert plan(train(shuffle_bytes=100), IMAGES).shuffle_elements == 32
    many = dataclasses.replace(IMAGES, records=50_000, total_bytes=100_000 * 50_000)
    assert plan(train(ram_budget=64 << 30), many).shuffle_elements == 500  # 1 %, not 55
    # ... as far as the RAM left beside the cache allows: 600 KB elements, 30 MB left
    tight = plan(train(ram_budget=int(30e6 + 50_000 * 600_000)), many)
    assert tight.cache is CacheMode.ENCODED or tight.shuffle_elements == 50
    # encoded records (no cache): 100 KB each
    assert plan(train(cache=False), IMAGES).shuffle_elements == (32 << 20) // 100_000
    # small records: capped, and never more than the epoch (which holds a full shuffle)
    big_table = dataclasses.replace(TABLE, records=100_000, total_bytes=20_000_000)
    assert plan(PipelineConfig(batch_size=8, training=True), big_table).shuffle_elements == (
        MAX_SHUFFLE_ELEMENTS)
    assert plan(PipelineConfig(batch_size=8, training=True), TABLE).shuffle_elements == 10_000
    assert plan(evaluation(), IMAGES).shuffle_elements is None


def test_determinism_and_repeat_follow_training_and_the_seed():
    assert plan(evaluation(), IMAGES).deterministic is True
    assert plan(train(), IMAGES).deterministic is False  # faster
    assert plan(train(seed=1), IMAGES).deterministic is True  # a seed asks for reproducibility
    assert plan(train(deterministic=True), IMAGES).deterministic is True
    assert plan(evaluation(deterministic=False), IMAGES).deterministic is False
    assert plan(train(), IMAGES).repeat is True and plan(evaluation(), IMAGES).repeat is False
    assert plan(train(repeat=False), IMAGES).repeat is False
    assert plan(evaluation(repeat=True), IMAGES).repeat is True


def test_drop_remainder_follows_the_replicas_when_training():
    two = dataclasses.replace(IMAGES, replicas=2, strategy=True)
    assert plan(train(), IMAGES).drop_remainder is False
    assert plan(train(), two).drop_remainder is True
    assert plan(evaluation(), two).drop_remainder is False  # every record, once
    assert plan(train(drop_remainder=False), two).drop_remainder is False
    assert plan(train(), two).steps_per_epoch == 1000 // 32
    assert plan(train(drop_remainder=False), two).steps_per_epoch == -(-1000 // 32)


def test_a_split_smaller_than_one_batch_with_drop_remainder_is_refused():
    with pytest.raises(InvalidArgumentError,
                       match=r"batch_size=2000 with drop_remainder=True: the source has only "
                             r"1000 records"):
        plan(train(batch_size=2000, drop_remainder=True), IMAGES)
    assert plan(train(batch_size=2000), IMAGES).steps_per_epoch == 1


def test_prefetch_to_the_device_with_one_gpu_and_no_strategy():
    one_gpu = dataclasses.replace(IMAGES, gpus=1)
    assert plan(train(), IMAGES).prefetch is Prefetch.HOST
    assert plan(train(), one_gpu).prefetch is Prefetch.DEVICE
    assert plan(train(), dataclasses.replace(one_gpu, strategy=True)).prefetch is Prefetch.HOST
    assert plan(train(), dataclasses.replace(IMAGES, gpus=2)).prefetch is Prefetch.HOST
    assert plan(train(prefetch_to_device=True), dataclasses.replace(IMAGES, gpus=2)).prefetch is (
        Prefetch.DEVICE)
    assert plan(train(prefetch_to_device=True), IMAGES).prefetch is Prefetch.HOST  # no GPU
    assert plan(train(prefetch_to_device=False), one_gpu).prefetch is Prefetch.HOST


def test_sharding_by_file_by_data_or_left_to_tf_data():
    worker = dataclasses.replace(IMAGES, workers=3, worker_index=1)
    by_file = plan(train(), worker)
    assert by_file.sharding is Sharding.FILE and by_file.file_share == (3, 1)
    assert by_file.shards_read == 3  # shards 1, 4, 7 of 10
    few_shards = plan(train(), dataclasses.replace(worker, files=2))
    assert few_shards.sharding is Sharding.DATA and few_shards.file_share is None
    evaluator = plan(train(), dataclasses.replace(IMAGES, workers=3))  # no place in the cluster
    assert evaluator.sharding is Sharding.DATA
    alone = plan(train(), IMAGES)
    assert alone.sharding is Sharding.AUTO and alone.file_share is None
    assert alone.shards_read == 10


def test_the_length_is_known_only_where_the_manifest_count_is_exact():
    assert plan(evaluation(), IMAGES).known_length
    assert not plan(evaluation(skip_corrupt=True), IMAGES).known_length
    assert not plan(train(), IMAGES).known_length  # repeats
    assert not plan(evaluation(service="localhost:5050"), IMAGES).known_length
    # several workers: a worker that reads its own shards (FILE) has a shorter pass than the
    # manifest says; one that filters the whole pass (DATA) has all of its batches, and the
    # strategy splits each into the same number of steps on every worker
    by_file = plan(evaluation(), dataclasses.replace(IMAGES, workers=2, worker_index=0))
    assert by_file.sharding is Sharding.FILE and not by_file.known_length
    by_data = plan(evaluation(), dataclasses.replace(IMAGES, files=1, workers=2, worker_index=0))
    assert by_data.sharding is Sharding.DATA and by_data.known_length
    assert by_data.steps_per_epoch == 32  # ceil(1000 / 32): the whole pass, on each worker
    no_place = plan(evaluation(), dataclasses.replace(IMAGES, workers=2))
    assert no_place.sharding is Sharding.DATA and no_place.known_length
    assert not plan(train(), dataclasses.replace(IMAGES, files=1, workers=2,
                                                 worker_index=0)).known_length  # repeats


def test_device_crops_ship_margin_squares():
    resolved = plan(train(image_size=(24, 24), random_crop="device"), IMAGES)
    assert resolved.device_crop and resolved.output_size == (27, 27)  # 24 x 256/224
    assert resolved.decode.random_crop is False and resolved.decode.crop_fraction == 1.0
    assert resolved.cache is CacheMode.FINAL  # fixed-size squares, not crops drawn per epoch
    assert "tfopt.Augment(output_size=(24, 24), random_crop=True)" in resolved.notes[0]
    assert not plan(PipelineConfig(batch_size=8, random_crop="device"), TABLE).device_crop


def test_image_data_needs_an_image_size():
    with pytest.raises(InvalidArgumentError, match="image_size is required for image data"):
        plan(PipelineConfig(batch_size=8), IMAGES)
    assert plan(PipelineConfig(batch_size=8), TABLE).output_size is None


def test_blocks_and_interleave_follow_the_records_and_the_cores():
    resolved = plan(train(), IMAGES)
    assert resolved.parse_block == records_per_block(100_000.0, 128) == 10
    assert resolved.count_block == 10
    assert resolved.interleave_cycle == 8  # cores, at most the files
    assert plan(train(), dataclasses.replace(IMAGES, usable_cores=1)).interleave_cycle == 2
    assert plan(PipelineConfig(batch_size=8), TABLE).parse_block == 128


def test_decode_strategy_follows_the_target_size():
    common = dict(encoding="jpeg", random_crop=False, cache_decoded=False)
    assert choose_decode(target=(100, 100), min_side=420, **common).ratio == 2  # 367 / 4 < 100
    assert choose_decode(target=(100, 100), min_side=480, **common).ratio == 4
    assert choose_decode(target=(224, 224), min_side=320, **common).strategy is DecodeStrategy.CROP
    png = choose_decode(target=(100, 100), min_side=420, **{**common, "encoding": "png"})
    assert png.strategy is DecodeStrategy.PLAIN and png.ratio == 1
    cached = choose_decode(target=(64, 64), min_side=400, **{**common, "cache_decoded": True})
    assert cached.ratio == 4  # 400 / 4 = 100 >= the 90-px cache square
    # the plan asks for the same: 400 px JPEGs to 100 px, evaluation's central 350 px
    assert plan(evaluation(image_size=100), IMAGES).decode.ratio == 2


def test_the_same_config_and_facts_give_the_same_plan():
    assert plan(train(seed=1), IMAGES) == plan(train(seed=1), IMAGES)
    assert plan(train(), IMAGES) != plan(train(), dataclasses.replace(IMAGES, replicas=2))


def test_choices_render_the_plan():
    worker = dataclasses.replace(IMAGES, workers=2, worker_index=0, gpus=1)
    resolved = plan(train(seed=3), worker)
    choices = PipelineChoices.of(resolved, "memory", ("one more note",))
    assert choices.cache is CacheMode.DECODED and choices.drop_remainder is False
    assert choices.auto_shard == ("by file: worker 0 of 2 reads its own 5 of the 10 shards "
                                  "(tf.data's auto-shard off)")
    assert choices.prefetch == "to /gpu:0 (prefetch_to_device)"
    assert choices.parallel_calls.startswith("8 (one per core")
    assert choices.notes[-1] == "one more note"
    described = choices.describe()
    assert "parse        parse_example once per 10 records (vectorised)" in described
    assert "read         parallel interleave, cycle 8, deterministic" in described
    assert "cache        decoded (memory); estimate 572 MiB, RAM budget 8,192 MiB" in described
    data = choices.to_json()
    assert data["cache"] == "decoded" and data["decode"]["strategy"] == "plain"  # decoded whole into the cache
    one = PipelineChoices.of(plan(train(), dataclasses.replace(IMAGES, files=1)))
    assert one.auto_shard == "DATA when run by several workers (one shard)"
    assert one.prefetch == "autotuned, in host memory"


def test_the_distribution_line_says_where_the_facts_were_read():
    def line(source):
        facts = dataclasses.replace(IMAGES, replicas=2, strategy=True, distribution=source)
        return PipelineChoices.of(plan(train(), facts)).distribution

    assert line(DistributionSource.STRATEGY).startswith(
        "2 replica(s) in sync, 1 worker(s): from the strategy given")
    assert "InputContext given" in line(DistributionSource.INPUT_CONTEXT)
    assert "read once at construction" in line(DistributionSource.ACTIVE)


def test_the_order_line_says_what_each_epoch_draws_anew():
    # evaluation, repeated or not, keeps its order; a cache freezes the files' order, so only
    # the shuffle after it draws anew; without a cache the files are shuffled too
    def order(config):
        return PipelineChoices.of(plan(config, IMAGES)).describe().splitlines()[0]

    assert order(evaluation(repeat=True)).endswith("order fixed")
    assert order(train()).endswith(
        "order shuffled after the cache each epoch (files read in a fixed order)")
    assert order(train(cache=False)).endswith("order files and records shuffled each epoch")
    # the maps' parallelism is the plan's, one thread per core
    assert plan(train(), IMAGES).parallel_calls == 8


# 360 camera photos (issue: 2000-4000 px), 3,000x2,250 on average, the smallest 2,000 px on its
# shorter side, 1.5 MB each, on a machine with 23 GiB available
PHOTOS = Facts(files=6, records=360, total_bytes=360 * 1_500_000,
               mean_record_bytes=1_500_000.0, image_key="image/encoded", label_key="label",
               image_encoding="jpeg", mean_image_pixels=3000 * 2250, min_image_side=2000,
               available_memory=23 << 30, usable_cores=2)


def test_camera_photos_are_cached_at_the_scale_they_are_decoded_for_the_cache():
    resolved = plan(train(), PHOTOS)
    # decoded for the cache at 1/4 scale (2,000 / 4 = 500 px keeps the 256-px crop margin;
    # 1/8 would not): 750x562 px, 16 times less than the 7.3 GB of full-size images
    assert resolved.decode.ratio == 4
    assert resolved.cache is CacheMode.DECODED
    assert resolved.cache_estimate_bytes == int(360 * 3000 * 2250 / 16 * 3)
    assert resolved.cache_fallback is None
    # the shuffle buffer holds the reduced images too: 32 MiB of them (26), not one
    # full-size photo, raised to one batch (tfopt.rules.min_shuffle_records)
    assert (32 << 20) // int(3000 * 2250 / 16 * 3) == 26
    assert resolved.shuffle_elements == 32
    assert resolved.shuffle_bytes == 32 * int(3000 * 2250 / 16 * 3)
    # asked for the cache: the same sizing (it gave "1 elements" from the full-size estimate)
    assert plan(train(cache=True, shuffle_bytes=64 << 20), PHOTOS).shuffle_elements == 53


def test_the_cache_estimate_follows_each_sampled_photo_to_its_own_scale():
    # half the photos 2,100 px on the shorter side (1/8 keeps 256 px), half 1,500 (1/4 only)
    sizes = ((2100, 3150), (1500, 2000)) * 8
    mixed = dataclasses.replace(PHOTOS, image_sizes=sizes, min_image_side=1500,
                                mean_image_pixels=(2100 * 3150 + 1500 * 2000) / 2)
    resolved = plan(train(), mixed)
    per_image = ((263 * 394) + (375 * 500)) * 3 / 2  # ceil(side / 8), ceil(side / 4)
    assert resolved.decode.ratio == 4 and resolved.decode.min_decoded_side == 256
    assert resolved.cache_estimate_bytes == int(360 * per_image)
    # sized from the mean pixels at the smallest photo's 1/4 it was 1.6 times that
    assert int(360 * mixed.mean_image_pixels / 16 * 3) > 1.6 * resolved.cache_estimate_bytes
    assert resolved.shuffle_elements == int((32 << 20) // per_image)


def test_photos_that_are_not_jpegs_are_cached_at_full_size():
    pngs = dataclasses.replace(PHOTOS, image_encoding="png")
    resolved = plan(train(ram_budget=64 << 30), pngs)
    assert resolved.decode.ratio == 1
    assert resolved.cache_estimate_bytes == 360 * 3000 * 2250 * 3


def test_stall_advice_names_the_decode_the_cache_decision_and_the_stored_size():
    # full-size photos that do not fit a small budget: no decoded cache, and large images
    tight = plan(train(ram_budget=200 * MIB), PHOTOS)
    advice = stall_advice(tight, PHOTOS)
    assert "decoding is the costly stage here" in advice
    assert "not cached: " in advice and "ram_budget" in advice
    assert "for a 224-px model (shorter sides of 2000 px, 6.8 megapixels" in advice
    # the shared rule's size for a 224-px model: twice its side (tfopt.rules)
    assert "'tfopt convert --max-size 448'" in advice
    # images near the model's size, cached: no size advice, the cache named as it is
    cached = stall_advice(plan(train(), IMAGES), IMAGES)
    assert "--max-size" not in cached and "the decoded data is cached" in cached
    assert "the cache is off" in stall_advice(plan(train(cache=False), IMAGES), IMAGES)


def test_the_plan_carries_what_its_advice_is_written_from():
    # large photos for a 224-px model: the shared store-smaller rule's verdict, typed
    tight = plan(train(ram_budget=200 * MIB), PHOTOS)
    assert tight.model_side == 224 and tight.best_cache is CacheMode.DECODED
    assert tight.store_smaller.model_side == 224 and tight.store_smaller.max_size == 448
    assert plan(train(), IMAGES).store_smaller is None  # near the model's size
    assert plan(evaluation(), IMAGES).best_cache is CacheMode.FINAL
    table = plan(PipelineConfig(batch_size=32), TABLE)
    assert table.model_side is None and table.store_smaller is None
    assert table.best_cache is CacheMode.ENCODED
    # random crops left to the device: the model gets the crops, not the margin squares
    device = plan(train(image_size=(24, 24), random_crop="device"), IMAGES)
    assert device.output_size == (27, 27) and device.model_side == 24


def test_no_estimate_note_when_the_cache_is_off():
    estimated = dataclasses.replace(IMAGES, records=None, estimated_records=990)
    assert not any("estimated" in note for note in plan(train(cache=False), estimated).notes)


# -- reading a cached pipeline in part ----------------------------------------------------------


def test_a_read_of_less_than_one_pass_is_named_with_both_remedies():
    cached = plan(PipelineConfig(batch_size=32, training=True, image_size=224), IMAGES)
    assert cached.cache is CacheMode.DECODED and pass_records(cached) == 1000
    note = partial_pass_note(cached, 5 * 2)  # steps_per_epoch=5, epochs=2
    assert note.startswith("reads 10 batches of 32 in all (320 examples), less than one pass "
                           "over the 1,000 records: the decoded cache")
    assert "did not fully read the dataset being cached" in note
    assert "at least 32 batches" in note and "cache=False" in note
    # 1,000 // 32 + 1: the 1,001st element makes the cache's input report its end
    assert fill_batches(1000, 32) == 32 and fill_batches(1024, 32) == 33
    # a pass or more: the cache serves the rest (ceil(1000 / 32) = 32 batches hold 1,024)
    assert partial_pass_note(cached, 32) is None and partial_pass_note(cached, 320) is None
    assert partial_pass_note(cached, 31) is not None


def test_a_read_of_one_pass_or_less_plans_no_automatic_cache_and_says_why():
    cached = plan(train(), IMAGES)
    assert cached.cache is CacheMode.DECODED and pass_records(cached) == 1000
    uncached = plan(train(cache=False), IMAGES)
    for read in (1000, 320):
        short = plan(train(), IMAGES, examples_read=read)
        assert short.cache is CacheMode.NONE and short.cache_fallback is CacheFallback.ONE_PASS
        (note,) = short.notes
        part = "exactly" if read == 1000 else "less than"
        assert note == (f"no cache for this read: it takes {read:,} examples in all, {part} one "
                        "pass of the 1,000 records, and a cache serves only the passes after "
                        "the one that fills it (a longer read caches the decoded data; "
                        "cache=True keeps it for any read)")
        # all else as cache=False plans it: decode, shuffle, file order, memory for tf.data
        assert short == dataclasses.replace(uncached, cache_fallback=CacheFallback.ONE_PASS,
                                            notes=(note,))
        assert "the cache is off for this read of one pass or less" in stall_advice(short,
                                                                                    IMAGES)
    # a longer read, or one of unknown length: the plan as made for any read
    assert plan(train(), IMAGES, examples_read=1001) == cached
    assert plan(train(), IMAGES, examples_read=None) == cached
    # a cache asked for stays; so does a fallback, and none where the pass is not exact
    assert plan(train(cache=True), IMAGES, examples_read=10) == plan(train(cache=True), IMAGES)
    encoded = train(ram_budget=int(IMAGES.total_bytes / CACHE_SHARE) + 1)
    assert plan(encoded, IMAGES).cache is CacheMode.ENCODED
    assert plan(encoded, IMAGES, examples_read=10).cache_fallback is CacheFallback.ONE_PASS
    assert plan(encoded, IMAGES, examples_read=10).notes[0].endswith(
        "(a longer read caches the encoded data; cache=True keeps it for any read)")
    nothing = train(ram_budget=1000)
    assert plan(nothing, IMAGES, examples_read=10) == plan(nothing, IMAGES)
    two_workers = dataclasses.replace(IMAGES, workers=2, worker_index=0)
    assert plan(train(), two_workers, examples_read=10) == plan(train(), two_workers)
    assert plan(train(skip_corrupt=True), IMAGES, examples_read=10).cache is CacheMode.DECODED


@pytest.mark.parametrize("config, facts", [
    (PipelineConfig(batch_size=32, training=True, image_size=224, cache=False), IMAGES),
    # no manifest: the pass's length is an estimate
    (PipelineConfig(batch_size=32, training=True, image_size=224),
     dataclasses.replace(IMAGES, records=None, estimated_records=1000)),
    # each worker reads its share; skipped records shorten the pass; the service's workers
    # hold the caches
    (PipelineConfig(batch_size=32, training=True, image_size=224),
     dataclasses.replace(IMAGES, workers=2, worker_index=0)),
    (PipelineConfig(batch_size=32, training=True, image_size=224, skip_corrupt=True), IMAGES),
    (PipelineConfig(batch_size=32, training=True, image_size=224, service="grpc://d:5050"),
     IMAGES),
])
def test_no_note_without_a_cache_or_an_exact_pass(config, facts):
    assert partial_pass_note(plan(config, facts), 1) is None
