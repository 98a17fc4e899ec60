"""What a pipeline chose, in words and JSON: :class:`PipelineChoices`.

Example:
    >>> choices = PipelineChoices.of(plan(PipelineConfig(batch_size=8), facts))
    >>> print(choices.describe())
"""

from __future__ import annotations

import dataclasses

from tfopt.data.plan_types import (
    DecodePlan,
    DistributionSource,
    PipelinePlan,
    Prefetch,
    Sharding,
)
from tfopt.rules import CacheMode

_PREFETCH_TEXT = {
    Prefetch.DEVICE: "to /gpu:0 (prefetch_to_device)",
    Prefetch.HOST: "autotuned, in host memory",
}


@dataclasses.dataclass(frozen=True)
class PipelineChoices:
    """What the builder chose, and why: the answer to "what did AUTOTUNE pick?".

    The rendered, serialisable view of a :class:`~tfopt.data.plan_types.PipelinePlan` (with the
    cache file's location and the notes only the builder can know): ``describe()`` for
    people, ``to_json()`` for reports. Nothing is decided from it; the builder executes the
    plan. tf.data's autotuner is off in the builder's pipelines
    (:data:`tfopt.rules.AUTOTUNE_ENABLED` is False), so the plan fixes the parallelism
    (``parallel_calls``, ``interleave_cycle``) and the shuffle buffer; only the last prefetch's
    depth, marked "autotuned", grows at run time, by the prefetch's own tuner.

    Attributes:
        files: Shard files in the source.
        records: Records in them (None without a manifest).
        interleave_cycle: Shards read at once.
        parallel_calls: The maps' parallelism, in words.
        parse: How records are parsed, in words.
        decode: How images are decoded (None for non-image data).
        cache: The stage cached.
        cache_location: ``"memory"``, or the cache file (the path plus a key of its data).
        cache_estimate_bytes: Estimated bytes of the cached stage (None when unknown).
        ram_budget: Bytes for the cache and tf.data's buffers.
        shuffle_elements: Shuffle buffer in elements (None when not training).
        repeat: Whether the dataset repeats forever.
        batch_size: Examples per batch.
        drop_remainder: Whether a last partial batch is dropped.
        deterministic: Whether the element order is stable.
        auto_shard: How several workers split the records, in words.
        prefetch: Where read-ahead batches wait, in words.
        skip_corrupt: Whether corrupted records are skipped.
        distribution: The replicas and workers planned for, and where they were read from.
        order: What each epoch draws anew, in words: the files' order and the records' (a
            shuffle buffer after a cache shuffles the records only), or fixed.
        notes: What was not done as asked, and why; other cache files at the same path.

    Example:
        >>> builder = PipelineBuilder("shards/", batch_size=64, image_size=224)
        >>> print(builder.choices.describe())
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
    shards_counted: bool = True
    distribution: str = ""
    order: str = ""

    @classmethod
    def of(cls, plan: PipelinePlan, cache_location: str = "memory",
           notes: tuple[str, ...] = ()) -> PipelineChoices:
        """The view of ``plan``; ``notes`` are added after the plan's own."""
        return cls(
            files=plan.files,
            records=plan.records,
            interleave_cycle=plan.interleave_cycle,
            parallel_calls=(f"{plan.parallel_calls} (one per core; tf.data's autotuner off, "
                            "as docs/data.md explains)"),
            parse=f"parse_example once per {plan.parse_block} records (vectorised)",
            decode=plan.decode,
            cache=plan.cache,
            cache_location=cache_location,
            cache_estimate_bytes=plan.cache_estimate_bytes,
            ram_budget=plan.ram_budget,
            shuffle_elements=plan.shuffle_elements,
            repeat=plan.repeat,
            batch_size=plan.batch_size,
            drop_remainder=plan.drop_remainder,
            deterministic=plan.deterministic,
            auto_shard=_sharding_text(plan),
            prefetch=_PREFETCH_TEXT[plan.prefetch],
            skip_corrupt=plan.skip_corrupt,
            shards_counted=plan.shards_counted,
            notes=(*plan.notes, *notes),
            distribution=_distribution_text(plan),
            order=_order_text(plan),
        )

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
            f"records; order {self.order or 'fixed'}",
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
        lines.append(f"distribution {self.distribution}")
        lines.append(f"prefetch     {self.prefetch}")
        if not self.shards_counted:  # no manifest: no counts checked as the shards are read
            corrupt = ("skipped (not counted: no manifest)" if self.skip_corrupt
                       else "TensorFlow's DataLossError (no manifest to name the shard; "
                            "'tfopt verify' names it)")
        else:
            corrupt = "skipped and counted" if self.skip_corrupt else "error naming the shard"
        if self.skip_corrupt and self.decode is not None:
            corrupt += "; a record whose image does not decode is skipped (logged, not counted)"
        lines.append(f"corrupt      {corrupt}")
        lines.extend(f"note         {note}" for note in self.notes)
        return "\n".join(lines)


_DISTRIBUTION_TEXT = {
    DistributionSource.ACTIVE: "read once at construction from the strategy whose scope was "
                               "active (tf.distribute.get_strategy()) and TF_CONFIG; pass "
                               "input_context= to plan for a given one",
    DistributionSource.STRATEGY: "from the strategy given as input_context, and TF_CONFIG",
    DistributionSource.INPUT_CONTEXT: "from the tf.distribute.InputContext given",
}


def _distribution_text(plan: PipelinePlan) -> str:
    return (f"{plan.replicas} replica(s) in sync, {plan.workers} worker(s): "
            f"{_DISTRIBUTION_TEXT[plan.distribution]}")


def _sharding_text(plan: PipelinePlan) -> str:
    if plan.sharding is Sharding.FILE:
        return (f"by file: worker {plan.worker_index} of {plan.workers} reads its own "
                f"{plan.shards_read} of the {plan.files} shards (tf.data's auto-shard off)")
    if plan.sharding is Sharding.DATA:
        return "DATA: fewer shards than workers, each worker filters records"
    return ("by file when run by several workers in TF_CONFIG (enough shards)"
            if plan.files > 1 else "DATA when run by several workers (one shard)")


def _order_text(plan: PipelinePlan) -> str:
    """What changes order from epoch to epoch: from the plan's decisions, not its text."""
    if not plan.training:
        return "fixed"
    if plan.shuffle_files:
        return "files and records shuffled each epoch"
    if plan.cache is not CacheMode.NONE:
        return "shuffled after the cache each epoch (files read in a fixed order)"
    return "records shuffled each epoch"
