"""The types of a pipeline's plan: what the planner reads (:class:`Facts`) and what it decides
(:class:`PipelinePlan`, :class:`DecodePlan` and their enums), typed, with the length of a pass
where it is exact (:func:`exact_pass_records`, :func:`pass_records`).

The planner (:func:`tfopt.data.plan.plan`) makes them, the builder
(:mod:`tfopt.data.pipeline`) executes them, :mod:`tfopt.data.plan_notes` puts them in words and
:class:`~tfopt.data.choices.PipelineChoices` renders them. No TensorFlow.
"""

from __future__ import annotations

import dataclasses
import enum

import tfopt.rules as rules
from tfopt.data import sizes
from tfopt.data.sizes import EVAL_CROP_FRACTION
from tfopt.rules import CacheFallback, CacheMode


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
        store_smaller: The stored images are large for the model's side
            (:func:`tfopt.rules.store_smaller` on the sampled images' median sides): the
            ``tfopt convert --max-size`` to suggest; None where the rule does not apply.
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
    store_smaller: rules.StoreSmaller | None = None

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

    @property
    def model_side(self) -> int | None:
        """The side of the images the model gets (under ``random_crop="device"``, the crops it
        draws, not the margin squares shipped); None for non-image data."""
        return sizes.model_side(self.output_size, self.device_crop)

    @property
    def best_cache(self) -> CacheMode:
        """The stage the cache would be at had it fitted: the highest below every random one."""
        if self.output_size is None:
            return CacheMode.ENCODED
        random_crop = self.decode is not None and self.decode.random_crop
        return CacheMode.DECODED if random_crop else CacheMode.FINAL


def exact_pass_records(records: int | None, *, skip_corrupt: bool, service: str | None,
                       workers: int) -> int | None:
    """Records one pass yields in this process, where that is exact: the manifest's (or the
    header walk's) count ``records``, read whole (one worker, no tf.data service, nothing
    skipped); else None. The planner asks it before the plan exists (to decide a cache for a
    read of a given length), :func:`pass_records` of a plan made."""
    if records is None or skip_corrupt or service is not None or workers > 1:
        return None
    return records


def pass_records(plan: PipelinePlan) -> int | None:
    """Records one pass of this pipeline yields in this process, where that is exact
    (:func:`exact_pass_records` of the plan's own fields); else None.

    Every cached stage yields one element per record, so this is also where the first pass
    completes a cache (:func:`tfopt.data.plan_notes.partial_pass_note`)."""
    return exact_pass_records(plan.records, skip_corrupt=plan.skip_corrupt,
                              service=plan.service, workers=plan.workers)
