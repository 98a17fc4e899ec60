"""The decisions of a :class:`tfopt.Run`, made by a pure planner from its config and the facts.

``plan_run(config, facts)`` imports no TensorFlow and reads nothing: the facts (replicas,
workers, the epoch's length, a cached trial, ...) are gathered by ``Run`` and passed in, so
every rule here is tested on hand-made facts.
"""

from __future__ import annotations

import dataclasses
import enum

from tfopt.errors import InvalidArgumentError
from tfopt.run.config import AUTO, TRIAL, BatchNorm, RunConfig

__all__ = ["RunFacts", "RunPlan", "SpeSource", "calls_that_divide", "divide_epoch",
           "plan_jit_compile", "plan_run"]

# The trial's middle candidate (1, 4, 16): where no trial runs, 4 steps per call take most of
# the per-call overhead away without holding a long call between callbacks.
SPE_UNTRIED = 4


class SpeSource(str, enum.Enum):
    """Where ``steps_per_execution`` comes from."""

    GIVEN = "given"
    CACHED = "cached"  # an earlier trial's, read from the workdir
    TRIAL = "trial"  # timed by run.compile
    UNTRIED = "untried"  # SPE_UNTRIED: no trial could pay for itself or agree across workers


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """What ``Run`` read before planning.

    Attributes:
        replicas: Replicas in sync of the built strategy.
        workers: Training workers of the cluster.
        chief: This process writes the run's files (one worker, or the chief of several).
        policy: The precision policy chosen or given.
        policy_reason: Why.
        steps_per_epoch: Batches in one pass of the training split (None when unknown).
        trial_steps: Steps the steps_per_execution trial runs.
        trial_possible: The trial can feed this model: square images of a known size.
        cached_steps_per_execution: A trial's choice read from the workdir for the same
            model, batch and policy; None when there is none.
        has_validation: The source has a validation split (or one was given).
        resume_epoch: Epochs the workdir's newest backup holds (0 without one).
        resume_steps: Steps of the next epoch that backup holds besides (taken mid-epoch on
            SIGTERM; else 0).
        resume_from: The second location (``copy_to``) when that backup is there; None when
            it is in the workdir.
        dataset_batch: The global batch a batched ``tf.data.Dataset`` brings and keeps (None:
            not such a source, or its batch is not known before it is read).
        keeps_batches: The source is a batched dataset whose batches are kept as they come.
        validation_reason: What the validation data is, in words, where ``Run`` read it from
            the source (arrays held out, a dataset given); None: the planner's own words.
        epoch_is_pass: An epoch is one pass of the data, as ``model.fit`` makes it (arrays, a
            DataFrame, a dataset of known length), so it must end where the pass ends; False
            for shards, whose epoch is a count of steps of one shuffled stream.
        variable_axes: Where the training batches' shape may change from batch to batch
            (:func:`tfopt.tune.xla.variable_axes`); () when it cannot.
        cached_jit_compile: An earlier XLA trial's choice for the same model, batch, policy
            and steps_per_execution, read from the workdir; None when there is none.
        copy_refused: Why ``keras.models.clone_model`` cannot copy the model (the trials
            time copies: a custom layer whose ``get_config`` does not give back its
            constructor's arguments, say); None when it can, or before a model is compiled.
    """

    replicas: int
    workers: int
    chief: bool
    policy: str
    policy_reason: str
    steps_per_epoch: int | None
    trial_steps: int
    trial_possible: bool = True
    cached_steps_per_execution: int | None = None
    has_validation: bool = False
    resume_epoch: int = 0
    resume_steps: int = 0
    resume_from: str | None = None
    dataset_batch: int | None = None
    keeps_batches: bool = False
    validation_reason: str | None = None
    epoch_is_pass: bool = False
    variable_axes: tuple[str, ...] = ()
    cached_jit_compile: bool | None = None
    copy_refused: str | None = None


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """Every decision of a run, typed; ``Run.describe()`` renders it."""

    global_batch: int | None  # None: a batched dataset's own, not known before it is read
    replicas: int
    workers: int
    policy: str
    policy_reason: str
    batch_norm: BatchNorm
    batch_norm_reason: str
    accumulation_steps: int
    accumulation_reason: str
    steps_per_execution: int | None  # None: run.compile times the trial
    spe_source: SpeSource
    spe_reason: str
    jit_compile: bool | str | None  # None: run.compile times XLA; "auto": Keras's own rule
    xla_reason: str
    validation: bool
    validation_reason: str
    backups: bool
    monitor: str
    resume_epoch: int
    resume_steps: int = 0  # steps of epoch resume_epoch + 1 the backup holds (SIGTERM)


