"""The pipeline rules: one place for every policy that the builder's planner
(:mod:`tfopt.data.plan`), ``tfopt.analyze``'s advice (:mod:`tfopt.analysis.advice`), the
batch-size tuner's memory budget (:mod:`tfopt.tune.memory`) and convert's large-image warning
decide by, so that what the builder does and what ``analyze`` recommends cannot disagree.

Pure: it imports nothing of tfopt and no TensorFlow, and every rule returns a value (a number,
an enum, a dataclass), never text to be searched. ``docs/data.md`` explains the figures.

Example:
    >>> buffer = shuffle_buffer(shuffle_bytes=32 << 20, element_bytes=196_608,
    ...                         epoch_records=50_000, batch_size=32)
    >>> buffer.records, buffer.mixes
    (500, True)
"""

from __future__ import annotations

import dataclasses
import enum
import math

# -- memory -------------------------------------------------------------------------------------

DEFAULT_RAM_FRACTION = 0.5  # of MemAvailable: the budget for a cache, a shuffle and tf.data
CACHE_SHARE = 0.6  # of the budget a cache may take; the rest stays for buffers and autotuning
MIN_AUTOTUNE_RAM = 256 << 20  # what tf.data's autotuner keeps however large the cache


def default_ram_budget(available_bytes: int) -> int:
    """The RAM budget when none is given: half of the memory available now."""
    return int(available_bytes * DEFAULT_RAM_FRACTION)


def cache_allowance(ram_budget: int) -> int:
    """Bytes a cache may take of ``ram_budget``: what is left keeps the shuffle buffer and
    tf.data's autotuned buffers (a cache of the whole budget starves them)."""
    return int(ram_budget * CACHE_SHARE)


def cache_fits(size_bytes: float, ram_budget: int) -> bool:
    """Whether a cache of ``size_bytes`` fits ``ram_budget`` (its :func:`cache_allowance`)."""
    return size_bytes <= cache_allowance(ram_budget)


# -- caching ------------------------------------------------------------------------------------


class CacheMode(str, enum.Enum):
    """Which stage a pipeline caches."""

    NONE = "none"
    ENCODED = "encoded"  # serialized records, before decoding
    DECODED = "decoded"  # decoded full images (training crops come from memory)
    FINAL = "final"  # fixed-size images (evaluation) or parsed non-image batches


class CacheFallback(str, enum.Enum):
    """Why a cache is not at the stage that saves most (None where it is)."""

    OFF = "off"  # cache=False
    TOO_LARGE = "too_large"  # the best stage's data exceeds the cache allowance
    SIZE_UNKNOWN = "size_unknown"  # no record count to size the best stage's data from
    NOTHING_FITS = "nothing_fits"  # not even the encoded records fit: no cache
    ONE_PASS = "one_pass"  # cache="auto" and a read of one pass or less: it would serve nothing


@dataclasses.dataclass(frozen=True)
class CacheChoice:
    """Where a pipeline caches: ``mode``, its estimated bytes, and why not higher."""

    mode: CacheMode
    estimate_bytes: int | None
    fallback: CacheFallback | None = None


def choose_cache(best: CacheMode, best_bytes: int | None, encoded_bytes: int,
                 ram_budget: int) -> CacheChoice:
    """Cache the highest stage below every random one (``best``) if its data fits the cache
    allowance, else the encoded records if they fit, else nothing."""
    if best_bytes is not None and cache_fits(best_bytes, ram_budget):
        return CacheChoice(best, best_bytes)
    if cache_fits(encoded_bytes, ram_budget):
        why = CacheFallback.SIZE_UNKNOWN if best_bytes is None else CacheFallback.TOO_LARGE
        return CacheChoice(CacheMode.ENCODED, encoded_bytes, why)
    return CacheChoice(CacheMode.NONE, best_bytes, CacheFallback.NOTHING_FITS)


