"""Keras 3 ``fit``/``evaluate``/``predict`` under ``MultiWorkerMirroredStrategy``, made to work.

Upstream, Keras 3 training under ``tf.distribute.MultiWorkerMirroredStrategy`` fails before the
first step (keras-team/keras#20585; TensorFlow's multi-worker Keras tutorial has failed since
TF 2.16). Two bugs in ``keras/src/backend/tensorflow/trainer.py`` (read on Keras 3.15) cause it:

1. ``TensorFlowTrainer._maybe_symbolic_build`` builds the model from the first batch before
   training. Given a distributed batch it calls ``strategy.reduce("MEAN", batch, axis=None)``
   on the whole ``(x, y)`` structure. ``MultiWorkerMirroredStrategy``'s collective ops take one
   ``PerReplica`` value, so the tuple is handed to ``convert_to_tensor``:
   ``ValueError: Attempt to convert a value (PerReplica:{...}) ... to a Tensor``. Averaging
   data over workers was never needed: only the shapes and dtypes are read. The fix takes each
   value's first local replica, with no communication.
2. ``reduce_per_replica`` (which turns each step's per-replica logs into one value) reduces in
   multi-worker mode with ``strategy.reduce("MEAN", v, axis=0)``: the mean over replicas *and*
   over the value's first axis. The logs are scalars (loss, metric results), which have no
   axis 0: ``Invalid reduction dimension 0 for input with 0 dimensions``. One machine's path
   computes ``tf.reduce_mean(local_results, axis=0)``, the mean over replicas only; the fix
   does the same over all workers, ``strategy.reduce("MEAN", v, axis=None)``.

A third failure follows once those are fixed: with ``steps_per_execution`` > 1 Keras runs the
steps of an execution in a ``tf.while_loop`` with a ``tf.cond`` around each step, and
collective ops inside that conditional fail at run time ("You must feed a value for
placeholder tensor 'while/cond/Placeholder'"). In multi-worker mode the fix runs each step of
an execution as its own compiled call (see :func:`_multi_worker_multi_step_function`).

Nothing else differs from Keras: gradients are all-reduced by the optimizer as under
``MirroredStrategy``, datasets are auto-sharded by ``experimental_distribute_dataset``. With
both fixes, two workers on localhost end with identical weights, equal to one process trained
on the same global batch (``tests/train/test_keras_multi_worker.py``).

One difference from TensorFlow 2's own Keras is not a crash and is left to the user: Keras 3
keeps ``BatchNormalization``'s moving mean and variance per replica (variables with aggregation
"none"), so after multi-worker training each worker holds the statistics of its own batches
and evaluates, predicts and saves with them. :func:`synchronize_batch_norm` switches a model's
batch normalisation to statistics over the global batch: every worker then holds the same
moving statistics, and training matches one process on the same global batch.

:func:`fix_keras_multi_worker` applies the fixes (once per process);
:func:`tfopt.select_strategy` calls it whenever it builds a multi-worker strategy. It replaces
private Keras functions, so it is pinned: on the Keras versions in :data:`TESTED_KERAS` it
applies silently; on another 3.x release that still has the same functions it applies with a
warning; where they are gone it raises instead of guessing.
"""

from __future__ import annotations

import logging

from tfopt.errors import InvalidArgumentError, TfoptError

logger = logging.getLogger("tfopt")

__all__ = ["TESTED_KERAS", "fix_keras_multi_worker", "synchronize_batch_norm"]

# Keras releases (major.minor) on which the two-worker tests pass with the fix applied.
TESTED_KERAS = ("3.15",)

