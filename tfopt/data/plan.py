"""The pipeline planner: every decision a pipeline makes, from a config and plain facts.

:func:`plan` turns a :class:`~tfopt.data.config.PipelineConfig` (what was asked) and
:class:`~tfopt.data.plan_types.Facts` (what was read from the source and the machine) into a
:class:`~tfopt.data.plan_types.PipelinePlan` of typed decisions: how to decode, what to cache,
how large a shuffle buffer, whether to repeat, drop the remainder, shard by file or prefetch to
the GPU. It is a pure function: it reads no file, no environment variable and no device, and
imports no TensorFlow, so every decision can be tested on hand-made facts. The builder
(:mod:`tfopt.data.pipeline`) gathers the facts and executes the plan.

Beside it: the plan's types (:mod:`tfopt.data.plan_types`), the size arithmetic it decides by
(:mod:`tfopt.data.sizes`), and the words its notes and advice are written in
(:mod:`tfopt.data.plan_notes`); :class:`~tfopt.data.choices.PipelineChoices` renders the plan.

Raises:
    tfopt.errors.InvalidArgumentError: The config does not fit the data (image data without
        ``image_size``, a split smaller than one batch with ``drop_remainder``).

Example:
    >>> facts = Facts(files=4, records=1000, total_bytes=64 << 20, image_key="image",
    ...               image_encoding="jpeg", mean_image_pixels=500 * 375, min_image_side=300,
    ...               available_memory=8 << 30, usable_cores=8)
    >>> plan(PipelineConfig(batch_size=32, training=True, image_size=224), facts).repeat
    True
"""

from __future__ import annotations

import math
import statistics

import tfopt.rules as rules
from tfopt.data import plan_notes, sizes
from tfopt.data.config import DEVICE_CROP, PipelineConfig
from tfopt.data.plan_types import (
    DecodePlan,
    DecodeStrategy,
    Facts,
    PipelinePlan,
    Prefetch,
    Sharding,
    exact_pass_records,
)
from tfopt.data.sizes import EVAL_CROP_FRACTION
from tfopt.errors import InvalidArgumentError

# The shared rules (tfopt/rules.py), named here too: the planner's tests and callers read them
# from the planner. They are not copies: each is the rules module's object.
CACHE_SHARE = rules.CACHE_SHARE
MIN_AUTOTUNE_RAM = rules.MIN_AUTOTUNE_RAM
MAX_SHUFFLE_ELEMENTS = rules.MAX_SHUFFLE_ELEMENTS
CacheMode = rules.CacheMode
CacheFallback = rules.CacheFallback
# Each block holds about sizes.BLOCK_BYTES of records (at least 8), and at most:
COUNT_BLOCK = 256  # most records per counting step when checking shard record counts
PARSE_BATCH = 128  # most records per parse_example call: enough to amortise the op
# Dynamic sharding for training too, not "parallel_epochs": the builder's seeds (shard order,
# shuffle, crops) are fixed in the graph, so under parallel_epochs every worker would produce
# the same sequence and the trainer would see each record once per worker, side by side.
# Dynamic sharding hands out shards, so each record comes once per epoch whatever the worker
# count, and steps_per_epoch stays right.
SERVICE_PROCESSING_MODE = "distributed_epoch"
PREFETCH_DEVICE = "/gpu:0"


