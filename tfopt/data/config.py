"""What a pipeline is asked to do: :class:`PipelineConfig` and its checks.

A config holds the user's arguments, checked and normalised (``image_size=24`` becomes
``(24, 24)``), and nothing else: a field whose default depends on other fields or on the
machine (``repeat``, ``deterministic``, ``drop_remainder``, ``random_crop``, ``ram_budget``,
``prefetch_to_device``) stays None here and is resolved by :func:`tfopt.data.plan.plan`. Two
configs made from the same arguments are equal on any machine. Imports no TensorFlow.

Raises:
    tfopt.errors.InvalidArgumentError: A field is outside what is allowed (the message names it,
        shows the value and what is allowed).

Example:
    >>> config = PipelineConfig(batch_size=32)
    >>> config.replace(training=True) == PipelineConfig(batch_size=32, training=True)
    True
"""

from __future__ import annotations

import dataclasses
import os

from tfopt._validate import fail, flag, is_bool, known_options, optional_whole_number, whole_number
from tfopt.data.service import parse_address
from tfopt.errors import InvalidArgumentError

# convert already shuffled records across shards, and shard order is reshuffled every epoch:
# 32 MiB of buffer mixes well and fills in a fraction of a second, where a buffer several
# times larger holds the first batch back for a noticeable share of a small epoch
DEFAULT_SHUFFLE_BYTES = 32 << 20

DEVICE_CROP = "device"  # random_crop="device": the model crops on the accelerator