# Set on the patched trainer class, so a second call does nothing.
_MARK = "_tfopt_multi_worker_fix"


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _trainer_module():
    from tfopt._tf import import_tensorflow

    import_tensorflow()
    import keras

    try:
        from keras.src.backend.tensorflow import trainer
    except ImportError as error:
        raise TfoptError(
            f"Keras {keras.__version__} has no keras.src.backend.tensorflow.trainer ({error}); "
            f"tfopt's multi-worker fix is tested on Keras {', '.join(TESTED_KERAS)}. Hint: "
            f"install keras=={TESTED_KERAS[-1]}.*, or set KERAS_BACKEND=tensorflow.") from None
    missing = [name for name in ("TensorFlowTrainer", "reduce_per_replica",
                                 "_collective_all_reduce_multi_worker")
               if not hasattr(trainer, name)]
    trainer_class = getattr(trainer, "TensorFlowTrainer", None)
    missing += [f"TensorFlowTrainer.{name}" for name in ("_maybe_symbolic_build", "_make_function")
                if trainer_class is not None and not hasattr(trainer_class, name)]
    if missing:
        raise TfoptError(
            f"Keras {keras.__version__} changed the trainer internals tfopt's multi-worker fix "
            f"replaces (missing: {', '.join(missing)}); it is tested on Keras "
            f"{', '.join(TESTED_KERAS)}. Hint: install keras=={TESTED_KERAS[-1]}.*")
    return keras, trainer


def fix_keras_multi_worker() -> bool:
    """Make Keras 3 ``fit``, ``evaluate`` and ``predict`` work under MultiWorkerMirroredStrategy.

    Safe to call more than once and on one machine: the replaced functions behave as Keras's
    own except in multi-worker mode. See the module docstring for the upstream failures.

    Returns:
        True when this call applied the fix, False when it was already applied.

    Raises:
        TfoptError: This Keras no longer has the functions the fix replaces (the message
            names the tested versions).

    Example:
        >>> fix_keras_multi_worker()  # select_strategy("multi_worker") does this for you
        True
    """
    keras, trainer = _trainer_module()
    trainer_class = trainer.TensorFlowTrainer
    if getattr(trainer_class, _MARK, False):
        return False
    if _major_minor(keras.__version__) not in TESTED_KERAS:
        logger.warning("Keras %s: tfopt's multi-worker fix is tested on Keras %s; applying it "
                       "anyway (the functions it replaces are still there)", keras.__version__,
                       ", ".join(TESTED_KERAS))

    import tensorflow as tf
    from keras.src import tree

    keras_reduce_per_replica = trainer.reduce_per_replica
    in_multi_worker_mode = trainer._collective_all_reduce_multi_worker

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return  # Keras builds when the step function is traced
        strategy = self.distribute_strategy

        def first_local_replica(value):
            if isinstance(value, tf.distribute.DistributedValues):
                return strategy.experimental_local_results(value)[0]
            return value

        if iterator is not None:
            for _, _, batches in iterator:
                # shapes and dtypes are all the build reads: one local replica's batch will do
                data_batch = tree.map_structure(first_local_replica, next(batches))
                break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and in_multi_worker_mode(strategy):
            # the mean over all replicas of all workers, whatever the values' rank
            return tree.map_structure(
                lambda value: strategy.reduce("MEAN", value, axis=None), values)
        return keras_reduce_per_replica(values, strategy, reduction)

    keras_make_function = trainer_class._make_function

    def _make_function(self, step_function):
        if self.steps_per_execution == 1 or not in_multi_worker_mode(self.distribute_strategy):
            return keras_make_function(self, step_function)
        return _multi_worker_multi_step_function(self, step_function, reduce_per_replica, tf)

    trainer_class._maybe_symbolic_build = _maybe_symbolic_build
    trainer_class._make_function = _make_function
    # the step functions look the name up in the module when they are traced
    trainer.reduce_per_replica = reduce_per_replica
    setattr(trainer_class, _MARK, True)
    logger.info("Keras %s patched for MultiWorkerMirroredStrategy (keras-team/keras#20585)",
                keras.__version__)
    return True