def cache_serves(examples_read: int | None, pass_examples: int | None) -> bool:
    """Whether a cache serves a reader that takes ``examples_read`` examples of a repeating
    pipeline through one iterator. It fills during the first pass and serves only the passes
    after it, so for a reader of one pass or less it is pure cost: the filling pass decodes
    every image whole and pays for new memory. True where either count is unknown."""
    if examples_read is None or pass_examples is None:
        return True
    return examples_read > pass_examples


def keeps_cache(asked, examples_read: int | None, pass_examples: int | None) -> bool:
    """Whether a pipeline whose config asked ``cache=asked`` reads with its cache for a reader
    (a fit) that takes ``examples_read`` examples in all through one iterator, one pass being
    ``pass_examples`` (None where either is unknown or not exact).

    The one decision of a cache for a given read; the planner, ``tfopt.Run``'s fits and the
    pipeline benchmark all take it from here. Under ``"auto"`` the cache is an optimisation, so
    it goes where it would serve nothing (:func:`cache_serves`); one asked for (True, or a
    file) is the user's choice and stays whatever the read; ``False`` keeps none.
    """
    if asked is False:
        return False
    return asked != "auto" or cache_serves(examples_read, pass_examples)


def shuffle_files_before(cache: CacheMode) -> bool:
    """Whether the shard files are shuffled each epoch: only where nothing is cached. A cache
    would freeze the first epoch's file order (every later epoch replays it), and the records
    are shuffled after the cache each epoch anyway."""
    return cache is CacheMode.NONE


# -- shuffling ----------------------------------------------------------------------------------

# A buffer below this fraction of an epoch barely mixes: neighbours stay neighbours.
SHUFFLE_EPOCH_FRACTION = 0.01
# More elements than this add fill time and little mixing, unless the epoch fraction asks.
MAX_SHUFFLE_ELEMENTS = 16384


class ShuffleShortfall(str, enum.Enum):
    """How a shuffle buffer falls short of mixing."""

    BELOW_BATCH = "below_batch"  # fewer elements than one batch
    BELOW_EPOCH_FRACTION = "below_epoch_fraction"  # under SHUFFLE_EPOCH_FRACTION of the epoch


def min_shuffle_records(epoch_records: int | None, batch_size: int | None) -> int:
    """The fewest elements a buffer needs to mix: one batch, and 1 % of the epoch (the whole
    epoch where that is less)."""
    least = max(1, batch_size or 1)
    if epoch_records and epoch_records > 0:
        least = max(least, math.ceil(SHUFFLE_EPOCH_FRACTION * epoch_records))
        least = min(least, epoch_records)
    return least


def shuffle_shortfall(buffer_records: int, epoch_records: int | None,
                      batch_size: int | None) -> ShuffleShortfall | None:
    """How a buffer of ``buffer_records`` falls short of :func:`min_shuffle_records`, or None
    (it holds the whole epoch, or enough of it)."""
    if epoch_records is not None and epoch_records >= 0 and buffer_records >= epoch_records:
        return None
    if batch_size and buffer_records < batch_size:
        return ShuffleShortfall.BELOW_BATCH
    if buffer_records < min_shuffle_records(epoch_records, None):
        return ShuffleShortfall.BELOW_EPOCH_FRACTION
    return None


@dataclasses.dataclass(frozen=True)
class ShuffleBuffer:
    """A shuffle buffer: elements, their estimated bytes, and whether it reaches
    :func:`min_shuffle_records` (False where the RAM left could not hold that many)."""

    records: int
    bytes: int
    mixes: bool