def _batch_norm(config: RunConfig, facts: RunFacts) -> tuple[BatchNorm, str]:
    asked = BatchNorm(config.batch_norm)
    if asked is BatchNorm.FUSED and facts.replicas > 1:
        raise InvalidArgumentError(
            f"batch_norm='fused' with {facts.replicas} replicas: the fused kernel keeps "
            "per-replica statistics; use 'synchronized' (or 'auto') under several replicas")
    if asked is not BatchNorm.AUTO:
        return asked, "given"
    if facts.replicas > 1:
        return BatchNorm.SYNCHRONIZED, (f"{facts.replicas} replicas: statistics over the global "
                                        "batch, the same on every replica and worker")
    return BatchNorm.FUSED, ("one replica: TensorFlow's fused kernel, which Keras 3 does not "
                             "use (one op per layer instead of a dozen passes over the "
                             "activations)")


def _accumulation(config: RunConfig, global_batch: int | None) -> tuple[int, str]:
    effective = config.effective_batch_size
    if effective is None:
        return 1, "none: one optimizer update per step"
    if global_batch is None:
        raise InvalidArgumentError(
            f"effective_batch_size={effective}: needs a known global batch, and the dataset's "
            "own batches are not known before it is read; pass batch_size= (the dataset is "
            "then re-batched) or batch it with drop_remainder=True")
    if effective % global_batch:
        raise InvalidArgumentError(
            f"effective_batch_size={effective}: expected a multiple of the global batch "
            f"{global_batch} (batch_size x replicas), e.g. {global_batch * max(1, effective // global_batch)}")
    steps = effective // global_batch
    return steps, (f"{steps} micro-batches of {global_batch} per update (effective batch "
                   f"{effective})" if steps > 1 else "none: the effective batch is one step's")


def calls_that_divide(steps_per_execution: int, steps_per_epoch: int | None) -> int:
    """The largest ``steps_per_execution`` up to the one given that divides the epoch.

    Keras runs an epoch as whole calls: on a stream that goes on, a call that crosses the
    epoch's end trains batches of the next pass, so every later epoch starts off its pass and
    its validation comes at another point than ``model.fit``'s.
    """
    if not steps_per_epoch:
        return steps_per_execution
    return next(calls for calls in range(min(steps_per_execution, steps_per_epoch), 0, -1)
                if steps_per_epoch % calls == 0)


def divide_epoch(spe: int | None, source: SpeSource, reason: str,
                 facts: RunFacts) -> tuple[int | None, SpeSource, str]:
    """``spe`` as :func:`calls_that_divide` makes it where an epoch is a pass, and why."""
    if spe is None or not facts.epoch_is_pass:
        return spe, source, reason
    whole = calls_that_divide(spe, facts.steps_per_epoch)
    if whole == spe:
        return spe, source, reason
    return whole, source, (f"{reason}; {spe} lowered to {whole}, which divides the epoch's "
                           f"{facts.steps_per_epoch} steps, so each epoch is one pass of the "
                           "data as in model.fit")


def _steps_per_execution(config: RunConfig, facts: RunFacts) -> tuple[int | None, SpeSource, str]:
    return divide_epoch(*_wanted_steps_per_execution(config, facts), facts)


def _wanted_steps_per_execution(config: RunConfig,
                                facts: RunFacts) -> tuple[int | None, SpeSource, str]:
    if config.steps_per_execution != AUTO:
        return config.steps_per_execution, SpeSource.GIVEN, "given"
    if facts.cached_steps_per_execution is not None:
        return (facts.cached_steps_per_execution, SpeSource.CACHED,
                "an earlier trial's choice for this model, batch and policy (from the workdir)")
    if facts.copy_refused is not None:
        return SPE_UNTRIED, SpeSource.UNTRIED, (
            f"{SPE_UNTRIED}, untried: {_COPY_REFUSED.format(facts.copy_refused)}")
    if facts.workers > 1:
        return SPE_UNTRIED, SpeSource.UNTRIED, (
            f"{SPE_UNTRIED}, untried: a trial under several workers would time collective "
            "steps on each, and the workers could choose differently")
    if not facts.trial_possible:
        return SPE_UNTRIED, SpeSource.UNTRIED, (
            f"{SPE_UNTRIED}, untried: the trial feeds square images, and this run's data "
            "is not")
    steps = facts.steps_per_epoch
    if steps is None or steps < facts.trial_steps:
        length = "of unknown length" if steps is None else f"of {steps} steps"
        return SPE_UNTRIED, SpeSource.UNTRIED, (
            f"{SPE_UNTRIED}, untried: the trial takes {facts.trial_steps} steps, more than an "
            f"epoch {length}")
    return None, SpeSource.TRIAL, "timed by a trial at compile (1, 4 and 16 steps per call)"


