"""tf.data pipelines for ``tfopt.Run``'s in-memory and dataset sources (:mod:`tfopt.data.inputs`).

Arrays are batched the way Keras batches them in ``model.fit(x, y)``: the example indices are
shuffled (the whole pass, anew each epoch), cut into batches, and each batch gathered from the
arrays in one op, so a batch costs one gather per array, not one slice per example. The last
batch of a pass is partial, as Keras's is, except under several replicas, where every step
needs the whole global batch. A resumed run skips the batches of the epochs its backup holds
on the index stream (no data is read to skip), so with a seed it trains on an uninterrupted
run's data order.

A ``tf.data.Dataset`` is kept as given: its elements, batching and shuffling are the user's;
a prefetch is added, and where its length is known it is repeated into one stream for the fit,
each pass a new iteration (so reshuffled as ``model.fit(dataset)``'s new iterator each epoch
would be). A resumed run first opens (and drops) one iterator per pass done, which advances a
seeded shuffle's seeds as those passes did without reading them.
"""

from __future__ import annotations

from collections.abc import Mapping

import tensorflow as tf

import tfopt.rules as rules
from tfopt._system import usable_cores
from tfopt.data.inputs import ArraysInput, DatasetInput

__all__ = ["array_batches", "array_steps", "dataset_for_fit"]


def array_steps(examples: int, batch_size: int, drop_remainder: bool) -> int:
    """Batches in one pass of ``examples`` examples."""
    return examples // batch_size if drop_remainder else -(-examples // batch_size)


def _tensors(value):
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {key: tf.convert_to_tensor(item) for key, item in value.items()}
    return tf.convert_to_tensor(value)


def array_batches(arrays: ArraysInput, x, batch_size: int, *, training: bool,
                  seed: int | None = None, drop_remainder: bool = False,
                  skip_batches: int = 0, keep_batches: bool = False) -> tf.data.Dataset:
    """Batches of ``(x, y[, sample_weight])`` from ``arrays``; ``x`` as the model takes it
    (:meth:`ArraysInput.features`).

    Training: shuffled anew every pass, repeated, the first ``skip_batches`` batches of the
    stream skipped (a resumed run's). Evaluation: one pass in order; with ``keep_batches`` the
    gathered batches are kept in memory after the first pass, because each evaluation opens a
    new iterator and starting the gather anew costs more than a small set's whole pass.
    """
    examples = len(arrays)
    parts = tuple(part for part in (x, arrays.y, arrays.sample_weight) if part is not None)
    tensors = tuple(_tensors(part) for part in parts)
    indices = tf.data.Dataset.range(examples)
    if training:
        # the whole pass's order, drawn anew each pass (Keras's shuffle=True for arrays)
        indices = indices.shuffle(examples, seed=seed, reshuffle_each_iteration=True)
    batches = indices.batch(batch_size, drop_remainder=drop_remainder)
    if training:
        batches = batches.repeat()
        if skip_batches:
            batches = batches.skip(skip_batches)

    # run as written: it branches on nothing, and AutoGraph's conversion is start-up time
    @tf.autograph.experimental.do_not_convert
    def gather(index):
        return tf.nest.map_structure(lambda tensor: tf.gather(tensor, index), tensors)

    dataset = batches.map(gather, num_parallel_calls=rules.parallel_calls(usable_cores()),
                          deterministic=True)
    if keep_batches and not training:
        dataset = dataset.cache()
    options = tf.data.Options()
    options.autotune.enabled = rules.AUTOTUNE_ENABLED  # as the builder's pipelines
    return dataset.prefetch(rules.PREFETCH_DEPTH).with_options(options)


def dataset_for_fit(given: DatasetInput, *, batch_size: int | None = None,
                    repeat: bool = False, skip_passes: int = 0,
                    skip_batches: int = 0) -> tf.data.Dataset:
    """The user's dataset as ``fit`` reads it: as given (batched to ``batch_size`` when one is
    given: an unbatched dataset's examples, or a batched one's re-batched), prefetched, with
    tf.data's autotuner as the builder's pipelines have it.

    ``repeat``: one stream for the whole fit, each pass a new iteration of the dataset (its
    reshuffling shuffles draw new orders, as with a new iterator each epoch). ``skip_passes``
    iterators are opened and dropped first: each draws the seeds one pass of the dataset's
    shuffles would, so a seeded dataset continues where those passes left it, without reading
    them. ``skip_batches`` batches of the stream are then read and dropped (a part of a pass).
    """
    dataset = given.dataset
    for _ in range(skip_passes):
        iter(dataset)  # each new iterator draws the next seeds of the dataset's shuffles
    if batch_size is not None:
        dataset = (dataset.unbatch() if given.facts.batched else dataset).batch(batch_size)
    if repeat:
        dataset = dataset.repeat()
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    # the builder's rule for tf.data's autotuner (off: rules.AUTOTUNE_ENABLED says why; its
    # AUTOTUNE stages then run one thread per core); the elements are the same
    options = tf.data.Options()
    options.autotune.enabled = rules.AUTOTUNE_ENABLED
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(options)
