"""A pipeline's plan in words: the notes the planner attaches (what was not done as asked, and
why), the reason line of each decoding strategy, and the advice for a pipeline that stalls its
trainer or whose cache a short read wastes.

Every sentence is rendered from typed values (the plan's fields, the facts, the decisions the
planner passes in); nothing is decided here and nothing reads a sentence back. No TensorFlow.

Example:
    >>> service_note("grpc://dispatcher:5050", "distributed_epoch")[:45]
    'preprocessing runs on the tf.data service at '
"""

from __future__ import annotations

from tfopt.data.plan_types import Facts, PipelinePlan, pass_records
from tfopt.data.sizes import fill_batches
from tfopt.rules import CacheFallback, CacheMode

# -- the planner's notes ------------------------------------------------------------------------

NOTHING_FITS_NOTE = "the data does not fit the RAM budget: no cache"
UNCOUNTED_SKIPS_NOTE = "no manifest: corrupted records are skipped but cannot be counted"


def device_crop_note(side: int, target: tuple[int, int]) -> str:
    """Random crops of ``target`` left to the device, batches of ``side``-px margin squares."""
    return (f"random-resized crops happen on the device: batches are {side}x{side}; "
            f"put tfopt.Augment(output_size={target}, random_crop=True) first in the model")


def estimated_records_note(records: int, gzip_expansion: float | None,
                           mean_record_bytes: float) -> str:
    """No manifest: the cache is sized from ``records``, estimated from the file sizes."""
    expanded = (f", GZIP expanding them {gzip_expansion:.2f}x (measured over the start of the "
                "first file)" if gzip_expansion else "")
    return (f"no manifest: about {records:,} records, estimated from the file sizes{expanded} "
            f"and the sampled records' mean size ({mean_record_bytes:,.0f} bytes); the cache "
            "is sized from that estimate")


def cache_fallback_note(best: CacheMode, fallback: CacheFallback,
                        best_bytes: int | None) -> str:
    """Why the automatic cache is not at ``best``, the stage that saves most (``best_bytes``
    its estimated size): a ``fallback`` of :func:`tfopt.rules.choose_cache` other than OFF."""
    if fallback is CacheFallback.NOTHING_FITS:
        return NOTHING_FITS_NOTE
    why = ("its size is unknown without a manifest" if fallback is CacheFallback.SIZE_UNKNOWN
           else f"it would not fit the RAM budget ({best_bytes >> 20} MiB)")
    return f"{best.value} data not cached: {why}; caching the encoded records instead"


def one_pass_note(planned: CacheMode, examples_read: int, pass_records: int) -> str:
    """No cache for a read (a fit) of ``examples_read`` examples, one pass of ``pass_records``
    or less: the ``planned`` cache (``cache="auto"``) would serve none of it."""
    part = "less than" if examples_read < pass_records else "exactly"
    return (f"no cache for this read: it takes {examples_read:,} examples in all, {part} one "
            f"pass of the {pass_records:,} records, and a cache serves only the passes after "
            f"the one that fills it (a longer read caches the {planned.value} data; cache=True "
            "keeps it for any read)")


def service_note(service: str, processing_mode: str) -> str:
    """Preprocessing on the tf.data service at ``service``, in ``processing_mode``."""
    return (f"preprocessing runs on the tf.data service at {service}, processing mode "
            f"{processing_mode!r} (dynamic sharding: each record once per epoch across the "
            "workers, order not fixed); caches, the RAM budget and shuffling live on the workers")


# -- the reason line of each decoding strategy (DecodePlan.reason) ------------------------------


def cached_decode_reason(*, jpeg: bool, ratio: int, side: int) -> str:
    """Whole images decoded once into the cache, each JPEG kept at least ``side`` px."""
    if not jpeg:
        scale = ""
    elif ratio > 1:
        scale = (f" at 1/{ratio} scale or less (each JPEG at its own, its shorter side "
                 f"kept >= {side} px)")
    else:
        scale = f" (a JPEG at a reduced scale where its shorter side keeps >= {side} px)"
    return (f"decoded once{scale} into the cache; every later epoch draws its random crops "
            "from memory")


def full_decode_reason(encoding: str) -> str:
    """Images that are not all JPEGs: decoded whole."""
    return f"{encoding} images: full decode"


