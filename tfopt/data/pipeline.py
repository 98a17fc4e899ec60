"""Tuned ``tf.data`` pipelines from TFRecord shards, in one call.

:class:`PipelineBuilder` reads the source once (manifest or a sample of records) and the
machine (memory, cores, devices, distribution strategy, cluster), asks the planner
(:func:`tfopt.data.plan.plan`) for every decision, and builds the ``tf.data.Dataset`` the plan
describes; ``builder.choices.describe()`` says what was chosen and why. The stages are
described in ``docs/data.md``.

Raises:
    tfopt.errors.DatasetError: Nothing readable at the source.
    tfopt.errors.InvalidArgumentError: An unknown option, or a value that does not fit the data.

Example:
    >>> builder = PipelineBuilder("shards/", batch_size=64, training=True, image_size=224)
    >>> model.fit(builder.build(), steps_per_epoch=builder.steps_per_epoch, epochs=5)
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os

import tensorflow as tf

import tfopt.rules as rules
from tfopt._internals.tf_runtime import is_default_strategy
from tfopt._system import available_memory, usable_cores
from tfopt._validate import choice, known_options, whole_number
from tfopt.data.cache_keys import cache_location, other_cache_files
from tfopt.data.choices import PipelineChoices
from tfopt.data.config import FIELD_NAMES, PipelineConfig, make_config
from tfopt.data.decode import checked_image, crop_and_resize, decode_full, decode_to_target
from tfopt.data.plan import PREFETCH_DEVICE, SERVICE_PROCESSING_MODE, CacheMode, plan
from tfopt.data.plan_notes import partial_pass_note, stall_advice
from tfopt.data.plan_types import (
    DistributionSource,
    Facts,
    PipelinePlan,
    Prefetch,
    Sharding,
    pass_records,
)
from tfopt.data.shard_check import read_limits
from tfopt.data.sizes import estimate_records
from tfopt.data.source import (
    ParsedFeature,
    PipelineSource,
    resolve_source,
    with_walked_counts,
)
from tfopt.distribute.cluster import cluster_info
from tfopt.errors import InvalidArgumentError
from tfopt.records.format.tfrecord import tf_compression_type
from tfopt.records.schema import FeatureKind

logger = logging.getLogger("tfopt")

AUTOTUNE = tf.data.AUTOTUNE
# the pipeline's own functions branch on Python values (the plan) alone, never on a tensor, so
# they run as written: AutoGraph's conversion of them took about a second of start-up in each
# process that builds a pipeline
_as_written = tf.autograph.experimental.do_not_convert

# sharded by file here already (see PipelineBuilder._records), or DATA with fewer shards than
# workers; AUTO where TF_CONFIG does not say (it falls back to DATA)
_AUTO_SHARD_POLICY = {
    Sharding.FILE: tf.data.experimental.AutoShardPolicy.OFF,
    Sharding.DATA: tf.data.experimental.AutoShardPolicy.DATA,
    Sharding.AUTO: tf.data.experimental.AutoShardPolicy.AUTO,
}


class Stage(str, enum.Enum):
    """Where :meth:`PipelineBuilder.build` may stop."""

    READ = "read"  # serialized records
    PARSE = "parse"  # parsed examples, images still encoded
    DECODE = "decode"  # batches without augmentation: the whole pipeline here


def read_distribution(input_context=None) -> dict:
    """The distribution facts, read once: replicas in sync, whether a strategy runs, the
    workers and this one's index, and where they came from (a :class:`DistributionSource`).

    ``input_context`` is a ``tf.distribute.InputContext`` (its input pipelines are the
    workers), a ``tf.distribute.Strategy`` (its replicas; the workers from ``TF_CONFIG``), or
    None: the strategy whose scope is active now and ``TF_CONFIG``.

    Raises:
        tfopt.errors.InvalidArgumentError: ``input_context`` is neither.
    """
    if isinstance(input_context, tf.distribute.InputContext):
        workers = int(input_context.num_input_pipelines)
        return {"replicas": int(input_context.num_replicas_in_sync), "strategy": True,
                "workers": workers,
                "worker_index": int(input_context.input_pipeline_id) if workers > 1 else None,
                "distribution": DistributionSource.INPUT_CONTEXT}
    # the chief first, then the workers: as MultiWorkerMirroredStrategy numbers its input
    # pipelines; a malformed TF_CONFIG is an error here as it is for the strategy
    cluster = cluster_info()
    if input_context is None:
        strategy, given = tf.distribute.get_strategy(), DistributionSource.ACTIVE
        active = tf.distribute.has_strategy()
    elif isinstance(input_context, tf.distribute.Strategy):
        strategy, given = input_context, DistributionSource.STRATEGY
        # the default strategy (what get_strategy() returns outside every scope) is none
        active = not is_default_strategy(input_context)
    else:
        raise InvalidArgumentError(
            f"input_context={input_context!r}: expected a tf.distribute.InputContext, a "
            "tf.distribute.Strategy, or None (the active strategy, read once now)")
    return {"replicas": int(strategy.num_replicas_in_sync), "strategy": active,
            "workers": cluster.workers, "worker_index": cluster.index, "distribution": given}


def read_facts(source: PipelineSource, input_context=None) -> Facts:
    """What the planner needs to know of ``source`` and of this machine and process; the
    distribution from ``input_context`` (see :func:`read_distribution`)."""
    return Facts(
        files=len(source.files),
        records=source.num_records,
        total_bytes=source.num_bytes,
        mean_record_bytes=source.mean_record_bytes,
        image_key=source.image_key,
        label_key=source.label_key,
        image_encoding=source.image_encoding,
        mean_image_pixels=source.mean_image_pixels,
        min_image_side=source.min_image_side,
        image_sizes=source.image_sizes,
        available_memory=available_memory(),
        usable_cores=usable_cores(),
        **read_distribution(input_context),
        gpus=len(tf.config.list_logical_devices("GPU")),
        estimated_records=(None if source.num_records is not None else estimate_records(
            source.num_bytes, source.sampled_record_bytes,
            source.gzip_expansion if source.compression else 1.0)),
        gzip_expansion=source.gzip_expansion,
        shards_counted=source.expected_counts is not None and not source.counts_walked,
    )


# Config fields the source is read under: which split and keys (resolve_source) and what the
# header walk does at a damaged shard (skip_corrupt). A builder replanned with any of them
# changed reads the source again; with the others, only the planner runs again.
READ_FIELDS = ("split", "image_key", "label_key", "training", "skip_corrupt")


@dataclasses.dataclass(frozen=True)
class SourceRead:
    """What a builder reads before it plans, once: the planner's facts and what ``build()``
    needs of the files. Planning on it again (another config, a fit's length) opens no file.

    Attributes:
        given: The source as given (a folder, a list of files, a glob).
        input_context: The input context as given.
        where: How errors name the source ("tfopt verify WHERE").
        source: The resolved source, with the header walk's counts where it had none.
        limits: Records to read of each shard (the header walk's).
        facts: The planner's facts: of the source, the machine and the distribution.
        damaged: The note on sampled image values that are not images, or None.
        fields: The :data:`READ_FIELDS` values it was read under.
    """

    given: object
    input_context: object
    where: str
    source: PipelineSource
    limits: tuple[int, ...]
    facts: Facts
    damaged: str | None
    fields: tuple


def read_source(source, config: PipelineConfig, input_context=None) -> SourceRead:
    """Resolve ``source`` for ``config`` (split, keys), walk every plain shard's record
    headers and read the facts of the source, this machine and the distribution
    (:func:`read_facts`): what a :class:`PipelineBuilder` plans on.

    Raises:
        tfopt.errors.DatasetError: Nothing readable at ``source``, or a damaged shard (without
            ``skip_corrupt``).
        tfopt.errors.InvalidArgumentError: ``image_size`` given for data without images, or a
            key that does not fit the data.
    """
    resolved = resolve_source(
        source, split=config.split, image_key=config.image_key, label_key=config.label_key,
        training=config.training)
    if config.image_size is not None and resolved.image_key is None:
        raise _no_images_error(source, resolved, config.image_size)  # before the walk
    # records to read per shard: headers checked against the file sizes before TensorFlow
    # reads a shard (its reader allocates a damaged length: a segmentation fault)
    walk = read_limits(resolved, skip_corrupt=config.skip_corrupt)
    if resolved.expected_counts is None and walk.counts is not None:
        # shards another tool wrote: the walk has just counted every record
        resolved = with_walked_counts(resolved, walk.counts)
    damaged = _not_images_note(resolved, config.skip_corrupt)
    if damaged:
        logger.warning("%s", damaged)
    # how errors name the source for 'tfopt verify': the path or glob as given
    where = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "on its files"
    return SourceRead(source, input_context, where, resolved, tuple(walk.limits),
                      read_facts(resolved, input_context), damaged,
                      tuple(getattr(config, name) for name in READ_FIELDS))


class PipelineBuilder:
    """Builds a tuned ``tf.data.Dataset`` of ``(features, label)`` batches from TFRecords.

    Args:
        source: A tfopt dataset folder, a list of TFRecord files, or a glob.
        config: A :class:`~tfopt.data.config.PipelineConfig`, or the batch size; or pass its
            fields as keyword arguments (they override the config's).
        input_context: The distribution to plan for: a ``tf.distribute.InputContext`` (as
            ``distribute_datasets_from_function`` passes), a ``tf.distribute.Strategy``, or
            None (the strategy whose scope is active at construction, and ``TF_CONFIG``). It
            is read once, here; ``choices.describe()`` says which. Given, the plan is the same
            inside and outside any strategy's scope. Defaults to None.
        **fields: :class:`~tfopt.data.config.PipelineConfig` fields.

    Attributes:
        config: The config as given (fields left None stay None).
        source: The resolved source.
        facts: What was read from the source and the machine.
        plan: Every decision, typed (:class:`~tfopt.data.plan.PipelinePlan`).
        choices: The plan in words and JSON (:class:`~tfopt.data.choices.PipelineChoices`).

    Raises:
        tfopt.errors.DatasetError: Nothing readable at ``source``; as its subclass
            ``tfopt.errors.MissingSplitError``, no such split, or (evaluation, no split
            given) no validation split.
        tfopt.errors.InvalidArgumentError: An unknown option (named, with the allowed ones), or a
            config value or key that does not fit the data.

    Example:
        >>> builder = PipelineBuilder("shards/", batch_size=64, training=True, image_size=224)
        >>> print(builder.choices.describe())
        >>> model.fit(builder.build(), steps_per_epoch=builder.steps_per_epoch, epochs=5)
    """

    def __init__(self, source, config: PipelineConfig | int | None = None, *,
                 input_context=None, **fields):
        config = make_config(config, fields, "PipelineBuilder")
        self._start(config, read_source(source, config, input_context))

    def _start(self, config: PipelineConfig, read: SourceRead,
               examples_read: int | None = None) -> None:
        """Plan ``config`` on what was ``read`` (the planner alone: no file is opened)."""
        if config.image_size is not None and read.source.image_key is None:
            raise _no_images_error(read.given, read.source, config.image_size)
        self.config = config
        self._read = read  # what replanned() and for_fit() plan on again
        self._where = read.where
        self.source: PipelineSource = read.source
        self._read_limits = read.limits
        # shard index -> records it lost to corruption under skip_corrupt, from its latest
        # read: set, not added to, so that repeated epochs and read-ahead do not count them
        # again. A Python dict, not a tf.Variable: built under a distribution strategy's scope
        # a variable is mirrored, and a tf.data function cannot update a mirrored variable.
        self._lost_per_shard: dict[int, int] = {}
        self._seed = config.seed if config.seed is not None else int.from_bytes(os.urandom(4), "little")
        self._resume = 0  # examples build() skips (resume_examples)
        self.facts = read.facts
        self.plan: PipelinePlan = plan(config, self.facts, examples_read=examples_read)
        self._cache_location = cache_location(config.cache, self.source, self.plan,
                                              batch_size=config.batch_size,
                                              pad_ragged=config.pad_ragged)
        notes = other_cache_files(self._cache_location) if self.plan.cache_to_file else ()
        if read.damaged:
            notes = (read.damaged, *notes)
        self.choices = PipelineChoices.of(self.plan, self._cache_location, tuple(notes))

    def _planned(self, config: PipelineConfig,
                 examples_read: int | None = None) -> PipelineBuilder:
        """A new builder of ``config`` on this one's read, or on a new read where ``config``
        changes a field the read depends on (:data:`READ_FIELDS`)."""
        read = self._read
        if tuple(getattr(config, name) for name in READ_FIELDS) != read.fields:
            read = read_source(read.given, config, read.input_context)
        builder = object.__new__(type(self))
        builder._start(config, read, examples_read)
        return builder

    def replanned(self, **fields) -> PipelineBuilder:
        """A new builder for the same source and input context with some config fields
        changed (``cache=False``, say); this one is left as it is.

        Only the planner runs again, on the facts this builder read (the resolved source, the
        header walk, the machine and the distribution): the same plan a builder made afresh
        with these fields would make on the same machine. A field that changes what is read
        (:data:`READ_FIELDS`: the split, the keys, ``training``, ``skip_corrupt``) reads the
        source again, as a new builder would.

        Raises:
            tfopt.errors.InvalidArgumentError: An unknown field or a value out of range.
        """
        return self._planned(make_config(self.config, fields, "PipelineBuilder.replanned"))

    @property
    def pass_examples(self) -> int | None:
        """Examples one pass of this pipeline yields in this process, where that is exact
        (:func:`tfopt.data.plan_types.pass_records`); None where it is not (no record count,
        several workers, the tf.data service, ``skip_corrupt``)."""
        return pass_records(self.plan)

    def keeps_cache(self, examples_read: int | None) -> bool:
        """Whether a reader (a fit) that takes ``examples_read`` examples in all through one
        iterator reads this pipeline as planned: it has no cache, or its cache stays
        (:func:`tfopt.rules.keeps_cache`: under ``cache="auto"``, only a read of more than one
        pass keeps it; one asked for stays). None: the read's length is unknown (kept)."""
        return self.plan.cache is CacheMode.NONE or rules.keeps_cache(
            self.config.cache, examples_read, self.pass_examples)

    def for_fit(self, examples_read: int | None) -> PipelineBuilder:
        """This builder, or, where a fit that takes ``examples_read`` examples in all would
        not read its cache (:meth:`keeps_cache`), the same pipeline planned without it for
        that read: its plan and ``choices`` say so (``cache`` none, ``cache_fallback``
        ``ONE_PASS``, a note). Only the planner runs again, as in :meth:`replanned`; this
        builder is left as it is."""
        if self.keeps_cache(examples_read):
            return self
        return self._planned(self.config, examples_read)

    @property
    def corrupt_records(self) -> int:
        """Records lost to corruption under ``skip_corrupt`` (read it after an epoch): each
        damaged shard counts once, however many epochs or read-ahead passes read it."""
        return sum(self._lost_per_shard.values())

    def _note_lost(self, index, missing):
        self._lost_per_shard[int(index)] = int(missing)
        return missing

    @property
    def steps_per_epoch(self) -> int | None:
        """Batches in one pass over the records (None when the record count is unknown)."""
        return self.plan.steps_per_epoch

    def stall_advice(self) -> str:
        """What to do when training on this pipeline is input-bound (the input-stall
        callback's advice): its costly stage, its cache decision, the stored images' size."""
        return stall_advice(self.plan, self.facts)

    def partial_pass_note(self, batches: int) -> str | None:
        """Why the cache is wasted on a reader that takes only ``batches`` batches in all,
        through one iterator, less than one pass (``take(3)``, ``fit`` with ``steps_per_epoch``
        x ``epochs`` below :attr:`steps_per_epoch`): it never reads from the cache, and tf.data
        discards the part filled. None when the cache can serve them, or there is none, or the
        pass's length is not exact (no manifest, several workers, the tf.data service,
        ``skip_corrupt``). The input-stall callback logs it at the start of such a fit.
        """
        return partial_pass_note(self.plan, batches)

    # -- the pipeline -----------------------------------------------------------------------

    def build(self, until: str | None = None, *, resume_examples: int = 0) -> tf.data.Dataset:
        """The dataset the plan describes; ``until`` stops after a stage.

        Args:
            until: ``"read"`` (serialized records), ``"parse"`` (parsed examples, images still
                encoded), ``"decode"`` (batches without augmentation; same as None here), or
                None for the whole pipeline. Defaults to None.
            resume_examples: Examples a reader of this repeating dataset has already taken
                (``tfopt.Run`` passes the epochs a restored backup holds): the dataset starts
                where an uninterrupted one would be after them, in the same order and with
                the same crop seeds when the seed is fixed. They are skipped where the shuffle
                and repeat are: as serialized records, or from the cache (which fills on the
                way). Defaults to 0.

        Raises:
            tfopt.errors.InvalidArgumentError: ``until`` is not one of these, or ``resume_examples``
                is negative or given for a dataset that does not repeat.
        """
        stage = None if until is None else choice(Stage, until, "until")
        plan = self.plan
        resume = whole_number(resume_examples, "resume_examples", 0)
        if resume and not plan.repeat:
            raise InvalidArgumentError(
                f"resume_examples={resume}: this pipeline does not repeat (repeat=False), so "
                "an epoch is a new pass from its first record; resume only a repeating one")
        self._resume = resume
        records = self._records()
        if plan.cache is CacheMode.ENCODED:
            records = self._cache(records)
        # with a cache of decoded or final images, shuffle and repeat come after that cache
        if plan.training and not plan.shuffle_after_cache:
            records = records.shuffle(plan.shuffle_elements, seed=self._seed,
                                      reshuffle_each_iteration=True, name="shuffle")
        if plan.repeat and not plan.shuffle_after_cache:
            records = records.repeat(name="repeat")
            if resume:
                records = records.skip(resume, name="resume")
        if stage is Stage.READ:
            return self._finish(records.batch(plan.batch_size, name="batch"))
        if self.source.image_key is None:
            dataset = records.batch(plan.batch_size, drop_remainder=plan.drop_remainder,
                                    name="batch")
            dataset = dataset.map(_as_written(self._parse_batch),
                                  num_parallel_calls=plan.parallel_calls,
                                  deterministic=plan.deterministic, name="parse")
            return self._finish(self._with_known_length(dataset))
        parsed = records.batch(plan.parse_block, name="parse_block").map(
            _as_written(self._parse_batch), num_parallel_calls=plan.parallel_calls,
            deterministic=plan.deterministic, name="parse",
        ).unbatch(name="unblock")
        if stage is Stage.PARSE:
            return self._finish(parsed.batch(plan.batch_size, name="batch"))
        images = self._decoded(parsed)
        # a plain batch right after the decode map: tf.data fuses the two (map_and_batch
        # fusion), so each image is written straight into its batch. A parallel batch is not
        # fused, and would add a copy and a hand-off of every image.
        batched = images.batch(plan.batch_size, drop_remainder=plan.drop_remainder,
                               name="batch")
        return self._finish(self._with_known_length(batched))

    def _with_known_length(self, batches: tf.data.Dataset) -> tf.data.Dataset:
        """Tell tf.data (and so Keras) how many batches one pass holds, where that is sure.

        The record counting in :meth:`_records` hides the length (a scan over blocks, then
        unbatch), so Keras would not know a validation pass's steps and warns "Your input ran
        out of data" at its end. The plan says where the manifest's count is exact
        (``PipelinePlan.known_length``).
        """
        if not self.plan.known_length:
            return batches
        return batches.apply(tf.data.experimental.assert_cardinality(self.plan.steps_per_epoch))

    def _records(self) -> tf.data.Dataset:
        """Serialized records from all shards, read in parallel, counted against the manifest."""
        source, plan = self.source, self.plan
        files = tf.data.Dataset.from_tensor_slices(
            (source.files, tf.range(len(source.files), dtype=tf.int64),
             tf.constant(self._read_limits, tf.int64)),
            name="files")
        # tfopt shards the file list itself instead of leaving it to tf.data's FILE auto-shard
        # policy, which refuses the pipeline: the per-image seed counter (``enumerate``) is a
        # second source ("Found an unshardable source dataset").
        if plan.file_share is not None:
            files = files.shard(*plan.file_share, name="shard_files")
        if plan.shuffle_files:
            files = files.shuffle(len(source.files), seed=self._seed,
                                  reshuffle_each_iteration=True, name="shuffle_files")
        compression = tf_compression_type(source.compression)
        skip = plan.skip_corrupt

        def interleaved(read_file):
            return files.interleave(_as_written(read_file), cycle_length=plan.interleave_cycle,
                                    block_length=1, num_parallel_calls=plan.interleave_cycle,
                                    deterministic=plan.deterministic, name="read")

        # a manifest's counts are checked as each shard is read, naming a damaged one; the
        # header walk's (shards without a manifest) only size the epoch: counting them in the
        # read would add its CPU to every pass, and TensorFlow's reader still stops at a
        # damaged record
        if not plan.shards_counted:
            def read_file(path, index, limit):
                # take(limit) stops before a damaged header (shard_check); -1 reads all
                reader = tf.data.TFRecordDataset(path, compression).take(limit)
                return reader.ignore_errors() if skip else reader

            return interleaved(read_file)

        # Read past errors, then compare the count with the manifest at the end of each file:
        # the shard can be named (TensorFlow's own error names only a byte offset), and under
        # skip_corrupt the lost records are counted. Counted in blocks of about BLOCK_BYTES (a
        # step per record would slow the read of small records); an empty block after a
        # shard's last one marks its end. Each block carries its shard's index, and one scan
        # over the interleaved blocks keeps every shard's running count, where a scan per
        # shard would instantiate its function for each file opened.
        empty = tf.constant([], tf.string)

        def read_blocks(path, index, limit):
            blocks = (tf.data.TFRecordDataset(path, compression).take(limit).ignore_errors()
                      .batch(plan.count_block)
                      .concatenate(tf.data.Dataset.from_tensors(empty)))
            return tf.data.Dataset.zip((tf.data.Dataset.from_tensors(index).repeat(), blocks))

        return interleaved(read_blocks).scan(
            tf.zeros([len(source.files)], tf.int64), _as_written(self._count_step()), name="count"
        ).unbatch(name="unblock_counted")

    def _count_step(self):
        """The scan step of :meth:`_records`: add a block to its shard's count and, at the
        shard's end (an empty block), check the count against the manifest (or, under
        ``skip_corrupt``, note the records lost); the count then restarts for the next pass."""
        source, skip, note_lost = self.source, self.plan.skip_corrupt, self._note_lost
        paths = tf.constant(source.files)
        expected = tf.constant([source.expected_counts.get(f, -1) for f in source.files],
                               tf.int64)

        def count(totals, element):
            index, block = element
            size = tf.size(block, out_type=tf.int64)
            total = totals[index] + size
            at_end = tf.equal(size, 0)
            missing = expected[index] - total
            restarted = tf.where(at_end, tf.constant(0, tf.int64), total)
            totals = tf.tensor_scatter_nd_update(totals, [[index]], [restarted])
            if skip:
                noted = tf.cond(
                    at_end, lambda: tf.py_function(note_lost, [index, missing], tf.int64),
                    lambda: missing)
                with tf.control_dependencies([noted]):
                    return tf.identity(totals), block
            # more records than the manifest says is no damage of a record: the file is
            # another shard (found before reading for plain shards, by shard_check)
            why = tf.where(missing < 0, "more records than that: not the shard the manifest "
                           "lists; run 'tfopt verify' on the dataset",
                           "a corrupted or truncated record; run 'tfopt verify' on the "
                           "dataset, or build the pipeline with skip_corrupt=True")
            message = tf.strings.join([
                "tfopt: shard ", paths[index], " should hold ",
                tf.strings.as_string(expected[index]), " records (its manifest says), ",
                tf.strings.as_string(total), " could be read: ", why])
            # The check fails by parsing the message as a number: a stateless op, where
            # tf.debugging.Assert (stateful) slowed the pass and delayed its first record.
            # Its value (0) joins the counts, so it is never pruned.
            failed = tf.logical_and(at_end, tf.not_equal(missing, 0))
            return totals + tf.strings.to_number(tf.where(failed, message, "0"), tf.int64), block

        return count

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
            if feature.raw_dtype and feature.name in parsed and feature.raw_shape is None:
                ragged = _ragged_from_raw(parsed[feature.name],
                                          tf.dtypes.as_dtype(feature.raw_dtype))
                parsed[feature.name] = ragged.to_tensor() if self.plan.pad_ragged else ragged
            elif feature.raw_dtype and feature.name in parsed:
                values = tf.io.decode_raw(parsed[feature.name], tf.dtypes.as_dtype(feature.raw_dtype),
                                          little_endian=True)
                parsed[feature.name] = tf.reshape(values, [-1, *feature.raw_shape])
            elif self.plan.pad_ragged and isinstance(parsed.get(feature.name), tf.RaggedTensor):
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
        plan, decode = self.plan, self.plan.decode
        has_label = self.source.label_key is not None
        base_seed = tf.constant(self._seed, tf.int64)

        def seed_of(index):
            return tf.stack([base_seed, index])

        hint = (f"run 'tfopt verify {self._where}' to find such records (shard and record "
                "index), or build the pipeline with skip_corrupt=True to skip them")

        def checked(image):
            return checked_image(image, decode, hint)

        if plan.cache is CacheMode.DECODED:
            # whole decoded images in the cache; each epoch draws its own crops from them
            full = parsed.map(_as_written(_keep_label(
                lambda image: decode_full(checked(image), decode), has_label)),
                              num_parallel_calls=plan.parallel_calls,
                              deterministic=plan.deterministic, name="decode")
            full = self._shuffle_and_repeat(self._cache(self._skip_undecodable(full)))
            crop = _as_written(_with_index(
                lambda index, image: crop_and_resize(image, decode, seed_of(index)), has_label))
            return full.enumerate(self._resume, name="seed_index").map(
                crop, num_parallel_calls=plan.parallel_calls, deterministic=plan.deterministic,
                name="crop")
        # one map decodes and crops (a random-resized crop when training)
        to_target = _as_written(_with_index(
            lambda index, image: decode_to_target(checked(image), decode, seed_of(index)),
            has_label))
        # under a FINAL cache the crops are drawn once, in the pass that fills it (before the
        # skip of a resume): their seeds count from 0; else they follow the skipped examples
        start = 0 if plan.cache is CacheMode.FINAL else self._resume
        images = self._skip_undecodable(parsed.enumerate(start, name="seed_index").map(
            to_target, num_parallel_calls=plan.parallel_calls, deterministic=plan.deterministic,
            name="decode"))
        if plan.cache is CacheMode.FINAL:
            images = self._shuffle_and_repeat(self._cache(images))
        return images

    def _skip_undecodable(self, decoded: tf.data.Dataset) -> tf.data.Dataset:
        """Under ``skip_corrupt``, drop the records whose image does not decode (a damaged
        image in an intact record: TensorFlow's decode error would end the epoch), logging
        each; else as it is."""
        if not self.plan.skip_corrupt:
            return decoded
        return decoded.ignore_errors(log_warning=True, name="skip_undecodable")

    def _shuffle_and_repeat(self, cached: tf.data.Dataset) -> tf.data.Dataset:
        """After a cache: a fresh order every epoch when training, repeated if asked."""
        if self.plan.training:
            cached = cached.shuffle(self.plan.shuffle_elements, seed=self._seed,
                                    reshuffle_each_iteration=True, name="shuffle")
        if not self.plan.repeat:
            return cached
        cached = cached.repeat(name="repeat")
        return cached.skip(self._resume, name="resume") if self._resume else cached

    def _cache(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        if not self.plan.cache_to_file:
            return dataset.cache(name="cache")
        return dataset.cache(self._cache_location, name="cache")

    def _finish(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        plan = self.plan
        options = tf.data.Options()
        options.autotune.enabled = rules.AUTOTUNE_ENABLED
        options.autotune.ram_budget = plan.autotune_ram_budget
        options.experimental_optimization.map_parallelization = True
        options.deterministic = plan.deterministic
        options.experimental_distribute.auto_shard_policy = _AUTO_SHARD_POLICY[plan.sharding]
        dataset = dataset.with_options(options)
        if plan.service is not None:
            # job_name=None: each iteration gets its own job, so a repeated evaluation or a
            # second pipeline never joins (and finds finished) an earlier job of the same name
            dataset = dataset.apply(tf.data.experimental.service.distribute(
                processing_mode=SERVICE_PROCESSING_MODE, service=plan.service, job_name=None))
        if plan.prefetch is Prefetch.DEVICE:
            return dataset.apply(tf.data.experimental.prefetch_to_device(PREFETCH_DEVICE))
        return dataset.prefetch(rules.PREFETCH_DEPTH, name="prefetch")


def _no_images_error(where, source: PipelineSource, image_size) -> InvalidArgumentError:
    """image_size given for data in which no feature holds images: once ignored silently."""
    size = f"{image_size[0]}x{image_size[1]}"
    strings = [f.name for f in source.features if f.kind is FeatureKind.BYTES]
    held = (f"its bytes features ({', '.join(strings)}) hold no JPEG, PNG, GIF or BMP images "
            "in the sampled records" if strings else "it has no bytes feature")
    return InvalidArgumentError(
        f"image_size={size}: {where} holds no image feature ({held}); leave image_size out for "
        "data without images, or pass image_key= to name the feature that holds them")


def _not_images_note(source: PipelineSource, skip_corrupt: bool) -> str | None:
    """What the pipeline does with the values of its image feature that the sample found
    were not images (None if it found none)."""
    if source.not_images is None:
        return None
    count, values, first = source.not_images
    found = (f"{source.image_key}: {count:,} of {values:,} sampled values "
             f"{'is' if count == 1 else 'are'} not an image (first: {first})")
    if skip_corrupt:
        return (f"{found}; records whose image fails to decode are skipped (skip_corrupt: "
                "TensorFlow logs each, they are not counted)")
    return (f"{found}; a record like it stops the pipeline with an error: build the pipeline "
            "with skip_corrupt=True to skip such records, or find them with 'tfopt verify'")


def _keep_label(fn, has_label):
    return (lambda image, label: (fn(image), label)) if has_label else fn


def _with_index(fn, has_label):
    if has_label:
        return lambda index, element: (fn(index, element[0]), element[1])
    return fn


def _ragged_from_raw(raw: tf.Tensor, dtype: tf.DType) -> tf.RaggedTensor:
    """A batch of variable-length lists stored as their bytes (one string per example, e.g. a
    Parquet list of float64): ``decode_raw`` takes strings of one length only, so the batch's
    strings are joined, decoded at once and cut back into rows by their lengths."""
    lengths = tf.strings.length(raw) // dtype.size
    values = tf.io.decode_raw(tf.strings.reduce_join(raw), dtype, little_endian=True)
    return tf.RaggedTensor.from_row_lengths(values, tf.cast(lengths, tf.int64))


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
        training: Training settings (see :class:`~tfopt.data.config.PipelineConfig`).
            Defaults to False.
        image_size: Output size of images. Defaults to None (required for images).
        image_key: The encoded-image feature. Defaults to the manifest's or inferred one.
        label_key: The label feature. Defaults to the manifest's or inferred one.
        **config: Other :class:`~tfopt.data.config.PipelineConfig` fields.

    Raises:
        tfopt.errors.DatasetError: Nothing readable at ``source``; as its subclass
            ``tfopt.errors.MissingSplitError``, no such split, or (evaluation, no split
            given) no validation split.
        tfopt.errors.InvalidArgumentError: An unknown option (named, with the allowed ones), or a
            value that does not fit the data.

    Example:
        >>> train = build_pipeline("shards/", 64, training=True, image_size=224)
        >>> model.fit(train, epochs=3)
    """
    known_options(config, FIELD_NAMES, "build_pipeline")
    config.setdefault("repeat", False)
    builder = PipelineBuilder(source, batch_size=batch_size, training=training,
                              image_size=image_size, image_key=image_key, label_key=label_key,
                              **config)
    logger.info("pipeline for %s:\n%s", source, builder.choices.describe())
    return builder.build()
