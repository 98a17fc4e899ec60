"""Tuned ``tf.data`` pipelines from TFRecord shards, in one call.

The builder reads the source once (manifest or a sample of records), chooses how to read,
parse, decode, cache, shuffle, batch and prefetch, and says what it chose and why
(``PipelineBuilder.choices.describe()``). The order of stages for images:

    files (shuffled per epoch) -> parallel interleave of shard readers (counting records
    against the manifest) -> [cache encoded] -> shuffle (buffer sized in bytes) -> batch ->
    parse_example once per batch -> unbatch -> decode (strategy from the target size)
    [-> cache decoded -> shuffle] -> crop and resize to uint8 -> batch -> prefetch

Images leave the pipeline as uint8 batches of one size; conversion to float, normalisation
and augmentation belong on the accelerator (``tfopt.data.augment``). Other data is parsed
per batch and leaves as a dict of tensors (ragged, or padded with ``pad_ragged``).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import logging
import os

import tensorflow as tf

from tfopt._system import usable_cores
from tfopt._validate import whole_number
from tfopt.data import service as _service
from tfopt.data.decode import (
    DEVICE_CROP_SCALE,
    EVAL_CROP_FRACTION,
    DecodePlan,
    choose_decode,
    crop_and_resize,
    decode_full,
    decode_to_target,
)
from tfopt.data.source import ParsedFeature, PipelineSource, resolve_source
from tfopt.errors import InvalidArgumentError
from tfopt.records.format.tfrecord import tf_compression_type
from tfopt.records.schema import FeatureKind

logger = logging.getLogger("tfopt")

AUTOTUNE = tf.data.AUTOTUNE
DEFAULT_RAM_FRACTION = 0.5  # of MemAvailable: the budget for cache + tf.data's own buffers
CACHE_SHARE = 0.6  # of the budget a cache may take; the rest stays for autotuned buffers
# convert already shuffled records across shards, and shard order is reshuffled every epoch:
# 32 MiB of buffer mixes well and fills in a fraction of a second (a 128 MiB buffer of 66-KB
# photos delayed the first batch by ~10 % of a 2,700-image epoch here)
DEFAULT_SHUFFLE_BYTES = 32 << 20
MAX_SHUFFLE_ELEMENTS = 16384  # small records: more elements only add fill time
COUNT_BLOCK = 256  # most records per counting step when checking shard record counts
# Dynamic sharding for training too, not "parallel_epochs": the builder's seeds (shard order,
# shuffle, crops) are fixed in the graph, so under parallel_epochs every worker would produce
# the same sequence and the trainer would see each record once per worker, side by side.
# Dynamic sharding hands out shards, so each record comes once per epoch whatever the worker
# count, and steps_per_epoch stays right.
SERVICE_PROCESSING_MODE = "distributed_epoch"
PARSE_BATCH = 128  # most records per parse_example call: enough to amortise the op
# Counting and parsing blocks hold about this many bytes (at least 8 records): enough to
# amortise a scan step or a parse call over small records, and no more, because each shard's
# first block (and the first parse) waits for all of its records. With fixed blocks of 256
# and 128 records, 68-KB JPEGs made an evaluation's first batch wait for whole shards: 99 ms
# against the guide's 57, 82 ms with these blocks (demo data's validation split).
BLOCK_BYTES = 1 << 20


def records_per_block(mean_record_bytes: float, most: int) -> int:
    """Records in a counting or parsing block of about ``BLOCK_BYTES``, 8 to ``most``."""
    return int(min(most, max(8, BLOCK_BYTES // max(1.0, mean_record_bytes))))


class CacheMode(str, enum.Enum):
    NONE = "none"
    ENCODED = "encoded"  # serialized records, before decoding
    DECODED = "decoded"  # decoded full images (training crops come from memory)
    FINAL = "final"  # fixed-size images (evaluation) or parsed non-image batches


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """How a pipeline reads its source.

    Attributes:
        batch_size: Examples per batch (the global batch under a distribution strategy).
        training: Training settings: shuffled shards and records, random crops, repeat,
            non-deterministic order for speed. Defaults to False (evaluation: every record
            exactly once, in a stable order).
        image_size: Output ``(height, width)`` or one int for squares; required for image
            data (batches need one size), ignored otherwise.
        image_key: The encoded-image feature. Defaults to the manifest's or the inferred one.
        label_key: The label feature. Defaults to the manifest's or the inferred one.
        split: The manifest split. Defaults to "train" when training, else "validation" if
            there is one.
        random_crop: Random-resized crop (8-100 % of the area): True (in the pipeline),
            ``"device"`` (the pipeline ships squares of 256/224 of ``image_size``, central
            square of each image, and the model crops them on the accelerator: put
            ``tfopt.Augment(output_size=image_size, random_crop=True)`` first in it), or False
            (central crop).
            Defaults to True for training images, False otherwise.
        cache: ``"auto"`` (cache when the estimate fits the RAM budget), True (in memory),
            False, or a file path (cache in that file). Defaults to "auto".
        ram_budget: Bytes for the cache and tf.data's buffers. Defaults to half of the
            memory available now.
        shuffle_bytes: Shuffle buffer size in bytes (converted to elements by their
            estimated size, at most 16,384 elements). Defaults to 32 MiB.
        repeat: Repeat forever (use ``steps_per_epoch``). Defaults to ``training``.
        drop_remainder: Drop a last partial batch. Defaults to True when training under a
            distribution strategy with several replicas.
        deterministic: Keep the element order stable. Defaults to True for evaluation or when
            a seed is given, False for training (faster).
        seed: Seed for shard order, shuffling and crops. Defaults to None (random).
        skip_corrupt: Skip corrupted records (the rest of their shard is lost: TensorFlow's
            reader cannot resynchronise) and count them; default is an error naming the shard.
        pad_ragged: Pad variable-length features into dense batches instead of ragged ones.
            Defaults to False.
        prefetch_to_device: Prefetch batches onto the GPU. Defaults to True when exactly one
            GPU is visible and no distribution strategy is active.
        service: A tf.data service dispatcher address, ``grpc://host:port`` (what
            ``tfopt data-service dispatcher`` prints): its workers run the pipeline and this
            process only receives the batches. Dynamic sharding ("distributed_epoch"): every
            record once per epoch, spread over the workers, in no fixed order. Defaults to None
            (the pipeline runs here).
    """

    batch_size: int
    training: bool = False
    image_size: int | tuple[int, int] | None = None
    image_key: str | None = None
    label_key: str | None = None
    split: str | None = None
    random_crop: bool | str | None = None
    cache: bool | str = "auto"
    ram_budget: int | None = None
    shuffle_bytes: int = DEFAULT_SHUFFLE_BYTES
    repeat: bool | None = None
    drop_remainder: bool | None = None
    deterministic: bool | None = None
    seed: int | None = None
    skip_corrupt: bool = False
    pad_ragged: bool = False
    prefetch_to_device: bool | None = None
    service: str | None = None

    def __post_init__(self):
        def set_field(name, value):
            object.__setattr__(self, name, value)

        set_field("batch_size", whole_number(self.batch_size, "batch_size", minimum=1))
        if self.image_size is not None:
            sides = (self.image_size if isinstance(self.image_size, (tuple, list))
                     else (self.image_size, self.image_size))
            if len(sides) != 2:
                raise InvalidArgumentError(f"image_size={self.image_size!r}: expected an int or "
                                           "(height, width) of positive ints")
            set_field("image_size", tuple(whole_number(side, "image_size", minimum=1)
                                          for side in sides))
        for name in ("training", "skip_corrupt", "pad_ragged"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name}={getattr(self, name)!r}: expected True or False")
        for name in ("repeat", "drop_remainder", "deterministic", "prefetch_to_device"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name}={getattr(self, name)!r}: expected True, "
                                           "False or None")
        _check_cache(self.cache)
        set_field("shuffle_bytes", whole_number(self.shuffle_bytes, "shuffle_bytes", minimum=1))
        if self.ram_budget is not None:
            set_field("ram_budget", whole_number(self.ram_budget, "ram_budget", minimum=1))
        if self.seed is not None:
            set_field("seed", whole_number(self.seed, "seed", minimum=0))
        if self.random_crop not in (None, True, False, "device"):
            raise InvalidArgumentError(f"random_crop={self.random_crop!r}: expected True, False "
                                       "or 'device'")
        if self.repeat is None:
            set_field("repeat", self.training)
        if self.deterministic is None:
            set_field("deterministic", not self.training or self.seed is not None)
        if self.ram_budget is None:
            set_field("ram_budget", int(available_memory() * DEFAULT_RAM_FRACTION))
        if self.service is not None:
            set_field("service", _service.parse_address(self.service))
            if self.skip_corrupt:
                raise InvalidArgumentError(
                    "skip_corrupt=True with service: corrupted records are counted in a "
                    "variable of this process, which the service's workers cannot update; "
                    "run 'tfopt verify' on the dataset, or build without the service")

    def replace(self, **changes) -> PipelineConfig:
        return dataclasses.replace(self, **changes)


# Words that mean a cache setting, not a file: cache="off" would otherwise write off.index
# and off.data-* into the working folder (the CLI's --cache takes these words)
_CACHE_WORDS = {"off", "on", "none", "no", "yes", "true", "false", "memory", "ram", "disk", "file"}


def _check_cache(cache) -> None:
    if cache is True or cache is False or cache == "auto":
        return
    if isinstance(cache, (str, os.PathLike)) and str(cache).strip():
        if str(cache).strip().lower() in _CACHE_WORDS:
            raise InvalidArgumentError(
                f"cache={cache!r}: expected 'auto', True, False or a file path; for no cache "
                "pass cache=False, for memory cache=True (a file literally named so: "
                f"'./{cache}')")
        return
    raise InvalidArgumentError(f"cache={cache!r}: expected 'auto', True, False or a file path")


def _file_stamp(file: str) -> list:
    """Name, size and modification time of a shard (what tells a rewritten shard apart)."""
    try:
        stat = tf.io.gfile.stat(file)
        return [file, stat.length, stat.mtime_nsec]
    except tf.errors.OpError:
        return [file, None, None]


def _other_cache_files(location: str) -> list[str]:
    """A note on cache files at the same path under other keys (other data or settings, or
    shards since rewritten): tfopt never deletes them, since another pipeline may use them."""
    prefix, _, key = location.rpartition("-")
    others = {}
    for name in tf.io.gfile.glob(f"{prefix}-*"):
        other_key = name[len(prefix) + 1:].split(".", 1)[0].split("_", 1)[0]
        if other_key != key and len(other_key) == len(key):
            size = tf.io.gfile.stat(name).length if not tf.io.gfile.isdir(name) else 0
            others[other_key] = others.get(other_key, 0) + size
    if not others:
        return []
    return [f"{len(others)} other cache file set(s) at {prefix}-* ({sum(others.values()) >> 20} "
            "MiB) hold other data or settings; remove them when no pipeline uses them"]


def available_memory() -> int:
    """Bytes of memory available now (MemAvailable), or 4 GiB where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