def plan(config: PipelineConfig, facts: Facts, *,
         examples_read: int | None = None) -> PipelinePlan:
    """Resolve every decision of a pipeline from what was asked and what was read.

    Args:
        config: What the user asked for; its None fields are resolved here.
        facts: What was read from the source and the machine.
        examples_read: The examples a reader (a fit) takes in all through one iterator, where
            it is known: under ``cache="auto"`` a read of one pass or less plans no cache
            (:func:`tfopt.rules.keeps_cache`: it would serve nothing), and the plan's notes say
            why. Defaults to None (any read: the cache as the data and memory allow).

    Returns:
        The :class:`PipelinePlan`.

    Raises:
        tfopt.errors.InvalidArgumentError: Image data without ``image_size``, or a split smaller
            than one batch with ``drop_remainder``.

    Example:
        >>> facts = Facts(files=1, records=100, total_bytes=1 << 20, available_memory=1 << 30)
        >>> plan(PipelineConfig(batch_size=8), facts).cache
        <CacheMode.ENCODED: 'encoded'>
    """
    notes: list[str] = []
    target = _target(config, facts)
    random_crop = config.training if config.random_crop is None else config.random_crop
    device_crop = random_crop == DEVICE_CROP and target is not None
    crop_fraction = EVAL_CROP_FRACTION
    if device_crop:
        # ship whole central squares with a margin; the model draws the random crops
        side = sizes.device_crop_side(target)
        notes.append(plan_notes.device_crop_note(side, target))
        target, crop_fraction = (side, side), 1.0
    random_crop = random_crop is True
    ram_budget = (config.ram_budget if config.ram_budget is not None
                  else rules.default_ram_budget(facts.available_memory))
    cache, estimate, fallback = _choose_cache(config, facts, target, random_crop, ram_budget,
                                              notes, examples_read)
    decode = None
    if target is not None:
        decode = choose_decode(
            encoding=facts.image_encoding or "image", random_crop=random_crop, target=target,
            min_side=facts.min_image_side, cache_decoded=cache is CacheMode.DECODED,
            crop_fraction=crop_fraction)
    cache_bytes = (estimate or 0) if cache is not CacheMode.NONE else 0
    shuffle = None
    if config.training:
        # sized against the epoch it shuffles (an estimate without a manifest) and the RAM
        # left beside the cache: the rule tfopt.analyze judges buffers by
        shuffle = rules.shuffle_buffer(
            shuffle_bytes=config.shuffle_bytes,
            element_bytes=_element_bytes(facts, cache, target),
            epoch_records=facts.records or facts.estimated_records,
            batch_size=config.batch_size, ram_left=ram_budget - cache_bytes)
    repeat = config.training if config.repeat is None else config.repeat
    deterministic = (not config.training or config.seed is not None
                     if config.deterministic is None else config.deterministic)
    drop = config.drop_remainder
    if drop is None:
        drop = config.training and facts.replicas > 1
    _refuse_empty_epoch(config.batch_size, drop, facts.records)
    if facts.workers > 1 and facts.worker_index is not None and facts.files >= facts.workers:
        sharding = Sharding.FILE
    else:
        sharding = Sharding.DATA if facts.workers > 1 else Sharding.AUTO
    to_device = config.prefetch_to_device
    if to_device is None:
        to_device = facts.gpus == 1 and not facts.strategy
    prefetch = Prefetch.DEVICE if to_device and facts.gpus else Prefetch.HOST
    if config.service is not None:
        notes.append(plan_notes.service_note(config.service, SERVICE_PROCESSING_MODE))
    if not facts.shards_counted and config.skip_corrupt:
        notes.append(plan_notes.UNCOUNTED_SKIPS_NOTE)
    steps = None
    if facts.records is not None:
        steps = (facts.records // config.batch_size if drop
                 else -(-facts.records // config.batch_size))
    # The manifest's count is exact when nothing is skipped, nor through the tf.data service.
    # Under several workers it stays exact with DATA sharding: each worker's dataset is the
    # whole pass, which the strategy splits into the same number of steps on every worker
    # (Keras takes its evaluation steps from that length). Not with FILE sharding: a worker's
    # dataset holds only its own shards' batches, fewer than the steps the strategy takes.
    known_length = (not repeat and steps is not None and not config.skip_corrupt
                    and config.service is None and sharding is not Sharding.FILE)
    return PipelinePlan(
        batch_size=config.batch_size,
        training=config.training,
        repeat=repeat,
        drop_remainder=drop,
        deterministic=deterministic,
        files=facts.files,
        records=facts.records,
        output_size=target,
        device_crop=device_crop,
        decode=decode,
        cache=cache,
        cache_to_file=config.cache not in (True, False, "auto"),
        cache_estimate_bytes=estimate,
        ram_budget=ram_budget,
        autotune_ram_budget=max(MIN_AUTOTUNE_RAM, int(ram_budget - cache_bytes)),
        shuffle_elements=shuffle.records if shuffle else None,
        shuffle_bytes=shuffle.bytes if shuffle else None,
        shuffle_files=config.training and rules.shuffle_files_before(cache),
        cache_fallback=fallback,
        replicas=facts.replicas,
        distribution=facts.distribution,
        interleave_cycle=rules.interleave_cycle(facts.files, facts.usable_cores),
        parallel_calls=rules.parallel_calls(facts.usable_cores),
        count_block=sizes.records_per_block(facts.mean_record_bytes, COUNT_BLOCK),
        parse_block=sizes.records_per_block(facts.mean_record_bytes, PARSE_BATCH),
        sharding=sharding,
        workers=facts.workers,
        worker_index=facts.worker_index if sharding is Sharding.FILE else None,
        prefetch=prefetch,
        steps_per_epoch=steps,
        known_length=known_length,
        service=config.service,
        skip_corrupt=config.skip_corrupt,
        shards_counted=facts.shards_counted,
        pad_ragged=config.pad_ragged,
        notes=tuple(notes),
        store_smaller=_store_smaller(sizes.model_side(target, device_crop), facts),
    )


def _target(config: PipelineConfig, facts: Facts) -> tuple[int, int] | None:
    if facts.image_key is None:
        return None
    if config.image_size is not None:
        return config.image_size
    raise InvalidArgumentError(
        "image_size is required for image data: batches need one size (e.g. image_size=224)")


def _choose_cache(config: PipelineConfig, facts: Facts, target, random_crop: bool,
                  ram_budget: int, notes: list[str], examples_read: int | None = None
                  ) -> tuple[CacheMode, int | None, CacheFallback | None]:
    records = facts.records
    estimated = records is None and bool(facts.estimated_records) and target is not None
    if estimated:
        # no manifest: size the cache from an estimate rather than refuse it, and say so
        records = facts.estimated_records
    if target is None:
        # parsing is cheap and vectorised: cache the records, shuffle after the cache
        best, estimate = CacheMode.ENCODED, int(facts.total_bytes * (facts.gzip_expansion or 1))
    elif random_crop:
        best = CacheMode.DECODED
        per_image = _cached_image_bytes(facts, target)
        estimate = int(records * per_image) if records and per_image else None
    else:
        best = CacheMode.FINAL
        estimate = records * target[0] * target[1] * 3 if records else None
    if config.cache is False:
        return CacheMode.NONE, estimate, CacheFallback.OFF
    if estimated:
        notes.append(plan_notes.estimated_records_note(records, facts.gzip_expansion,
                                                       facts.mean_record_bytes))
    if config.cache != "auto":
        return best, estimate, None  # asked for: in memory or in the given file
    choice = rules.choose_cache(best, estimate, facts.total_bytes, ram_budget)
    one_pass = exact_pass_records(facts.records, skip_corrupt=config.skip_corrupt,
                                  service=config.service, workers=facts.workers)
    if (choice.mode is not CacheMode.NONE and examples_read is not None
            and not rules.keeps_cache(config.cache, examples_read, one_pass)):
        # planned as under cache=False (the same estimate), with a note saying why
        notes.append(plan_notes.one_pass_note(choice.mode, examples_read, one_pass))
        return CacheMode.NONE, estimate, CacheFallback.ONE_PASS
    if choice.fallback is not None:
        notes.append(plan_notes.cache_fallback_note(best, choice.fallback, estimate))
    return choice.mode, choice.estimate_bytes, choice.fallback


def _cached_image_bytes(facts: Facts, target: tuple[int, int]) -> float | None:
    """Mean bytes of one decoded image in a training cache, at the scale it is decoded for it
    (:func:`tfopt.data.sizes.mean_cached_image_bytes`): what the cache and the shuffle buffer
    are sized from. None when the image sizes are unknown."""
    return sizes.mean_cached_image_bytes(
        encoding=facts.image_encoding, side=sizes.cache_side(target),
        mean_pixels=facts.mean_image_pixels, min_side=facts.min_image_side,
        image_sizes=facts.image_sizes)


def _element_bytes(facts: Facts, cache: CacheMode, target) -> float:
    """Estimated bytes of one element where the shuffle buffer sits."""
    if cache is CacheMode.DECODED and facts.mean_image_pixels:
        return _cached_image_bytes(facts, target)
    if cache is CacheMode.FINAL and target is not None:
        return target[0] * target[1] * 3
    return facts.mean_record_bytes


def _store_smaller(model_side: int | None, facts: Facts) -> rules.StoreSmaller | None:
    """The shared store-smaller rule (:func:`tfopt.rules.store_smaller`) on the sampled
    images' median sides against the model's side; None when it does not apply."""
    if model_side is None:
        return None
    if facts.image_sizes:
        shorter = statistics.median(min(size) for size in facts.image_sizes)
        longer = statistics.median(max(size) for size in facts.image_sizes)
    else:
        shorter, longer = facts.min_image_side, None
    return rules.store_smaller(shorter, model_side, longer)


def _refuse_empty_epoch(batch: int, drop_remainder: bool, records: int | None) -> None:
    """A split smaller than one batch with drop_remainder has no batch at all: Keras then
    takes steps_per_epoch=0 for "not given" and a repeating pipeline's epoch never ends."""
    if drop_remainder and records is not None and records < batch:
        raise InvalidArgumentError(
            f"batch_size={batch} with drop_remainder=True: the source has only {records} "
            "records, so every batch would be dropped; use a smaller batch, or "
            "drop_remainder=False")


# -- decoding ----------------------------------------------------------------------------------


def choose_decode(*, encoding: str, random_crop: bool, target: tuple[int, int],
                  min_side: int | None, cache_decoded: bool,
                  crop_fraction: float = EVAL_CROP_FRACTION) -> DecodePlan:
    """Pick the decoding strategy for these images and this use.

    Args:
        encoding: ``"jpeg"``, ``"png"``, ... or ``"image"`` for mixed formats.
        random_crop: Random-resized crops (training) instead of a central crop.
        target: Output ``(height, width)``.
        min_side: The smallest shorter side among the sampled images (None if unknown).
        cache_decoded: Whole decoded images go into a cache (crops are drawn from it).
        crop_fraction: The central square kept when not cropping at random: 0.875 for
            evaluation, 1.0 when random crops are left to the device. Defaults to 0.875.

    Example:
        >>> choose_decode(encoding="jpeg", random_crop=False, target=(100, 100),
        ...               min_side=480, cache_decoded=False).ratio
        4
    """
    jpeg = encoding == "jpeg"
    if cache_decoded:
        # keep at least the crop margin of resolution: a 1/ratio image >= target x 256/224
        side = sizes.cache_side(target)
        ratio = sizes.reduction_ratio(min_side, (side, side)) if jpeg else 1
        return DecodePlan(DecodeStrategy.REDUCED if ratio > 1 else DecodeStrategy.PLAIN, ratio,
                          target, random_crop, jpeg,
                          plan_notes.cached_decode_reason(jpeg=jpeg, ratio=ratio, side=side),
                          min_decoded_side=side if jpeg else None)
    # evaluation keeps the central crop: that crop, not the whole image, must stay >= target
    kept_side = min_side if (random_crop or not min_side) else int(min_side * crop_fraction)
    ratio = sizes.reduction_ratio(kept_side, target) if jpeg else 1
    if not jpeg:
        return DecodePlan(DecodeStrategy.PLAIN, 1, target, random_crop, False,
                          plan_notes.full_decode_reason(encoding), crop_fraction=crop_fraction)
    if ratio > 1:
        # each image keeps the target across what is cut from it: the whole shorter side for
        # random crops (as the smallest sampled one does), the central square for evaluation
        keep = max(target) if random_crop else math.ceil(max(target) / crop_fraction)
        return DecodePlan(DecodeStrategy.REDUCED, ratio, target, random_crop, True,
                          plan_notes.reduced_decode_reason(target=target, ratio=ratio,
                                                           min_side=min_side, keep=keep),
                          crop_fraction=crop_fraction, min_decoded_side=keep)
    return DecodePlan(DecodeStrategy.CROP, 1, target, random_crop, True,
                      plan_notes.crop_decode_reason(random_crop), crop_fraction=crop_fraction)
