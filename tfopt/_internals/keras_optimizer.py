"""Gradient accumulation under mirrored strategies: Keras's private update step, redone.

Keras's ``_backend_apply_gradients`` runs ``ops.cond(update, accumulate)`` and, in the update
branch, the strategy's cross-replica reduction: a ``merge_call`` inside a cond, which
MirroredStrategy and MultiWorkerMirroredStrategy refuse. The replacement all-reduces each
micro-batch's gradients first, so the replicas accumulate the same sums and the cond holds no
cross-replica work (``docs/train.md``, "Gradient accumulation"). It uses the optimizer's private
parts listed in ``INTERNALS``.
"""

from __future__ import annotations

import types

import keras
import tensorflow as tf

from tfopt._internals import warn_unavailable

_MISSING = ("keras.optimizers.Optimizer._backend_apply_gradients",
            "gradient accumulation under MirroredStrategy and MultiWorkerMirroredStrategy "
            "runs Keras's own update, which fails there")


def has_accumulators(optimizer) -> bool:
    """Whether a built optimizer made its accumulator variables (Keras does so in ``build``
    only when ``gradient_accumulation_steps`` was set)."""
    return bool(getattr(optimizer, "_accumulated_gradients", None))


def install_replica_apply_gradients(optimizer) -> bool:
    """Give ``optimizer`` the mirrored-strategy update step; False (with one warning naming
    what is lost) when this Keras has no update step to replace."""
    if not hasattr(type(optimizer), "_backend_apply_gradients"):
        warn_unavailable(*_MISSING)
        return False
    optimizer._backend_apply_gradients = types.MethodType(_replica_apply_gradients, optimizer)
    return True


def learning_rate_schedule(optimizer):
    """The optimizer's schedule object, or its float rate: Keras keeps the schedule only in
    the private ``_learning_rate``; the public ``learning_rate`` is the current value."""
    return getattr(optimizer, "_learning_rate", None)


def _needs_replica_path() -> bool:
    # inside strategy.run of a (multi-worker) mirrored strategy, where Keras's cond would
    # merge_call; the default strategy, TPUs and parameter servers keep Keras's own code
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return False
    strategy = tf.distribute.get_strategy()
    return isinstance(strategy, (tf.distribute.MirroredStrategy,
                                 tf.distribute.MultiWorkerMirroredStrategy))


def _replica_apply_gradients(self, grads, trainable_variables):
    """``_backend_apply_gradients`` of an accumulating optimizer under a mirrored strategy.

    Keras's version (``keras/src/optimizers/base_optimizer.py``, 3.15) with the cross-replica
    work moved out of the cond: see the module docstring. Anywhere else it calls Keras's.
    """
    if not (self.gradient_accumulation_steps and _needs_replica_path()):
        return type(self)._backend_apply_gradients(self, grads, trainable_variables)
    steps = self.gradient_accumulation_steps
    # the global micro-batch gradient (the loss is already divided by the replica count, as
    # Keras does for any strategy), the same on every replica; sparse gradients made dense
    # since they are added to dense accumulators anyway
    grads = [tf.convert_to_tensor(g) for g in grads]
    grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, grads)
    acc_grads = [self._accumulated_gradients[self._get_variable_index(v)]
                 for v in trainable_variables]
    variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]
    is_update_step = (self._iterations + 1) % steps == 0

    def update():
        mean = self._clip_gradients([(g + acc) / steps for g, acc in zip(grads, acc_grads, strict=True)])
        learning_rate = self.learning_rate
        if self.weight_decay is not None:  # Keras's weight_decay_fn, per replica
            for variable in variables:
                if self._use_weight_decay(variable):
                    decay = tf.cast(self.weight_decay, variable.dtype)
                    variable.assign_sub(
                        variable * decay * tf.cast(learning_rate, variable.dtype))
        for grad, variable in zip(mean, variables, strict=True):
            self.update_step(grad, variable, learning_rate)
        for acc in acc_grads:
            acc.assign(tf.zeros(acc.shape, acc.dtype))
        return tf.constant(True)

    def accumulate():
        for grad, acc in zip(grads, acc_grads, strict=True):
            acc.assign(acc + tf.cast(grad, acc.dtype))
        return tf.constant(False)

    tf.cond(is_update_step, update, accumulate)
    if self.use_ema:  # as Keras does after its cond
        self._update_model_variables_moving_average(self._trainable_variables)
        if self.ema_overwrite_frequency:
            keras.ops.cond(
                (self.iterations + 1) % self.ema_overwrite_frequency == 0,
                lambda: self._overwrite_model_variables_with_average_value(
                    self._trainable_variables),
                lambda: None,
            )
