"""The multi-worker fit fix's work on Keras's private trainer (``keras-team/keras#20585``).

:func:`patch_trainer` replaces three private functions of
``keras/src/backend/tensorflow/trainer.py`` once per process; the failures and the fixes are
described in ``docs/distribute.md``, the public entry is
:func:`tfopt.distribute.keras_multi_worker.fix_keras_multi_worker`.
"""

from __future__ import annotations

import logging

from tfopt._internals import TESTED_KERAS, major_minor, warn_unavailable
from tfopt._internals.tf_runtime import per_replica_specs
from tfopt.errors import TfoptError

logger = logging.getLogger("tfopt")

# Set on the patched trainer class, so a second call does nothing.
_MARK = "_tfopt_multi_worker_fix"


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


def patch_trainer() -> bool:
    """Replace the trainer's functions (see the module docstring); False when already done.

    Raises:
        TfoptError: This Keras no longer has the functions replaced (the message names the
            tested versions).
    """
    keras, trainer = _trainer_module()
    trainer_class = trainer.TensorFlowTrainer
    if getattr(trainer_class, _MARK, False):
        return False
    if major_minor(keras.__version__) not in TESTED_KERAS:
        logger.warning("Keras %s: tfopt's multi-worker fix is tested on Keras %s; applying it "
                       "anyway (the functions it replaces are still there)", keras.__version__,
                       ", ".join(TESTED_KERAS))

    import tensorflow as tf
    from keras import tree

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

        if iterator is not None and data_batch is None:
            data_batch = _element_spec(iterator, tf)
        if iterator is not None and data_batch is None:
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


def _element_spec(epoch_iterator, tf):
    """One replica's element spec of the epoch iterator's distributed dataset, or None.

    The build reads only shapes and dtypes, and the spec has them without an iterator.
    Pulling a batch instead (as Keras does) creates an iterator that fit then throws away
    (``epoch_iterator.reset()``), and that discarded iterator draws from the shuffle's shared
    seed generator: a resumed fit then shuffles differently from an uninterrupted one.
    """
    get_dataset = getattr(epoch_iterator, "_get_iterator", None)
    if get_dataset is None:
        warn_unavailable("keras.src.trainers.epoch_iterator.EpochIterator._get_iterator",
                         "the multi-worker fix builds the model from a batch it draws, so a "
                         "resumed fit shuffles differently from an uninterrupted one")
        return None
    spec = getattr(get_dataset(), "element_spec", None)
    if spec is None:
        return None

    def one_replica(value):
        specs = per_replica_specs(value)  # PerReplicaSpec: one spec per replica
        return specs[0] if specs else value

    specs = tf.nest.map_structure(one_replica, spec)  # a TypeSpec is a leaf here
    leaves = tf.nest.flatten(specs)
    if not all(isinstance(leaf, tf.TensorSpec) for leaf in leaves):
        return None  # ragged or sparse parts: let Keras read a real batch
    return specs


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