@dataclasses.dataclass(frozen=True)
class PipelineChoices:
    """What the builder chose, and why: the answer to "what did AUTOTUNE pick?".

    tf.data's AUTOTUNE still tunes the parallelism and buffer sizes marked "autotuned" at run
    time, within ``ram_budget``; everything else is fixed here.
    """

    files: int
    records: int | None
    interleave_cycle: int
    parallel_calls: str
    parse: str
    decode: DecodePlan | None
    cache: CacheMode
    cache_location: str
    cache_estimate_bytes: int | None
    ram_budget: int
    shuffle_elements: int | None
    repeat: bool
    batch_size: int
    drop_remainder: bool
    deterministic: bool
    auto_shard: str
    prefetch: str
    skip_corrupt: bool
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["cache"] = self.cache.value
        if self.decode is not None:
            data["decode"] = {**dataclasses.asdict(self.decode),
                              "strategy": self.decode.strategy.value}
        return data

    def describe(self) -> str:
        mib = 1 << 20
        lines = [
            f"files        {self.files} shard(s), {self.records if self.records is not None else '?'} "
            f"records; order {'shuffled each epoch' if self.repeat or self.shuffle_elements else 'fixed'}",
            f"read         parallel interleave, cycle {self.interleave_cycle}, "
            f"{'deterministic' if self.deterministic else 'non-deterministic (faster)'}",
            f"parse        {self.parse}",
        ]
        if self.decode is not None:
            lines.append(f"decode       {self.decode.strategy.value}"
                         f"{f' ratio {self.decode.ratio}' if self.decode.ratio > 1 else ''}: "
                         f"{self.decode.reason}")
            crop = ("random-resized crop" if self.decode.random_crop
                    else f"central square ({self.decode.crop_fraction:.1%} of the shorter side)")
            lines.append(f"resize       {crop} to {self.decode.target[0]}x{self.decode.target[1]}, "
                         "uint8 out (float and normalisation on the accelerator)")
        estimate = ("?" if self.cache_estimate_bytes is None
                    else f"{self.cache_estimate_bytes / mib:,.0f} MiB")
        lines.append(f"cache        {self.cache.value} ({self.cache_location}); estimate "
                     f"{estimate}, RAM budget {self.ram_budget / mib:,.0f} MiB")
        if self.shuffle_elements:
            lines.append(f"shuffle      buffer of {self.shuffle_elements} elements")
        lines.append(f"map          num_parallel_calls={self.parallel_calls}")
        # images are batched right after their decode (or crop) map, which tf.data fuses
        # with the batch, unless final images come out of a cache
        fused = (", fused with the map before it" if self.decode is not None
                 and self.cache is not CacheMode.FINAL else "")
        lines.append(f"batch        {self.batch_size}, drop_remainder={self.drop_remainder}, "
                     f"repeat={self.repeat}{fused}")
        lines.append(f"sharding     {self.auto_shard}")
        lines.append(f"prefetch     {self.prefetch}")
        if self.records is None:  # no manifest: no counts to check the shards against
            corrupt = ("skipped (not counted: no manifest)" if self.skip_corrupt
                       else "TensorFlow's DataLossError (no manifest to name the shard)")
        else:
            corrupt = "skipped and counted" if self.skip_corrupt else "error naming the shard"
        lines.append(f"corrupt      {corrupt}")
        lines.extend(f"note         {note}" for note in self.notes)
        return "\n".join(lines)


