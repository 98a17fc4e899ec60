"""The pipeline planner: every decision a pipeline makes, from a config and plain facts.

:func:`plan` turns a :class:`~tfopt.data.config.PipelineConfig` (what was asked) and
:class:`Facts` (what was read from the source and the machine) into a :class:`PipelinePlan`
of typed decisions: how to decode, what to cache, how large a shuffle buffer, whether to
repeat, drop the remainder, shard by file or prefetch to the GPU. It is a pure function: it
reads no file, no environment variable and no device, and imports no TensorFlow, so every
decision can be tested on hand-made facts. The builder (:mod:`tfopt.data.pipeline`) gathers
the facts and executes the plan; :class:`~tfopt.data.choices.PipelineChoices` renders it.

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

import dataclasses
import enum
import math
import statistics

import tfopt.rules as rules
from tfopt.data.config import DEVICE_CROP, PipelineConfig
from tfopt.errors import InvalidArgumentError

# The shared rules (tfopt/rules.py), named here too: the planner's tests and callers read them
# from the planner. They are not copies: each is the rules module's object.
CACHE_SHARE = rules.CACHE_SHARE
MIN_AUTOTUNE_RAM = rules.MIN_AUTOTUNE_RAM
MAX_SHUFFLE_ELEMENTS = rules.MAX_SHUFFLE_ELEMENTS
CacheMode = rules.CacheMode
CacheFallback = rules.CacheFallback
COUNT_BLOCK = 256  # most records per counting step when checking shard record counts
PARSE_BATCH = 128  # most records per parse_example call: enough to amortise the op
# Counting and parsing blocks hold about this many bytes (at least 8 records): enough to
# amortise a scan step or a parse call over small records, and no more, because each shard's
# first block (and the first parse) waits for all of its records. With fixed blocks of 256
# and 128 records, 68-KB JPEGs made an evaluation's first batch wait for whole shards: 99 ms
# against the guide's 57, 82 ms with these blocks (demo data's validation split).
BLOCK_BYTES = 1 << 20
# Dynamic sharding for training too, not "parallel_epochs": the builder's seeds (shard order,
# shuffle, crops) are fixed in the graph, so under parallel_epochs every worker would produce
# the same sequence and the trainer would see each record once per worker, side by side.
# Dynamic sharding hands out shards, so each record comes once per epoch whatever the worker
# count, and steps_per_epoch stays right.
SERVICE_PROCESSING_MODE = "distributed_epoch"
PREFETCH_DEVICE = "/gpu:0"

EVAL_CROP_FRACTION = 0.875  # central 87.5 %: the 224-of-256 convention
# The "resize 256, crop 224" margin of ImageNet training: decoded images kept in the cache
# stay at least this much larger than the target (reduced JPEG decoding stops there), and
# with random crops left to the device the pipeline ships squares with this margin.
CACHE_SCALE = 256 / 224
DEVICE_CROP_SCALE = CACHE_SCALE


class Sharding(str, enum.Enum):
    """How the records are split between the workers of a multi-worker cluster."""

    FILE = "file"  # this worker reads its own shard files; tf.data's auto-shard is off
    DATA = "data"  # several workers, fewer shards than workers: each filters the records
    AUTO = "auto"  # one worker: tf.data's AUTO policy, should a strategy shard it later


class Prefetch(str, enum.Enum):
    """Where the last stage keeps its read-ahead batches."""

    HOST = "host"  # autotuned, in host memory
    DEVICE = "device"  # on the GPU (prefetch_to_device)


class DecodeStrategy(str, enum.Enum):
    """How encoded bytes become a fixed-size uint8 image (see :mod:`tfopt.data.decode`)."""

    CROP = "decode_and_crop"
    REDUCED = "reduced"
    PLAIN = "plain"


@dataclasses.dataclass(frozen=True)
class DecodePlan:
    """How each image becomes a ``target``-sized uint8 array, and why.

    Attributes:
        strategy: See :class:`DecodeStrategy`.
        ratio: JPEG down-scaling at decode (1, 2, 4 or 8).
        target: Output ``(height, width)``.
        random_crop: Random-resized crop (training) instead of a central crop.
        jpeg: Every image is a JPEG (decode_and_crop and ratio need it).
        reason: One line for the pipeline's description.
        crop_fraction: The central square kept when not cropping at random, as a fraction of
            the shorter side. Defaults to 0.875.
        min_decoded_side: Where set, each JPEG decodes at its own largest scale-down that
            keeps its shorter side at least this (``ratio`` is then the smallest sampled
            image's). Defaults to None (every image at ``ratio``).
    """

    strategy: DecodeStrategy
    ratio: int
    target: tuple[int, int]
    random_crop: bool
    jpeg: bool
    reason: str
    crop_fraction: float = EVAL_CROP_FRACTION
    min_decoded_side: int | None = None


class DistributionSource(str, enum.Enum):
    """Where the builder read the distribution facts (replicas, workers) from, once."""

    ACTIVE = "active"  # tf.distribute.get_strategy() at construction, and TF_CONFIG
    STRATEGY = "strategy"  # the strategy passed as input_context, and TF_CONFIG
    INPUT_CONTEXT = "input_context"  # a tf.distribute.InputContext passed


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the builder read from the source and the machine: all the planner looks at.

    Attributes:
        files: Shard files in the source.
        records: Records in them, exact from a manifest; None without one (the shards'
            record counts are then not checked).
        total_bytes: Bytes in the files.
        mean_record_bytes: Mean bytes of one serialized record (exact with a manifest, else
            from the sample).
        image_key: The encoded-image feature, None for non-image data.
        label_key: The label feature, if any.
        image_encoding: ``"jpeg"``, ``"png"``, ... or ``"image"`` for mixed formats.
        mean_image_pixels: Mean height*width of the sampled images.
        min_image_side: The smallest shorter side among the sampled images.
        image_sizes: ``(height, width)`` of each sampled image. Defaults to () (unknown).
        available_memory: Bytes of memory available (MemAvailable).
        usable_cores: CPU cores this process may run on.
        replicas: Replicas in sync of the active distribution strategy. Defaults to 1.
        strategy: A distribution strategy is active. Defaults to False.
        workers: Training workers in the cluster (chief included). Defaults to 1.
        worker_index: This process's place among them; None for an evaluator or without a
            cluster. Defaults to None.
        gpus: Visible GPUs. Defaults to 0.
        estimated_records: Without a manifest: the records the files probably hold, from their
            sizes and the sampled records' mean size (for GZIP files, their sizes times
            ``gzip_expansion``). It sizes caches and buffers, never the epoch. Defaults to None.
        gzip_expansion: GZIP files: decompressed bytes per file byte, measured over the start
            of the first file; None for plain files or where unknown. Defaults to None.
        distribution: Where ``replicas``, ``strategy``, ``workers`` and ``worker_index`` were
            read from. Defaults to ``DistributionSource.ACTIVE``.
        shards_counted: Each shard's records are counted as it is read, against a manifest's
            count, so a damaged shard is named. False without a manifest: ``records`` is then
            the header walk's count (or None), and TensorFlow's reader checks the records.
            Defaults to True.
    """

    files: int
    records: int | None
    total_bytes: int
    mean_record_bytes: float = 4096.0
    image_key: str | None = None
    label_key: str | None = None
    image_encoding: str | None = None
    mean_image_pixels: float | None = None
    min_image_side: int | None = None
    image_sizes: tuple[tuple[int, int], ...] = ()
    available_memory: int = 4 << 30
    usable_cores: int = 1
    replicas: int = 1
    strategy: bool = False
    workers: int = 1
    worker_index: int | None = None
    gpus: int = 0
    estimated_records: int | None = None
    gzip_expansion: float | None = None
    distribution: DistributionSource = DistributionSource.ACTIVE
    shards_counted: bool = True


# Bytes of TFRecord framing around each record: length (8), its CRC (4), the data's CRC (4).
RECORD_FRAMING_BYTES = 16


def estimate_records(total_bytes: int, mean_record_bytes: float | None,
                     expansion: float | None = 1.0) -> int | None:
    """Records in TFRecord files of ``total_bytes``, from a sample's mean record size and the
    files' ``expansion`` (decompressed bytes per file byte: 1 for plain files); None without
    a sample or, for compressed files, an expansion."""
    if not expansion or not mean_record_bytes:
        return None
    return max(1, round(total_bytes * expansion / (mean_record_bytes + RECORD_FRAMING_BYTES)))


@dataclasses.dataclass(frozen=True)
class PipelinePlan:
    """Every decision of a pipeline, typed; what :meth:`PipelineBuilder.build` executes.

    Attributes:
        batch_size: Examples per batch.
        training: Training settings (shuffled shards and records).
        repeat: Repeat forever.
        drop_remainder: Drop a last partial batch.
        deterministic: Keep the element order stable.
        files: Shard files in the source.
        records: Records in them (None without a manifest).
        output_size: ``(height, width)`` of the images shipped (the margin square with
            ``random_crop="device"``); None for non-image data.
        device_crop: Random crops are left to the model (``random_crop="device"``).
        decode: How images are decoded; None for non-image data.
        cache: The stage cached.
        cache_to_file: The cache is a file (``cache`` was a path), not memory.
        cache_estimate_bytes: Estimated bytes of the cache's stage (None when unknown).
        ram_budget: Bytes for the cache and tf.data's buffers.
        autotune_ram_budget: What is left of ``ram_budget`` for tf.data's autotuner.
        shuffle_elements: Shuffle buffer in elements (None when not training).
        shuffle_bytes: Its estimated bytes (None when not training).
        shuffle_files: The shard files are shuffled each epoch (training, nothing cached:
            :func:`tfopt.rules.shuffle_files_before`).
        cache_fallback: Why the cache is not at the stage that saves most; None where it is.
        replicas: Replicas in sync the plan was made for.
        distribution: Where the distribution facts were read from.
        interleave_cycle: Shards read at once (each by its own thread).
        parallel_calls: Elements each map works on at once (:func:`tfopt.rules.parallel_calls`).
        count_block: Records per counting step (against the manifest's counts).
        parse_block: Records per ``parse_example`` call.
        sharding: How a multi-worker cluster splits the records.
        workers: Training workers in the cluster.
        worker_index: This worker's place, for ``Sharding.FILE``; else None.
        prefetch: Where read-ahead batches wait.
        steps_per_epoch: Batches in one pass (None when the record count is unknown).
        known_length: ``steps_per_epoch`` is exact for this process's dataset, so the
            dataset may say so (``assert_cardinality``): one worker, or several with
            ``Sharding.DATA``.
        service: The tf.data service dispatcher, or None.
        skip_corrupt: Corrupted records are skipped (and counted where ``shards_counted``).
        shards_counted: Each shard's records are counted against its manifest count as it is
            read (see :class:`Facts`).
        pad_ragged: Variable-length features are padded.
        notes: Lines for the description: what was not done as asked, and why.
    """

    batch_size: int
    training: bool
    repeat: bool
    drop_remainder: bool
    deterministic: bool
    files: int
    records: int | None
    output_size: tuple[int, int] | None
    device_crop: bool
    decode: DecodePlan | None
    cache: CacheMode
    cache_to_file: bool
    cache_estimate_bytes: int | None
    ram_budget: int
    autotune_ram_budget: int
    shuffle_elements: int | None
    interleave_cycle: int
    parallel_calls: int
    count_block: int
    parse_block: int
    sharding: Sharding
    workers: int
    worker_index: int | None
    prefetch: Prefetch
    steps_per_epoch: int | None
    known_length: bool
    service: str | None
    skip_corrupt: bool
    shards_counted: bool
    pad_ragged: bool
    notes: tuple[str, ...] = ()
    shuffle_bytes: int | None = None
    shuffle_files: bool = False
    cache_fallback: CacheFallback | None = None
    replicas: int = 1
    distribution: DistributionSource = DistributionSource.ACTIVE

    @property
    def file_share(self) -> tuple[int, int] | None:
        """``(workers, index)`` when this worker reads only its share of the shard files."""
        return (self.workers, self.worker_index) if self.sharding is Sharding.FILE else None

    @property
    def shards_read(self) -> int:
        """Shard files this worker reads (what ``files.shard(workers, index)`` keeps)."""
        if self.sharding is not Sharding.FILE:
            return self.files
        return len(range(self.worker_index, self.files, self.workers))

    @property
    def shuffle_after_cache(self) -> bool:
        """Shuffle and repeat follow a cache of decoded or final images, not the reader."""
        return self.cache in (CacheMode.DECODED, CacheMode.FINAL)


def records_per_block(mean_record_bytes: float, most: int) -> int:
    """Records in a counting or parsing block of about ``BLOCK_BYTES``, 8 to ``most``."""
    return int(min(most, max(8, BLOCK_BYTES // max(1.0, mean_record_bytes))))


def plan(config: PipelineConfig, facts: Facts) -> PipelinePlan:
    """Resolve every decision of a pipeline from what was asked and what was read.

    Args:
        config: What the user asked for; its None fields are resolved here.
        facts: What was read from the source and the machine.

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
        side = int(round(DEVICE_CROP_SCALE * max(target)))
        notes.append(f"random-resized crops happen on the device: batches are {side}x{side}; "
                     f"put tfopt.Augment(output_size={target}, random_crop=True) first "
                     "in the model")
        target, crop_fraction = (side, side), 1.0
    random_crop = random_crop is True
    ram_budget = (config.ram_budget if config.ram_budget is not None
                  else rules.default_ram_budget(facts.available_memory))
    cache, estimate, fallback = _choose_cache(config, facts, target, random_crop, ram_budget,
                                              notes)
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
        notes.append(f"preprocessing runs on the tf.data service at {config.service}, "
                     f"processing mode {SERVICE_PROCESSING_MODE!r} (dynamic sharding: each "
                     "record once per epoch across the workers, order not fixed); caches, "
                     "the RAM budget and shuffling live on the workers")
    if not facts.shards_counted and config.skip_corrupt:
        notes.append("no manifest: corrupted records are skipped but cannot be counted")
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
        count_block=records_per_block(facts.mean_record_bytes, COUNT_BLOCK),
        parse_block=records_per_block(facts.mean_record_bytes, PARSE_BATCH),
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
    )


def _target(config: PipelineConfig, facts: Facts) -> tuple[int, int] | None:
    if facts.image_key is None:
        return None
    if config.image_size is not None:
        return config.image_size
    raise InvalidArgumentError(
        "image_size is required for image data: batches need one size (e.g. image_size=224)")


def _choose_cache(config: PipelineConfig, facts: Facts, target, random_crop: bool,
                  ram_budget: int, notes: list[str]
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
        per_image = cached_image_bytes(facts, target)
        estimate = int(records * per_image) if records and per_image else None
    else:
        best = CacheMode.FINAL
        estimate = records * target[0] * target[1] * 3 if records else None
    if config.cache is False:
        return CacheMode.NONE, estimate, CacheFallback.OFF
    if estimated:
        expanded = (f", GZIP expanding them {facts.gzip_expansion:.2f}x (measured over the "
                    "start of the first file)" if facts.gzip_expansion else "")
        notes.append(f"no manifest: about {records:,} records, estimated from the file sizes"
                     f"{expanded} and the sampled records' mean size "
                     f"({facts.mean_record_bytes:,.0f} bytes); the cache is sized from that "
                     "estimate")
    if config.cache != "auto":
        return best, estimate, None  # asked for: in memory or in the given file
    choice = rules.choose_cache(best, estimate, facts.total_bytes, ram_budget)
    if choice.fallback is CacheFallback.NOTHING_FITS:
        notes.append("the data does not fit the RAM budget: no cache")
    elif choice.fallback is not None:
        why = ("its size is unknown without a manifest"
               if choice.fallback is CacheFallback.SIZE_UNKNOWN
               else f"it would not fit the RAM budget ({estimate >> 20} MiB)")
        notes.append(f"{best.value} data not cached: {why}; caching the encoded records "
                     "instead")
    return choice.mode, choice.estimate_bytes, choice.fallback


def cached_image_bytes(facts: Facts, target: tuple[int, int]) -> float | None:
    """Mean bytes of one decoded image in a training cache, at the scale it is decoded for it.

    Each JPEG goes into the cache at its own largest reduced scale that keeps the crop margin
    (:func:`choose_decode`, :func:`jpeg_image_ratio`): camera photos of 3,000 px for a 224-px
    model are decoded at 1/8 or 1/4 scale, 64 or 16 times less memory than at full size, and
    the cache and the shuffle buffer are sized from what they will hold: the mean over the
    sampled images' sizes, else from their mean pixels at the smallest one's ratio (which
    overstates it). None when the image sizes are unknown.
    """
    if not facts.mean_image_pixels:
        return None
    side = cache_side(target)
    if facts.image_encoding != "jpeg":
        return facts.mean_image_pixels * 3
    if facts.image_sizes:
        total = 0
        for height, width in facts.image_sizes:
            ratio = jpeg_image_ratio(height, width, side)
            total += -(-height // ratio) * -(-width // ratio) * 3
        return total / len(facts.image_sizes)
    ratio = reduction_ratio(facts.min_image_side, (side, side))
    return facts.mean_image_pixels / (ratio * ratio) * 3


def _element_bytes(facts: Facts, cache: CacheMode, target) -> float:
    """Estimated bytes of one element where the shuffle buffer sits."""
    if cache is CacheMode.DECODED and facts.mean_image_pixels:
        return cached_image_bytes(facts, target)
    if cache is CacheMode.FINAL and target is not None:
        return target[0] * target[1] * 3
    return facts.mean_record_bytes


def stall_advice(plan_: PipelinePlan, facts: Facts) -> str:
    """What to do about an input-bound epoch of this pipeline, from what its plan knows: the
    stage that costs most (decoding, for images), why the cache was or was not chosen, and
    whether the stored images are the lever (``tfopt convert --max-size``)."""
    parts = []
    if plan_.decode is not None:
        parts.append(f"decoding is the costly stage here ({plan_.decode.strategy.value}: "
                     f"{plan_.decode.reason})")
    fallback = plan_.cache_fallback
    if fallback is CacheFallback.OFF:
        parts.append("the cache is off (cache=False)")
    elif fallback is not None:
        best = _best_cache(plan_).value
        why = {CacheFallback.TOO_LARGE: f"the {best} data would not fit the RAM budget, so "
                                        "the encoded records are cached",
               CacheFallback.SIZE_UNKNOWN: f"the {best} data's size is unknown without a "
                                           "manifest, so the encoded records are cached",
               CacheFallback.NOTHING_FITS: "the data does not fit the RAM budget: no cache"}
        parts.append(f"not cached: {why[fallback]} (a larger ram_budget, or cache=True or a "
                     "file path, caches all the same)")
    else:
        parts.append(f"the {plan_.cache.value} data is cached: the first epoch fills the "
                     "cache, later ones read it")
    smaller = store_smaller(plan_, facts)
    if smaller is not None:
        megapixels = (facts.mean_image_pixels or smaller.stored_side ** 2) / 1e6
        size = smaller.max_size
        parts.append(
            f"the stored images are large for a {smaller.model_side}-px model (shorter "
            f"sides of {smaller.stored_side} px, {megapixels:.1f} megapixels on average): "
            f"'tfopt convert --max-size {size}' stores them at most "
            f"{size} px ({size ** 2 / 1e6:.2f} megapixels at most), "
            "the largest lever on decoding")
    if plan_.device_crop is False and plan_.decode is not None and plan_.decode.random_crop:
        parts.append("random_crop='device' with tfopt.Augment in the model moves the crops "
                     "onto the accelerator")
    if not parts:
        parts.append("the pipeline's choices are in builder.choices.describe()")
    return "; ".join(parts)


def _best_cache(plan_: PipelinePlan) -> CacheMode:
    """The stage the cache would be at had it fitted."""
    if plan_.output_size is None:
        return CacheMode.ENCODED
    random_crop = plan_.decode is not None and plan_.decode.random_crop
    return CacheMode.DECODED if random_crop else CacheMode.FINAL


def model_side(plan_: PipelinePlan) -> int | None:
    """The side of the images the model gets (under ``random_crop="device"``, the crops it
    draws, not the margin squares shipped); None for non-image data."""
    if plan_.output_size is None:
        return None
    side = max(plan_.output_size)
    return int(round(side / DEVICE_CROP_SCALE)) if plan_.device_crop else side


def store_smaller(plan_: PipelinePlan, facts: Facts) -> rules.StoreSmaller | None:
    """The shared store-smaller rule (:func:`tfopt.rules.store_smaller`) on the sampled
    images' median sides against the model's side; None when it does not apply."""
    side = model_side(plan_)
    if side is None:
        return None
    if facts.image_sizes:
        shorter = statistics.median(min(size) for size in facts.image_sizes)
        longer = statistics.median(max(size) for size in facts.image_sizes)
    else:
        shorter, longer = facts.min_image_side, None
    return rules.store_smaller(shorter, side, longer)


# -- reading a cached pipeline in part ----------------------------------------------------------
#
# tf.data completes a cache only when its input reports the end; an iterator that goes before
# that (``take(3)``, a fit of fewer steps than one pass) leaves it filled in part, and tf.data
# discards it, logging "The calling iterator did not fully read the dataset being cached" from
# C++ (docs/data.md). Every cached stage yields one element per record, so the end of the first
# pass is a count of records.


def pass_records(plan_: PipelinePlan) -> int | None:
    """Records one pass of this pipeline yields in this process, where that is exact: the
    manifest's count, read whole (one worker, no tf.data service, nothing skipped); else None."""
    if (plan_.records is None or plan_.skip_corrupt or plan_.service is not None
            or plan_.workers > 1):
        return None
    return plan_.records


def fill_batches(records: int, batch_size: int) -> int:
    """Batches a reader of a repeating pipeline takes, through one iterator, after which its
    cache is complete for certain: one element past the last record of the first pass, which
    makes the cache's input report its end. Fewer may do (read-ahead asks for more than the
    reader takes), but not for certain."""
    return records // batch_size + 1


def partial_pass_note(plan_: PipelinePlan, batches: int) -> str | None:
    """Why the cache is wasted on a reader that takes ``batches`` batches in all, through one
    iterator, when that is less than one pass; None when it is not (or cannot be told: no
    cache, no exact record count).

    Such a reader never gets an element from the cache (it serves only the passes after the one
    that filled it), and tf.data discards the part it filled when the iterator goes, unless
    read-ahead (the shuffle buffer, prefetching) happened to reach the end of the pass.
    """
    records = pass_records(plan_)
    if plan_.cache is CacheMode.NONE or records is None:
        return None
    examples = batches * plan_.batch_size
    if examples >= records:
        return None
    return (f"reads {batches:,} batches of {plan_.batch_size} in all ({examples:,} examples), "
            f"less than one pass over the {records:,} records: the {plan_.cache.value} cache "
            "is filled only by a pass read to its end, so it serves nothing here (and tf.data "
            "discards a cache left part-filled, logging 'The calling iterator did not fully "
            "read the dataset being cached'); read whole passes (at least "
            f"{fill_batches(records, plan_.batch_size):,} batches through one iterator: "
            "steps_per_epoch x epochs in a fit) or build the pipeline with cache=False")


def _refuse_empty_epoch(batch: int, drop_remainder: bool, records: int | None) -> None:
    """A split smaller than one batch with drop_remainder has no batch at all: Keras then
    takes steps_per_epoch=0 for "not given" and a repeating pipeline's epoch never ends."""
    if drop_remainder and records is not None and records < batch:
        raise InvalidArgumentError(
            f"batch_size={batch} with drop_remainder=True: the source has only {records} "
            "records, so every batch would be dropped; use a smaller batch, or "
            "drop_remainder=False")


# -- decoding ----------------------------------------------------------------------------------

JPEG_RATIOS = (8, 4, 2)  # the DCT scalings TensorFlow's JPEG decoder offers, largest first


def reduction_ratio(min_side: int | None, target: tuple[int, int]) -> int:
    """The largest JPEG scale-down (8, 4, 2) that keeps the image at least the target size."""
    if not min_side:
        return 1
    for ratio in JPEG_RATIOS:
        if min_side / ratio >= max(target):
            return ratio
    return 1


def jpeg_image_ratio(height: int, width: int, min_side: int) -> int:
    """The largest JPEG scale-down (8, 4, 2, else 1) that keeps this image's shorter side at
    least ``min_side``: what :func:`tfopt.data.decode.decode_jpeg_scaled` decodes it at.

    libjpeg rounds a scaled side up, ``ceil(side / ratio)``, and so does this.

    Example:
        >>> jpeg_image_ratio(2092, 3057, 256), jpeg_image_ratio(1500, 2000, 256)
        (8, 4)
    """
    shorter = min(height, width)
    for ratio in JPEG_RATIOS:
        if -(-shorter // ratio) >= min_side:
            return ratio
    return 1


def cache_side(target: tuple[int, int]) -> int:
    """Side of the square in which decoded images are cached for random crops."""
    return int(round(CACHE_SCALE * max(target)))


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
        side = cache_side(target)
        ratio = reduction_ratio(min_side, (side, side)) if jpeg else 1
        if not jpeg:
            scale = ""
        elif ratio > 1:
            scale = (f" at 1/{ratio} scale or less (each JPEG at its own, its shorter side "
                     f"kept >= {side} px)")
        else:
            scale = f" (a JPEG at a reduced scale where its shorter side keeps >= {side} px)"
        return DecodePlan(DecodeStrategy.REDUCED if ratio > 1 else DecodeStrategy.PLAIN, ratio,
                          target, random_crop, jpeg,
                          f"decoded once{scale} into the cache; every later epoch draws its "
                          "random crops from memory", min_decoded_side=side if jpeg else None)
    # evaluation keeps the central crop: that crop, not the whole image, must stay >= target
    kept_side = min_side if (random_crop or not min_side) else int(min_side * crop_fraction)
    ratio = reduction_ratio(kept_side, target) if jpeg else 1
    if not jpeg:
        return DecodePlan(DecodeStrategy.PLAIN, 1, target, random_crop, False,
                          f"{encoding} images: full decode", crop_fraction=crop_fraction)
    if ratio > 1:
        # each image keeps the target across what is cut from it: the whole shorter side for
        # random crops (as the smallest sampled one does), the central square for evaluation
        keep = max(target) if random_crop else math.ceil(max(target) / crop_fraction)
        return DecodePlan(DecodeStrategy.REDUCED, ratio, target, random_crop, True,
                          f"target {target[0]}x{target[1]} is at most 1/{ratio} of the smallest "
                          f"stored side ({min_side} px): decode at 1/{ratio} scale or less "
                          f"(each JPEG at its own, its shorter side kept >= {keep} px)",
                          crop_fraction=crop_fraction, min_decoded_side=keep)
    what = "random-resized-crop window" if random_crop else "central square"
    return DecodePlan(DecodeStrategy.CROP, 1, target, random_crop, True,
                      f"decode only the {what} (tf.io.decode_and_crop_jpeg)",
                      crop_fraction=crop_fraction)