def reduced_decode_reason(*, target: tuple[int, int], ratio: int, min_side: int | None,
                          keep: int) -> str:
    """JPEGs decoded at 1/``ratio`` scale or less, each keeping ``keep`` px."""
    return (f"target {target[0]}x{target[1]} is at most 1/{ratio} of the smallest stored side "
            f"({min_side} px): decode at 1/{ratio} scale or less (each JPEG at its own, its "
            f"shorter side kept >= {keep} px)")


def crop_decode_reason(random_crop: bool) -> str:
    """JPEGs of which only the crop window is decoded."""
    what = "random-resized-crop window" if random_crop else "central square"
    return f"decode only the {what} (tf.io.decode_and_crop_jpeg)"


# -- advice on a built pipeline -----------------------------------------------------------------


def stall_advice(plan: PipelinePlan, facts: Facts) -> str:
    """What to do about an input-bound epoch of this pipeline, from what its plan knows: the
    stage that costs most (decoding, for images), why the cache was or was not chosen, and
    whether the stored images are the lever (``tfopt convert --max-size``)."""
    parts = []
    if plan.decode is not None:
        parts.append(f"decoding is the costly stage here ({plan.decode.strategy.value}: "
                     f"{plan.decode.reason})")
    fallback = plan.cache_fallback
    if fallback is CacheFallback.OFF:
        parts.append("the cache is off (cache=False)")
    elif fallback is CacheFallback.ONE_PASS:
        parts.append("the cache is off for this read of one pass or less, which it would not "
                     "serve (a longer fit caches)")
    elif fallback is not None:
        best = plan.best_cache.value
        why = {CacheFallback.TOO_LARGE: f"the {best} data would not fit the RAM budget, so "
                                        "the encoded records are cached",
               CacheFallback.SIZE_UNKNOWN: f"the {best} data's size is unknown without a "
                                           "manifest, so the encoded records are cached",
               CacheFallback.NOTHING_FITS: NOTHING_FITS_NOTE}
        parts.append(f"not cached: {why[fallback]} (a larger ram_budget, or cache=True or a "
                     "file path, caches all the same)")
    else:
        parts.append(f"the {plan.cache.value} data is cached: the first epoch fills the "
                     "cache, later ones read it")
    smaller = plan.store_smaller
    if smaller is not None:
        megapixels = (facts.mean_image_pixels or smaller.stored_side ** 2) / 1e6
        size = smaller.max_size
        parts.append(
            f"the stored images are large for a {smaller.model_side}-px model (shorter "
            f"sides of {smaller.stored_side} px, {megapixels:.1f} megapixels on average): "
            f"'tfopt convert --max-size {size}' stores them at most "
            f"{size} px ({size ** 2 / 1e6:.2f} megapixels at most), "
            "the largest lever on decoding")
    if plan.device_crop is False and plan.decode is not None and plan.decode.random_crop:
        parts.append("random_crop='device' with tfopt.Augment in the model moves the crops "
                     "onto the accelerator")
    if not parts:
        parts.append("the pipeline's choices are in builder.choices.describe()")
    return "; ".join(parts)


# tf.data completes a cache only when its input reports the end; an iterator that goes before
# that (``take(3)``, a fit of fewer steps than one pass) leaves it filled in part, and tf.data
# discards it, logging "The calling iterator did not fully read the dataset being cached" from
# C++ (docs/data.md). Every cached stage yields one element per record, so the end of the first
# pass is a count of records (plan_types.pass_records).


def partial_pass_note(plan: PipelinePlan, batches: int) -> str | None:
    """Why the cache is wasted on a reader that takes ``batches`` batches in all, through one
    iterator, when that is less than one pass; None when it is not (or cannot be told: no
    cache, no exact record count).

    Such a reader never gets an element from the cache (it serves only the passes after the one
    that filled it), and tf.data discards the part it filled when the iterator goes, unless
    read-ahead (the shuffle buffer, prefetching) happened to reach the end of the pass.
    """
    records = pass_records(plan)
    if plan.cache is CacheMode.NONE or records is None:
        return None
    examples = batches * plan.batch_size
    if examples >= records:
        return None
    return (f"reads {batches:,} batches of {plan.batch_size} in all ({examples:,} examples), "
            f"less than one pass over the {records:,} records: the {plan.cache.value} cache "
            "is filled only by a pass read to its end, so it serves nothing here (and tf.data "
            "discards a cache left part-filled, logging 'The calling iterator did not fully "
            "read the dataset being cached'); read whole passes (at least "
            f"{fill_batches(records, plan.batch_size):,} batches through one iterator: "
            "steps_per_epoch x epochs in a fit) or build the pipeline with cache=False")