_COPY_REFUSED = ("the trials time copies of the model, and keras.models.clone_model cannot copy "
                 "it ({}); give the custom layer a get_config that returns its constructor's "
                 "arguments")

KERAS_AUTO_XLA = ("Keras's 'auto': XLA on a GPU without a strategy where every layer "
                  "supports it, else off")


def plan_jit_compile(config: RunConfig,
                     facts: RunFacts) -> tuple[bool | str | None, str]:
    """``jit_compile`` and why: given, off for batches that change shape, an earlier trial's,
    Keras's "auto" where no trial pays (unless a trial was asked for) or can run, else None
    (a trial at compile)."""
    if config.jit_compile not in (AUTO, TRIAL):
        return config.jit_compile, "given"
    if facts.variable_axes:
        shown = ", ".join(facts.variable_axes[:3])
        return False, (f"off: the batches change shape ({shown}), and XLA compiles a step "
                       "for each shape it meets")
    if facts.cached_jit_compile is not None:
        return facts.cached_jit_compile, ("an earlier trial's choice for this model, batch, "
                                          "policy and steps per call (from the workdir)")
    if facts.copy_refused is not None:
        return AUTO, f"untried, {KERAS_AUTO_XLA}: {_COPY_REFUSED.format(facts.copy_refused)}"
    if facts.workers > 1:
        return AUTO, (f"untried, {KERAS_AUTO_XLA}: a trial under several workers would time "
                      "collective steps on each, and the workers could choose differently")
    if not facts.epoch_is_pass:
        return AUTO, (f"untried, {KERAS_AUTO_XLA}: the trial times the user's own batches, "
                      "and shards' trial feeds synthetic images")
    if config.jit_compile == TRIAL:
        return None, ("timed by a trial at compile, with and without XLA (asked for: "
                      "jit_compile='trial')")
    if facts.steps_per_epoch is None or facts.steps_per_epoch < facts.trial_steps:
        return AUTO, (f"untried, {KERAS_AUTO_XLA}: no trial pays for itself in an epoch "
                      "this short (jit_compile='trial' times it all the same)")
    return None, "timed by a trial at compile, with and without XLA"


def plan_run(config: RunConfig, facts: RunFacts) -> RunPlan:
    """Decide every choice of a run from its config and the facts.

    Raises:
        tfopt.errors.InvalidArgumentError: A combination that cannot work (named): a fused batch norm
            under several replicas, an effective batch that is not a multiple of the global
            batch.
    """
    global_batch = (facts.dataset_batch if facts.keeps_batches
                    else config.per_replica_batch * facts.replicas)
    batch_norm, batch_norm_reason = _batch_norm(config, facts)
    accumulation, accumulation_reason = _accumulation(config, global_batch)
    spe, spe_source, spe_reason = _steps_per_execution(config, facts)
    jit_compile, xla_reason = plan_jit_compile(config, facts)
    if config.validation is None:
        validation, validation_reason = False, "none asked (validation=None)"
    elif facts.validation_reason is not None:
        validation, validation_reason = True, facts.validation_reason
    elif not (isinstance(config.validation, str) and config.validation == AUTO):
        validation, validation_reason = True, f"{config.validation}"
    elif facts.has_validation:
        validation, validation_reason = True, "the source's validation split"
    else:
        validation, validation_reason = False, (
            "none: the source has no validation split (convert with --val-fraction, or pass "
            "validation= another dataset); the best model is chosen by the training loss")
    return RunPlan(
        global_batch=global_batch,
        replicas=facts.replicas,
        workers=facts.workers,
        policy=facts.policy,
        policy_reason=facts.policy_reason,
        batch_norm=batch_norm,
        batch_norm_reason=batch_norm_reason,
        accumulation_steps=accumulation,
        accumulation_reason=accumulation_reason,
        steps_per_execution=spe,
        spe_source=spe_source,
        spe_reason=spe_reason,
        jit_compile=jit_compile,
        xla_reason=xla_reason,
        validation=validation,
        validation_reason=validation_reason,
        backups=config.workdir is not None,
        monitor="val_loss" if validation else "loss",
        resume_epoch=facts.resume_epoch,
        resume_steps=facts.resume_steps,
    )