def shuffle_buffer(*, shuffle_bytes: int, element_bytes: float, epoch_records: int | None,
                   batch_size: int, ram_left: int | None = None) -> ShuffleBuffer:
    """The shuffle buffer for elements of ``element_bytes``: ``shuffle_bytes`` of them (at
    most :data:`MAX_SHUFFLE_ELEMENTS`), raised towards :func:`min_shuffle_records` of the
    epoch as far as ``ram_left`` bytes allow, and never more than the epoch."""
    size = max(1.0, element_bytes)
    records = max(1, min(int(shuffle_bytes // size), MAX_SHUFFLE_ELEMENTS))
    needed = min_shuffle_records(epoch_records, batch_size)
    if ram_left is not None:
        needed = min(needed, int(max(0, ram_left) // size))
    records = max(records, needed)
    if epoch_records and epoch_records > 0:
        records = min(records, epoch_records)
    return ShuffleBuffer(records, int(records * size),
                         shuffle_shortfall(records, epoch_records, batch_size) is None)


# -- parallelism and prefetching ------------------------------------------------------------------

# tf.data.AUTOTUNE: the last stage's read-ahead, grown at run time by the prefetch's own
# tuner, which runs with the autotuner off too (analyze's `prefetch` recommends the same)
PREFETCH_DEPTH = -1

# tf.data's autotuner stays off in the builder's pipelines, whose parallelism the plan fixes
# (parallel_calls). With it on, TensorFlow now and then ran a decode-bound pipeline on one
# core for a whole pass (the guide's recipe and tfopt's alike, every autotune algorithm,
# fixed parallelism too); with it off, never (docs/benchmarks.md has the counts).
# It also holds an iterator's release for up to a pass (measure.whole_passes says more).
AUTOTUNE_ENABLED = False


def parallel_calls(cores: int) -> int:
    """Elements each map of the builder works on at once: one per usable core.

    With the autotuner off, ``AUTOTUNE`` would mean at most 16 (TensorFlow's default), too
    few for a host that feeds several accelerators; analyze's `parallelize` recommends
    ``AUTOTUNE`` only for a stage that runs one element at a time."""
    return max(1, cores)


def interleave_cycle(files: int, cores: int) -> int:
    """Shard files read at once: one per core (at least two), never more than there are."""
    return max(1, min(files, max(2, cores)))


# -- storing images smaller ----------------------------------------------------------------------

# Stored images whose shorter side is at least this many times the model's side are the lever
# against a decode-bound pipeline: decoded at 1/8 scale at best, often whole, every epoch.
LARGE_IMAGE_FACTOR = 4
# The model side assumed where it is unknown (convert): models train at 224-384 px.
TYPICAL_MODEL_SIDE = 256
# The suggested longest side, per side the model sees: a 3:2 photo keeps a shorter side of
# 4/3 the model's, above the 256/224 margin random-resized crops and the cache keep.
MAX_SIZE_PER_MODEL_SIDE = 2


@dataclasses.dataclass(frozen=True)
class StoreSmaller:
    """Images stored far larger than the model sees: ``tfopt convert --max-size max_size``.

    Attributes:
        stored_side: The stored shorter side the rule was given (px).
        model_side: The model's input side it was judged against (px).
        max_size: The suggested ``--max-size`` (the longest stored side, px).
        pixel_ratio: Stored pixels per pixel kept at ``max_size`` (same aspect).
    """

    stored_side: int
    model_side: int
    max_size: int
    pixel_ratio: float


def suggested_max_size(model_side: int | None) -> int:
    """The ``--max-size`` for a model of this input side (:data:`TYPICAL_MODEL_SIDE` when
    unknown): twice it."""
    return MAX_SIZE_PER_MODEL_SIDE * (model_side or TYPICAL_MODEL_SIDE)


def store_smaller(stored_shorter_side: float | None, model_side: int | None = None,
                  stored_longer_side: float | None = None) -> StoreSmaller | None:
    """Whether images whose (typical) shorter side is ``stored_shorter_side`` should be stored
    smaller for a model of ``model_side`` (:data:`TYPICAL_MODEL_SIDE` when unknown): at least
    :data:`LARGE_IMAGE_FACTOR` times it. None when not (or when the size is unknown)."""
    if not stored_shorter_side:
        return None
    side = model_side or TYPICAL_MODEL_SIDE
    if stored_shorter_side < LARGE_IMAGE_FACTOR * side:
        return None
    size = suggested_max_size(side)
    longer = max(stored_longer_side or stored_shorter_side, stored_shorter_side)
    return StoreSmaller(int(stored_shorter_side), side, size, (longer / size) ** 2)