# Words that mean a cache setting, not a file: cache="off" would otherwise write off.index
# and off.data-* into the working folder (the CLI's --cache takes these words)
_CACHE_WORDS = {"off", "on", "none", "no", "yes", "true", "false", "memory", "ram", "disk", "file"}


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """How a pipeline reads its source: what was asked, checked, with nothing resolved.

    Fields left None are decided by the planner (:func:`tfopt.data.plan.plan`) from the other
    fields and from what the builder read from the source and the machine; the defaults below
    say how.

    Attributes:
        batch_size: Examples per batch (the global batch under a distribution strategy).
        training: Training settings: shuffled shards and records, random crops, repeat,
            non-deterministic order for speed. Defaults to False (evaluation: every record
            exactly once, in a stable order).
        image_size: Output ``(height, width)`` or one int for squares; required for image
            data (batches need one size), ignored otherwise.
        image_key: The encoded-image feature. Defaults to the manifest's or the inferred one.
        label_key: The label feature. Defaults to the manifest's or the inferred one.
        split: The manifest split. Defaults to "train" when training, else "validation"
            (a dataset without one is refused, never evaluated on its training split
            unasked: pass ``split="train"`` for that). Ignored for shard files or a glob.
        random_crop: Random-resized crop (8-100 % of the area): True (in the pipeline),
            ``"device"`` (the pipeline ships squares of 256/224 of ``image_size``, central
            square of each image, and the model crops them on the accelerator: put
            ``tfopt.Augment(output_size=image_size, random_crop=True)`` first in it), or False
            (central crop). Defaults to None: True for training images, False otherwise.
        cache: ``"auto"`` (cache when the estimate fits the RAM budget), True (in memory),
            False, or a file path (cache in that file). Defaults to "auto".
        ram_budget: Bytes for the cache and tf.data's buffers. Defaults to None: half of the
            memory available when the pipeline is planned.
        shuffle_bytes: Shuffle buffer size in bytes (converted to elements by their
            estimated size, at most 16,384 elements). Defaults to 32 MiB.
        repeat: Repeat forever (use ``steps_per_epoch``). Defaults to None: ``training``.
        drop_remainder: Drop a last partial batch. Defaults to None: True when training under
            a distribution strategy with several replicas.
        deterministic: Keep the element order stable. Defaults to None: True for evaluation
            or when a seed is given, False for training (faster).
        seed: Seed for shard order, shuffling and crops. Defaults to None (random).
        skip_corrupt: Skip corrupted records (the rest of their shard is lost: TensorFlow's
            reader cannot resynchronise) and count them; default is an error naming the shard.
        pad_ragged: Pad variable-length features into dense batches instead of ragged ones.
            Defaults to False.
        prefetch_to_device: Prefetch batches onto the GPU. Defaults to None: True when exactly
            one GPU is visible and no distribution strategy is active.
        service: A tf.data service dispatcher address, ``grpc://host:port`` (what
            ``tfopt data-service dispatcher`` prints): its workers run the pipeline and this
            process only receives the batches. Dynamic sharding ("distributed_epoch"): every
            record once per epoch, spread over the workers, in no fixed order. Defaults to None
            (the pipeline runs here).

    Raises:
        tfopt.errors.InvalidArgumentError: A field is outside what is allowed.

    Example:
        >>> config = PipelineConfig(batch_size=64, training=True, image_size=224)
        >>> config.image_size, config.repeat
        ((224, 224), None)
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
            set_field("image_size", _image_size(self.image_size))
        for name in ("training", "skip_corrupt", "pad_ragged"):
            set_field(name, flag(getattr(self, name), name))
        for name in ("repeat", "drop_remainder", "deterministic", "prefetch_to_device"):
            set_field(name, _optional_flag(getattr(self, name), name))
        set_field("cache", _check_cache(self.cache))
        set_field("shuffle_bytes", whole_number(self.shuffle_bytes, "shuffle_bytes", minimum=1))
        set_field("ram_budget", optional_whole_number(self.ram_budget, "ram_budget", minimum=1))
        set_field("seed", optional_whole_number(self.seed, "seed", minimum=0))
        random_crop = self.random_crop
        if random_crop is not None and not is_bool(random_crop) and random_crop != DEVICE_CROP:
            raise fail("random_crop", random_crop, "True, False or 'device'")
        set_field("random_crop", bool(random_crop) if is_bool(random_crop) else random_crop)
        if self.service is not None:
            set_field("service", parse_address(self.service))
            if self.skip_corrupt:
                raise InvalidArgumentError(
                    "skip_corrupt=True with service: corrupted records are counted in a "
                    "variable of this process, which the service's workers cannot update; "
                    "run 'tfopt verify' on the dataset, or build without the service")

    def replace(self, **changes) -> PipelineConfig:
        """A copy with ``changes`` applied (and checked); fields left None stay None.

        Raises:
            tfopt.errors.InvalidArgumentError: An unknown field, or a value outside what is allowed.
        """
        known_options(changes, FIELD_NAMES, "PipelineConfig.replace")
        return dataclasses.replace(self, **changes)


FIELD_NAMES = tuple(field.name for field in dataclasses.fields(PipelineConfig))


def make_config(config: PipelineConfig | int | None, fields: dict,
                where: str = "PipelineBuilder") -> PipelineConfig:
    """A config from a :class:`PipelineConfig`, a positional batch size, or keyword fields.

    ``PipelineBuilder(source, 64, ...)`` reads as ``build_pipeline(source, 64, ...)``: a
    number in the config's place is the batch size. Keyword fields override the config's.

    Raises:
        tfopt.errors.InvalidArgumentError: An unknown field (named, with the allowed ones), or a
            value outside what is allowed.
    """
    if config is not None and not isinstance(config, PipelineConfig):
        fields = {"batch_size": config, **fields}
        config = None
    known_options(fields, FIELD_NAMES, where)
    if config is None:
        return PipelineConfig(**fields)
    return config.replace(**fields) if fields else config


def _image_size(value) -> tuple[int, int]:
    """``(height, width)``; each side is named alone when it is the one that is wrong."""
    sides = value if isinstance(value, (tuple, list)) else (value, value)
    if len(sides) != 2:
        raise fail("image_size", value, "an int or (height, width) of positive ints")
    return tuple(whole_number(side, "image_size", minimum=1) for side in sides)


def _optional_flag(value, name: str) -> bool | None:
    if value is not None and not is_bool(value):
        raise fail(name, value, "True, False or None")
    return None if value is None else bool(value)


def _check_cache(cache):
    """``cache`` as given: "auto", True, False or a file path (a ``str`` or path object)."""
    if is_bool(cache):
        return bool(cache)
    if cache == "auto":
        return cache
    if isinstance(cache, (str, os.PathLike)) and str(cache).strip():
        if str(cache).strip().lower() in _CACHE_WORDS:
            raise InvalidArgumentError(
                f"cache={cache!r}: expected 'auto', True, False or a file path; for no cache "
                "pass cache=False, for memory cache=True (a file literally named so: "
                f"'./{cache}')")
        return cache
    raise fail("cache", cache, "'auto', True, False or a file path")