def _multi_worker_multi_step_function(model, step_function, reduce_per_replica, tf):
    """Keras's step function for ``steps_per_execution`` > 1, one compiled step per call.

    Keras loops over ``get_next_as_optional()`` inside one ``tf.function`` with a ``tf.cond``
    around each step; with the strategy's collective ops inside a conditional in a loop the
    graph fails ("You must feed a value for placeholder tensor 'while/cond/Placeholder'"),
    whether the condition is Keras's or any other. So each step here is its own call of a
    compiled function that takes the next batch (as Keras's ``steps_per_execution=1`` path
    does), and Python loops over the execution's steps: callbacks still run once per
    execution, but the steps of an execution cost a Python round trip each. When the data
    ends inside an execution the steps taken count and the outputs are the last step's; an
    execution with no step left raises ``OutOfRangeError``, which Keras's epoch iterator
    turns into the end of the epoch.
    """
    strategy = model.distribute_strategy
    steps = model.steps_per_execution

    def one_step_on_data(data):
        outputs = strategy.run(step_function, args=(data,))
        return reduce_per_replica(outputs, strategy, reduction="auto")

    def one_step_on_iterator(iterator):
        return one_step_on_data(iterator.get_next())

    if not model.run_eagerly:
        one_step_on_data = tf.function(one_step_on_data, reduce_retracing=True,
                                       jit_compile=model.jit_compile)
        one_step_on_iterator = tf.function(one_step_on_iterator, reduce_retracing=True)

    def function(iterator):
        if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
            outputs = None
            for _ in range(steps):
                try:
                    outputs = one_step_on_iterator(iterator)
                except tf.errors.OutOfRangeError:
                    if outputs is None:
                        raise
                    break
            return outputs
        outputs = None
        for _, data in zip(range(steps), iterator, strict=False):  # batches (train_on_batch)
            outputs = one_step_on_data(data)
        return outputs

    return function


def synchronize_batch_norm(model) -> int:
    """Compute every ``BatchNormalization`` layer's batch statistics over the global batch.

    Sets ``synchronized=True`` (Keras's own option, TensorFlow backend) on each batch
    normalisation layer of ``model``, nested models included: mean and variance come from an
    all-reduce over all replicas of all workers (three small all-reduces per layer per step),
    so the moving statistics are the same on every worker and equal one process's on the same
    global batch. Without it, Keras 3 keeps them per replica. Call it before the first
    ``fit``, ``evaluate`` or ``predict`` (the step functions read the setting when traced).
    On one device it changes nothing but adds those no-op reductions.

    Args:
        model: A Keras model.

    Returns:
        How many layers were switched.

    Raises:
        InvalidArgumentError: ``model`` is not a Keras model, or :func:`fuse_batch_norm` ran on
            it: the fused kernel computes per-replica statistics, so use one or the other
            (synchronising on several workers, fusing on one).

    Example:
        >>> with chosen.strategy.scope():
        ...     model = build_model()
        >>> synchronize_batch_norm(model)
        12
    """
    import keras

    from tfopt.train.fused_batch_norm import check_keras_model, is_fused

    check_keras_model(model, "synchronize_batch_norm")
    layers = list(model._flatten_layers(include_self=False, recursive=True))
    fused = [layer.name for layer in layers if is_fused(layer)]
    if fused:
        raise InvalidArgumentError(
            f"synchronize_batch_norm(model): fuse_batch_norm already switched {len(fused)} "
            f"layer(s) of {model.name!r} to the fused kernel ({', '.join(fused[:3])}"
            f"{', ...' if len(fused) > 3 else ''}), which keeps per-replica statistics; use "
            "one or the other: synchronize_batch_norm for identical statistics on several "
            "workers, fuse_batch_norm for speed on one (build the model again without it)")
    switched = 0
    for layer in layers:
        if isinstance(layer, keras.layers.BatchNormalization) and not layer.synchronized:
            layer.synchronized = True
            switched += 1
    return switched
