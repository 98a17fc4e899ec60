"""Gradient accumulation: a large effective batch from several small ones, through Keras 3.

Keras 3 optimizers accumulate with ``gradient_accumulation_steps``; this module sets it from the
effective batch wanted and the batch that fits (:func:`make_optimizer`,
:func:`configure_accumulation`) and adds what Keras 3.15 lacks: learning-rate schedules that
advance once per real update (:class:`UpdateStepSchedule`), and accumulation under
``MirroredStrategy``/``MultiWorkerMirroredStrategy``, where Keras's own fails on a
``merge_call`` inside ``ops.cond`` (``tfopt._internals.keras_optimizer`` all-reduces each
micro-batch first). Why and how, loss scaling included: ``docs/train.md`` ("Gradient
accumulation").
"""

from __future__ import annotations

import dataclasses
import logging

import keras

from tfopt._internals.keras_optimizer import (
    has_accumulators,
    install_replica_apply_gradients,
    learning_rate_schedule,
)
from tfopt._validate import whole_number
from tfopt.errors import InvalidArgumentError

logger = logging.getLogger("tfopt")


@dataclasses.dataclass(frozen=True)
class AccumulationPlan:
    """How many micro-batches make one optimizer update.

    Attributes:
        steps: Micro-batches per update (``gradient_accumulation_steps``); 1 means no
            accumulation.
        effective_batch_size: Examples per update, ``steps * batch_size``.
        batch_size: Examples per micro-batch (what the input pipeline yields and memory holds).
    """

    steps: int
    effective_batch_size: int
    batch_size: int

    def __post_init__(self):
        for name in ("steps", "effective_batch_size", "batch_size"):
            _check_positive_int(name, getattr(self, name))
        if self.steps * self.batch_size != self.effective_batch_size:
            raise InvalidArgumentError(
                f"AccumulationPlan: steps * batch_size must equal effective_batch_size; got "
                f"{self.steps} * {self.batch_size} != {self.effective_batch_size}"
            )

    @classmethod
    def from_sizes(cls, effective_batch_size: int, batch_size: int) -> AccumulationPlan:
        """The plan for an effective batch built from micro-batches of ``batch_size``.

        Args:
            effective_batch_size: Examples per optimizer update.
            batch_size: Examples per micro-batch; must divide ``effective_batch_size``.

        Raises:
            InvalidArgumentError: A size is not a positive integer, or the batch size does not
                divide the effective batch size.

        Example:
            >>> AccumulationPlan.from_sizes(256, 64).steps
            4
        """
        _check_positive_int("effective_batch_size", effective_batch_size)
        _check_positive_int("batch_size", batch_size)
        if effective_batch_size % batch_size:
            below = effective_batch_size // batch_size * batch_size
            raise InvalidArgumentError(
                f"effective_batch_size={effective_batch_size} is not a multiple of "
                f"batch_size={batch_size}; the effective batch must be a whole number of "
                f"micro-batches (e.g. effective_batch_size={below or batch_size} or "
                f"{below + batch_size})"
            )
        return cls(effective_batch_size // batch_size, effective_batch_size, batch_size)

    def replace(self, **changes) -> AccumulationPlan:
        """A copy with the given fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def _check_positive_int(name: str, value) -> int:
    return whole_number(value, name, 1, "a positive integer")


@keras.saving.register_keras_serializable(package="tfopt")
class UpdateStepSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A learning-rate schedule that advances once per real update, not per micro-batch.

    Keras calls a schedule with the optimizer's micro-step counter; under gradient accumulation
    of ``steps`` micro-batches this wrapper passes ``micro_step // steps`` to the wrapped
    schedule, so update n (counting from 0) gets the rate the schedule gives for step n, as it
    would without accumulation. Keras reads the rate inside the update, at micro-step
    ``n * steps + steps - 1``, whose quotient is n.

    Args:
        schedule: The schedule written in real updates.
        steps: Micro-batches per update.

    Example:
        >>> inner = keras.optimizers.schedules.ExponentialDecay(0.1, 1000, 0.5)
        >>> optimizer = keras.optimizers.SGD(UpdateStepSchedule(inner, 4))
    """

    def __init__(self, schedule, steps: int):
        _check_positive_int("steps", steps)
        self.schedule = schedule
        self.steps = int(steps)

    def __call__(self, step):
        return self.schedule(keras.ops.floor_divide(step, self.steps))

    def get_config(self):
        return {
            "schedule": keras.saving.serialize_keras_object(self.schedule),
            "steps": self.steps,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["schedule"] = keras.saving.deserialize_keras_object(config["schedule"])
        return cls(**config)


def _inner_optimizer(optimizer):
    # compile() wraps the optimizer in a LossScaleOptimizer under mixed_float16; that wrapper
    # refuses gradient_accumulation_steps and forwards updates to its inner optimizer
    inner = optimizer
    while isinstance(inner, keras.optimizers.LossScaleOptimizer):
        inner = inner.inner_optimizer
    return inner


def configure_accumulation(optimizer, effective_batch_size: int, batch_size: int) -> AccumulationPlan:
    """Make a Keras 3 optimizer accumulate gradients up to an effective batch size.

    Sets ``gradient_accumulation_steps = effective_batch_size // batch_size`` (None when that is
    1, as Keras requires at least 2) on the optimizer, or on the inner optimizer of a
    ``LossScaleOptimizer``, and wraps a ``LearningRateSchedule`` in
    :class:`UpdateStepSchedule` so that it advances once per real update. A float learning
    rate needs nothing; a plain callable is called without a step by Keras and is left as it is.
    Feed the model batches of ``batch_size``; ``optimizer.iterations`` then counts real updates.
    Keras does not reset the accumulators at the end of an epoch, so an epoch whose batch count
    is not a multiple of ``steps`` carries its last micro-batches into the next epoch's first
    update. Under ``MirroredStrategy`` and ``MultiWorkerMirroredStrategy``, where Keras's own
    accumulation fails (module docstring), each micro-batch's gradients are all-reduced and the
    replicas accumulate the same sums; configure the optimizer made in the strategy's scope.
    That replacement lives on the optimizer object: an optimizer loaded from a saved model, or
    one given ``gradient_accumulation_steps`` directly, has Keras's code again, so pass it
    through this function once more before training it under such a strategy.

    Args:
        optimizer: A ``keras.optimizers.Optimizer`` not yet built (before the first training
            step; ``compile`` may have run).
        effective_batch_size: Examples per optimizer update.
        batch_size: Examples per micro-batch, the batch that fits in memory.

    Returns:
        The AccumulationPlan applied.

    Raises:
        InvalidArgumentError: Sizes that are not positive integers, a batch size that does not
            divide the effective batch size, an object that is not a Keras optimizer, or an
            optimizer already built without accumulators.

    Example:
        >>> optimizer = keras.optimizers.SGD(0.1)
        >>> configure_accumulation(optimizer, effective_batch_size=256, batch_size=64).steps
        4
        >>> model.compile(optimizer, "mse"); model.fit(x, y, batch_size=64)
    """
    plan = AccumulationPlan.from_sizes(effective_batch_size, batch_size)
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise InvalidArgumentError(
            f"optimizer must be a keras.optimizers.Optimizer instance; got "
            f"{type(optimizer).__name__} {optimizer!r}. For a name such as 'adam' use "
            "make_optimizer('adam', effective_batch_size, batch_size)"
        )
    inner = _inner_optimizer(optimizer)
    steps = plan.steps if plan.steps > 1 else None
    # build() creates the accumulator variables only when gradient_accumulation_steps is set
    if steps and inner.built and not has_accumulators(inner):
        raise InvalidArgumentError(
            f"optimizer {inner.name!r} is already built without gradient accumulation (it has "
            "taken a training step), so it has no accumulators for "
            f"gradient_accumulation_steps={steps}; configure it before the first fit or "
            "train_on_batch, or build a new one with make_optimizer()"
        )
    inner.gradient_accumulation_steps = steps
    # Keras's accumulation fails under MirroredStrategy; this one works there (module docstring)
    if steps:
        install_replica_apply_gradients(inner)
    schedule = learning_rate_schedule(inner)
    if isinstance(schedule, UpdateStepSchedule):
        schedule = schedule.schedule  # reconfigured: wrap the user's schedule once, not twice
    if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        inner.learning_rate = UpdateStepSchedule(schedule, plan.steps) if steps else schedule
    logger.info(
        "gradient accumulation: %d micro-batch(es) of %d per update (effective batch %d)",
        plan.steps,
        plan.batch_size,
        plan.effective_batch_size,
    )
    return plan


def make_optimizer(cls_or_name, effective_batch_size: int, batch_size: int, **kwargs):
    """Build a Keras optimizer that accumulates gradients up to an effective batch size.

    Args:
        cls_or_name: An optimizer class (``keras.optimizers.Adam``) or a name Keras knows
            ("adam", "sgd", "AdamW", ...).
        effective_batch_size: Examples per optimizer update.
        batch_size: Examples per micro-batch.
        **kwargs: Constructor arguments (``learning_rate`` may be a schedule in real updates).
            Defaults to none: the optimizer's own defaults.

    Returns:
        The optimizer, configured by :func:`configure_accumulation`.

    Raises:
        InvalidArgumentError: An unknown optimizer name or class, or invalid sizes.

    Example:
        >>> optimizer = make_optimizer("adam", 512, 128, learning_rate=1e-3)
        >>> optimizer.gradient_accumulation_steps
        4
    """
    AccumulationPlan.from_sizes(effective_batch_size, batch_size)  # validate before building
    if "gradient_accumulation_steps" in kwargs:
        raise InvalidArgumentError(
            "make_optimizer sets gradient_accumulation_steps from effective_batch_size and "
            f"batch_size; do not pass it (got {kwargs['gradient_accumulation_steps']!r})"
        )
    if isinstance(cls_or_name, str):
        try:
            cls = type(keras.optimizers.get(cls_or_name))
        except ValueError as error:
            raise InvalidArgumentError(
                f"unknown optimizer name {cls_or_name!r}; use a keras.optimizers class or a "
                "name such as 'sgd', 'adam', 'adamw', 'rmsprop'"
            ) from error
    elif isinstance(cls_or_name, type) and issubclass(cls_or_name, keras.optimizers.Optimizer):
        cls = cls_or_name
    else:
        raise InvalidArgumentError(
            f"cls_or_name must be a keras.optimizers.Optimizer subclass or a name; got "
            f"{cls_or_name!r}"
        )
    optimizer = cls(**kwargs)
    configure_accumulation(optimizer, effective_batch_size, batch_size)
    return optimizer