def _tf_config_worker() -> tuple[int, int | None]:
    """(training workers in TF_CONFIG's cluster, this process's place among them).

    Numbered as MultiWorkerMirroredStrategy numbers its input pipelines: the chief first, then
    the workers. The place is None for an evaluator or without a task.
    """
    try:
        config = json.loads(os.environ.get("TF_CONFIG", "{}"))
        cluster, task = config.get("cluster", {}), config.get("task", {})
        chiefs = len(cluster.get("chief", []))
        workers = max(1, chiefs + len(cluster.get("worker", [])))
        place = {"chief": 0, "worker": chiefs + int(task.get("index", 0))}.get(task.get("type"))
    except (ValueError, TypeError, AttributeError):
        return 1, None
    return workers, place


def _tf_config_workers() -> int:
    return _tf_config_worker()[0]


class PipelineBuilder:
    """Builds a tuned ``tf.data.Dataset`` of ``(features, label)`` batches from TFRecords.

    Args:
        source: A tfopt dataset folder, a list of TFRecord files, or a glob.
        config: A :class:`PipelineConfig`; or pass its fields as keyword arguments.

    Raises:
        tfopt.DatasetError: Nothing readable at ``source``.
        tfopt.InvalidArgumentError: A config value or key does not fit the data.

    Example:
        >>> builder = PipelineBuilder("shards/", batch_size=64, training=True, image_size=224)
        >>> print(builder.choices.describe())
        >>> model.fit(builder.build(), steps_per_epoch=builder.steps_per_epoch, epochs=5)
    """

    def __init__(self, source, config: PipelineConfig | int | None = None, **fields):
        if config is not None and not isinstance(config, PipelineConfig):
            # PipelineBuilder(source, 64, ...) as build_pipeline(source, 64, ...) reads
            fields = {"batch_size": config, **fields}
            config = None
        unknown = sorted(set(fields) - {field.name for field in dataclasses.fields(PipelineConfig)})
        if unknown:
            raise InvalidArgumentError(
                f"unknown pipeline option(s) {', '.join(unknown)}: see tfopt.PipelineConfig "
                "for the options (e.g. shuffling is on when training=True)")
        if config is None:
            config = PipelineConfig(**fields)
        elif fields:
            config = config.replace(**fields)
        self.config = config
        self.source: PipelineSource = resolve_source(
            source, split=config.split, image_key=config.image_key, label_key=config.label_key,
            training=config.training)
        # shard index -> records it lost to corruption under skip_corrupt, from its latest
        # read: set, not added to, so that repeated epochs and read-ahead do not count them
        # again. A Python dict, not a tf.Variable: built under a distribution strategy's scope
        # a variable is mirrored, and a tf.data function cannot update a mirrored variable.
        self._lost_per_shard: dict[int, int] = {}
        self._seed = config.seed if config.seed is not None else int.from_bytes(os.urandom(4), "little")
        self.choices = self._choose()
        self._refuse_empty_epoch()

    @property
    def corrupt_records(self) -> int:
        """Records lost to corruption under ``skip_corrupt`` (read it after an epoch): each
        damaged shard counts once, however many epochs or read-ahead passes read it."""
        return sum(self._lost_per_shard.values())

    def _note_lost(self, index, missing):
        self._lost_per_shard[int(index)] = int(missing)
        return missing

    def _refuse_empty_epoch(self) -> None:
        """A split smaller than one batch with drop_remainder has no batch at all: Keras then
        takes steps_per_epoch=0 for "not given" and a repeating pipeline's epoch never ends."""
        records, batch = self.source.num_records, self.config.batch_size
        if self.choices.drop_remainder and records is not None and records < batch:
            raise InvalidArgumentError(
                f"batch_size={batch} with drop_remainder=True: the source has only {records} "
                "records, so every batch would be dropped; use a smaller batch, or "
                "drop_remainder=False")

    # -- decisions --------------------------------------------------------------------------

    def _target(self) -> tuple[int, int] | None:
        if self.source.image_key is None:
            return None
        if self.config.image_size is not None:
            return self.config.image_size
        raise InvalidArgumentError(
            "image_size is required for image data: batches need one size (e.g. image_size=224)")

    def _file_share(self) -> tuple[int, int] | None:
        """``(workers, place)`` when this worker reads only its share of the shard files.

        tfopt shards the file list itself instead of leaving it to tf.data's FILE auto-shard
        policy, which refuses the pipeline: the per-image seed counter (``enumerate``) is a
        second source ("Found an unshardable source dataset").
        """
        workers, place = _tf_config_worker()
        if workers > 1 and place is not None and len(self.source.files) >= workers:
            return workers, place
        return None

    def _replicas(self) -> int:
        return tf.distribute.get_strategy().num_replicas_in_sync

    def _choose(self) -> PipelineChoices:
        config, source = self.config, self.source
        target = self._target()
        random_crop = (config.training if config.random_crop is None else config.random_crop)
        notes = []
        crop_fraction = EVAL_CROP_FRACTION
        if random_crop == "device" and target is not None:
            # ship whole central squares with a margin; the model draws the random crops
            side = int(round(DEVICE_CROP_SCALE * max(target)))
            notes.append(f"random-resized crops happen on the device: batches are {side}x{side}; "
                         f"put tfopt.Augment(output_size={target}, random_crop=True) first "
                         "in the model")
            target, random_crop, crop_fraction = (side, side), False, 1.0
        self._output_size = target
        cache, estimate = self._choose_cache(target, random_crop, notes)
        decode = None
        if target is not None:
            decode = choose_decode(
                encoding=source.image_encoding or "image",
                random_crop=bool(random_crop and source.image_key), target=target,
                min_side=source.min_image_side, cache_decoded=cache is CacheMode.DECODED,
                crop_fraction=crop_fraction)
        element_bytes = self._element_bytes(cache, target)
        shuffle = None
        if config.training:
            shuffle = max(1, min(config.shuffle_bytes // max(1, int(element_bytes)),
                                 MAX_SHUFFLE_ELEMENTS))
        drop = config.drop_remainder
        if drop is None:
            drop = config.training and self._replicas() > 1
        workers = _tf_config_workers()
        share = self._file_share()
        if share is not None:
            place = share[1]
            mine = len(range(place, len(source.files), workers))  # what files.shard() keeps
            shard = (f"by file: worker {place} of {workers} reads its own {mine} of the "
                     f"{len(source.files)} shards (tf.data's auto-shard off)")
        elif workers > 1:
            shard = "DATA: fewer shards than workers, each worker filters records"
        else:
            shard = ("by file when run by several workers in TF_CONFIG (enough shards)"
                     if len(source.files) > 1 else "DATA when run by several workers (one shard)")
        gpus = tf.config.list_logical_devices("GPU")
        to_device = config.prefetch_to_device
        if to_device is None:
            to_device = len(gpus) == 1 and not tf.distribute.has_strategy()
        prefetch = ("to /gpu:0 (prefetch_to_device)" if to_device and gpus
                    else "autotuned, in host memory")
        if config.service is not None:
            notes.append(f"preprocessing runs on the tf.data service at {config.service}, "
                         f"processing mode {SERVICE_PROCESSING_MODE!r} (dynamic sharding: each "
                         "record once per epoch across the workers, order not fixed); caches, "
                         "the RAM budget and shuffling live on the workers")
        if source.num_records is None and config.skip_corrupt:
            notes.append("no manifest: corrupted records are skipped but cannot be counted")
        location = self._cache_location(cache, decode)
        if location != "memory":
            notes.extend(_other_cache_files(location))
        return PipelineChoices(
            files=len(source.files),
            records=source.num_records,
            interleave_cycle=min(len(source.files), max(2, usable_cores())),
            parallel_calls="AUTOTUNE (tuned at run time)",
            parse=f"parse_example once per {self._parse_batch_size} records (vectorised)",
            decode=decode,
            cache=cache,
            cache_location=location,
            cache_estimate_bytes=estimate,
            ram_budget=config.ram_budget,
            shuffle_elements=shuffle,
            repeat=config.repeat,
            batch_size=config.batch_size,
            drop_remainder=drop,
            deterministic=config.deterministic,
            auto_shard=shard,
            prefetch=prefetch,
            skip_corrupt=config.skip_corrupt,
            notes=tuple(notes),
        )

    def _choose_cache(self, target, random_crop, notes) -> tuple[CacheMode, int | None]:
        config, source = self.config, self.source
        records = source.num_records
        if target is None:
            # parsing is cheap and vectorised: cache the records, shuffle after the cache
            best, estimate = CacheMode.ENCODED, source.num_bytes
        elif random_crop:
            best = CacheMode.DECODED
            estimate = (int(records * source.mean_image_pixels * 3)
                        if records and source.mean_image_pixels else None)
        else:
            best = CacheMode.FINAL
            estimate = records * target[0] * target[1] * 3 if records else None
        if config.cache is False:
            return CacheMode.NONE, estimate
        if config.cache is True or config.cache != "auto":
            return best, estimate  # asked for: in memory or in the given file
        allowed = config.ram_budget * CACHE_SHARE
        if estimate is not None and estimate <= allowed:
            return best, estimate
        if source.num_bytes <= allowed:
            why = ("its size is unknown without a manifest" if estimate is None
                   else f"it would not fit the RAM budget ({estimate >> 20} MiB)")
            notes.append(f"{best.value} data not cached: {why}; caching the encoded records "
                         "instead")
            return CacheMode.ENCODED, source.num_bytes
        notes.append("the data does not fit the RAM budget: no cache")
        return CacheMode.NONE, estimate

    def _element_bytes(self, cache: CacheMode, target) -> float:
        """Estimated bytes of one element where the shuffle buffer sits."""
        if cache is CacheMode.DECODED and self.source.mean_image_pixels:
            return self.source.mean_image_pixels * 3
        if cache is CacheMode.FINAL and target is not None:
            return target[0] * target[1] * 3
        return self.source.mean_record_bytes

    @property
    def steps_per_epoch(self) -> int | None:
        """Batches in one pass over the records (None when the record count is unknown)."""
        records = self.source.num_records
        if records is None:
            return None
        batch = self.config.batch_size
        return records // batch if self.choices.drop_remainder else -(-records // batch)

    # -- the pipeline -----------------------------------------------------------------------

    def build(self, until: str | None = None) -> tf.data.Dataset:
        """The dataset; ``until`` stops after a stage for the benchmark's breakdown.

        Args:
            until: ``"read"`` (serialized records), ``"parse"`` (parsed examples, images still
                encoded), ``"decode"`` (batches without augmentation; same as None here), or
                None for the whole pipeline. Defaults to None.
        """
        if until not in (None, "read", "parse", "decode"):
            raise InvalidArgumentError(f"until={until!r} is not one of: read, parse, decode")
        choices, config = self.choices, self.config
        records = self._records()
        if choices.cache is CacheMode.ENCODED:
            records = self._cache(records)
        # with a cache of decoded or final images, shuffle and repeat come after that cache
        shuffle_records = choices.cache not in (CacheMode.DECODED, CacheMode.FINAL)
        if config.training and shuffle_records:
            records = records.shuffle(choices.shuffle_elements, seed=self._seed,
                                      reshuffle_each_iteration=True)
        if config.repeat and shuffle_records:
            records = records.repeat()
        if until == "read":
            return self._finish(records.batch(config.batch_size))
        if self.source.image_key is None:
            dataset = records.batch(config.batch_size, drop_remainder=choices.drop_remainder)
            dataset = dataset.map(self._parse_batch, num_parallel_calls=AUTOTUNE,
                                  deterministic=config.deterministic)
            return self._finish(self._with_known_length(dataset))
        parsed = records.batch(self._parse_batch_size).map(
            self._parse_batch, num_parallel_calls=AUTOTUNE, deterministic=config.deterministic
        ).unbatch()
        if until == "parse":
            return self._finish(parsed.batch(config.batch_size))
        images = self._decoded(parsed)
        # a plain batch right after the decode map: tf.data fuses the two (map_and_batch
        # fusion), so each image is written straight into its batch. A parallel batch is not
        # fused, and the extra copy and hand-off of every 150-KB image cost 6-8 % of the
        # examples/s here (tfopt bench pipeline, demo data, cache off).
        batched = images.batch(config.batch_size, drop_remainder=choices.drop_remainder)
        return self._finish(self._with_known_length(batched))

    def _with_known_length(self, batches: tf.data.Dataset) -> tf.data.Dataset:
        """Tell tf.data (and so Keras) how many batches one pass holds, where that is sure.

        The record counting in :meth:`_records` hides the length (a scan over blocks, then
        unbatch), so Keras would not know a validation pass's steps and warns "Your input ran
        out of data" at its end. The manifest's count is exact when nothing is skipped; not
        under several workers, whose sharding makes each worker's pass shorter, nor through the
        tf.data service.
        """
        config = self.config
        steps = self.steps_per_epoch
        if (config.repeat or steps is None or self.source.expected_counts is None
                or config.skip_corrupt or config.service is not None
                or _tf_config_workers() > 1):
            return batches
        return batches.apply(tf.data.experimental.assert_cardinality(steps))

    def _records(self) -> tf.data.Dataset:
        """Serialized records from all shards, read in parallel, counted against the manifest."""
        source, config = self.source, self.config
        expected = [source.expected_counts.get(f, -1) if source.expected_counts else -1
                    for f in source.files]
        files = tf.data.Dataset.from_tensor_slices(
            (source.files, tf.constant(expected, tf.int64), tf.range(len(source.files))))
        share = self._file_share()
        if share is not None:
            files = files.shard(*share)
        if config.training:
            files = files.shuffle(len(source.files), seed=self._seed, reshuffle_each_iteration=True)
        compression = tf_compression_type(source.compression)
        counted = source.expected_counts is not None
        note_lost, skip = self._note_lost, config.skip_corrupt
        count_block = records_per_block(source.mean_record_bytes, COUNT_BLOCK)

        def read_file(path, expected_count, index):
            reader = tf.data.TFRecordDataset(path, compression)
            if not counted:
                return reader.ignore_errors() if skip else reader
            # Read past errors, then compare the count with the manifest at the end of the
            # file: the shard can be named (TensorFlow's own error names only a byte offset),
            # and under skip_corrupt the lost records are counted. Counted in blocks of about
            # BLOCK_BYTES (a scan step per record would halve the read rate of small records);
            # an empty block after the last one marks the end. Each dataset op here is made
            # once per shard: fewer ops, a quicker first batch.
            blocks = reader.ignore_errors().batch(count_block).concatenate(
                tf.data.Dataset.from_tensors(tf.constant([], tf.string)))

            def count(read, block):
                size = tf.size(block, out_type=tf.int64)
                total = read + size
                at_end = tf.equal(size, 0)
                missing = expected_count - total
                if skip:
                    checked = tf.cond(
                        at_end, lambda: tf.py_function(note_lost, [index, missing], tf.int64),
                        lambda: missing)
                else:
                    checked = tf.debugging.Assert(
                        tf.logical_or(tf.logical_not(at_end), tf.equal(missing, 0)),
                        ["tfopt: shard", path, "has", expected_count, "records but only", total,
                         "could be read: a corrupted or truncated record; run 'tfopt verify' "
                         "on the dataset, or build the pipeline with skip_corrupt=True"])
                with tf.control_dependencies([checked]):
                    return total, tf.identity(block)

            return blocks.scan(tf.constant(0, tf.int64), count).unbatch()

        return files.interleave(read_file, cycle_length=self.choices.interleave_cycle,
                                block_length=1, num_parallel_calls=AUTOTUNE,
                                deterministic=config.deterministic)

    @property
    def _parse_batch_size(self) -> int:
        return records_per_block(self.source.mean_record_bytes, PARSE_BATCH)

    def _parse_spec(self) -> dict:
        spec = {}
        keep = ({self.source.image_key, self.source.label_key} - {None}
                if self.source.image_key else None)
        for feature in self.source.features:
            if keep is not None and feature.name not in keep:
                continue
            spec[feature.name] = _feature_spec(feature)
        return spec

    def _parse_batch(self, serialized):
        """Parse a batch of records with one parse_example call; decode raw arrays."""
        spec = self._parse_spec()
        parsed = tf.io.parse_example(serialized, spec)
        for feature in self.source.features:
            if feature.raw_dtype and feature.name in parsed:
                values = tf.io.decode_raw(parsed[feature.name], tf.dtypes.as_dtype(feature.raw_dtype),
                                          little_endian=True)
                parsed[feature.name] = tf.reshape(values, [-1, *feature.raw_shape])
            elif self.config.pad_ragged and isinstance(parsed.get(feature.name), tf.RaggedTensor):
                parsed[feature.name] = parsed[feature.name].to_tensor()
            if feature.value_dtype and feature.name in parsed:
                parsed[feature.name] = tf.cast(parsed[feature.name],
                                               tf.dtypes.as_dtype(feature.value_dtype))
        label_key, image_key = self.source.label_key, self.source.image_key
        if image_key is not None:
            images = parsed[image_key]
            return (images, parsed[label_key]) if label_key else images
        label = parsed.pop(label_key) if label_key else None
        return (parsed, label) if label_key else parsed

    def _decoded(self, parsed: tf.data.Dataset) -> tf.data.Dataset:
        """Encoded images (and labels) to fixed-size uint8 images, caching where chosen."""
        choices, config, plan = self.choices, self.config, self.choices.decode
        has_label = self.source.label_key is not None
        base_seed = tf.constant(self._seed, tf.int64)

        def seed_of(index):
            return tf.stack([base_seed, index])

        if choices.cache is CacheMode.DECODED:
            # whole decoded images in the cache; each epoch draws its own crops from them
            full = parsed.map(_keep_label(lambda image: decode_full(image, plan), has_label),
                              num_parallel_calls=AUTOTUNE, deterministic=config.deterministic)
            full = self._shuffle_and_repeat(self._cache(full))
            crop = _with_index(lambda index, image: crop_and_resize(image, plan, seed_of(index)),
                               has_label)
            return full.enumerate().map(crop, num_parallel_calls=AUTOTUNE,
                                        deterministic=config.deterministic)
        decode = _with_index(lambda index, image: decode_to_target(image, plan, seed_of(index)),
                             has_label)
        images = parsed.enumerate().map(decode, num_parallel_calls=AUTOTUNE,
                                        deterministic=config.deterministic)
        if choices.cache is CacheMode.FINAL:
            images = self._shuffle_and_repeat(self._cache(images))
        return images

    def _shuffle_and_repeat(self, cached: tf.data.Dataset) -> tf.data.Dataset:
        """After a cache: a fresh order every epoch when training, repeated if asked."""
        if self.config.training:
            cached = cached.shuffle(self.choices.shuffle_elements, seed=self._seed,
                                    reshuffle_each_iteration=True)
        return cached.repeat() if self.config.repeat else cached

    def _cache_location(self, cache: CacheMode, decode: DecodePlan | None) -> str:
        """``"memory"``, or the cache file: the given path plus a key of what it holds.

        tf.data reuses a finished cache file whatever wrote it, so a second pipeline on the
        same path would silently serve the first one's data (another split, another image
        size) or fail on its shapes. The key covers the shards (names, sizes, modification
        times), this worker's share of them, the stage cached and everything that shapes its
        elements; another dataset or setting writes a file of its own.
        """
        path = self.config.cache
        if path is True or path is False or path == "auto":
            return "memory"
        config, source = self.config, self.source
        what = {
            "files": [_file_stamp(file) for file in source.files],
            "share": self._file_share(), "stage": cache.value,
            "decode": dataclasses.asdict(decode) if decode is not None else None,
            "keys": [source.image_key, source.label_key],
            "features": [dataclasses.asdict(feature) for feature in source.features],
            "batch": config.batch_size, "pad_ragged": config.pad_ragged,
            "skip_corrupt": config.skip_corrupt, "compression": source.compression,
        }
        key = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
        return f"{os.fspath(path)}-{key[:12]}"

    def _cache(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        location = self.choices.cache_location
        return dataset.cache() if location == "memory" else dataset.cache(location)

    def _finish(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        choices = self.choices
        options = tf.data.Options()
        options.autotune.enabled = True
        cache_bytes = (choices.cache_estimate_bytes or 0) if choices.cache is not CacheMode.NONE else 0
        options.autotune.ram_budget = max(256 << 20, int(self.config.ram_budget - cache_bytes))
        options.experimental_optimization.map_parallelization = True
        options.deterministic = choices.deterministic
        # sharded by file here already (see _file_share), or DATA with fewer shards than
        # workers; AUTO where TF_CONFIG does not say (it falls back to DATA)
        policy = tf.data.experimental.AutoShardPolicy
        if self._file_share() is not None:
            options.experimental_distribute.auto_shard_policy = policy.OFF
        else:
            options.experimental_distribute.auto_shard_policy = (
                policy.DATA if _tf_config_workers() > 1 else policy.AUTO)
        dataset = dataset.with_options(options)
        if self.config.service is not None:
            # job_name=None: each iteration gets its own job, so a repeated evaluation or a
            # second pipeline never joins (and finds finished) an earlier job of the same name
            dataset = dataset.apply(tf.data.experimental.service.distribute(
                processing_mode=SERVICE_PROCESSING_MODE, service=self.config.service,
                job_name=None))
        if choices.prefetch.startswith("to /gpu"):
            return dataset.apply(tf.data.experimental.prefetch_to_device("/gpu:0"))
        return dataset.prefetch(AUTOTUNE)


def _keep_label(fn, has_label):
    return (lambda image, label: (fn(image), label)) if has_label else fn


def _with_index(fn, has_label):
    if has_label:
        return lambda index, element: (fn(index, element[0]), element[1])
    return fn


def _feature_spec(feature: ParsedFeature):
    dtype = {FeatureKind.BYTES: tf.string, FeatureKind.INT64: tf.int64,
             FeatureKind.FLOAT: tf.float32}[feature.kind]
    if feature.shape is None:
        return tf.io.RaggedFeature(dtype)
    return tf.io.FixedLenFeature(feature.shape, dtype)


def build_pipeline(source, batch_size: int, *, training: bool = False, image_size=None,
                   image_key: str | None = None, label_key: str | None = None,
                   **config) -> tf.data.Dataset:
    """One call from shards to a ``tf.data.Dataset`` that ``model.fit`` takes as is.

    Builds a :class:`PipelineBuilder` and returns its dataset; the choices it made are logged
    at INFO level (``logging.getLogger("tfopt")``). Use the builder itself to read them
    (``builder.choices.describe()``) or to get ``steps_per_epoch`` for a repeating dataset.

    Unlike the builder, this one-call form does not repeat a training dataset unless asked
    (``repeat=True``): it returns no ``steps_per_epoch`` to pass to ``fit``, and Keras would
    never end the first epoch of an endless dataset. Each epoch is then a fresh pass, with the
    shard and record order reshuffled.

    Args:
        source: A tfopt dataset folder, a list of TFRecord files, or a glob.
        batch_size: Examples per batch.
        training: Training settings (see :class:`PipelineConfig`). Defaults to False.
        image_size: Output size of images. Defaults to None (required for images).
        image_key: The encoded-image feature. Defaults to the manifest's or inferred one.
        label_key: The label feature. Defaults to the manifest's or inferred one.
        **config: Other :class:`PipelineConfig` fields.

    Example:
        >>> train = build_pipeline("shards/", 64, training=True, image_size=224)
        >>> model.fit(train, epochs=3)
    """
    config.setdefault("repeat", False)
    builder = PipelineBuilder(source, batch_size=batch_size, training=training,
                              image_size=image_size, image_key=image_key, label_key=label_key,
                              **config)
    logger.info("pipeline for %s:\n%s", source, builder.choices.describe())
    return builder.build()
