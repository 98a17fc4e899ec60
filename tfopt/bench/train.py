"""``tfopt bench train``: end-to-end ``model.fit`` the default Keras way beside the tfopt way.

Two methods train the same built-in model (:func:`tfopt.models.build_model`) on the same shards for the
same epochs, from the same initial weights, alternating (baseline, tfopt, baseline, ...):

- ``baseline``: float32; :func:`tfopt.bench.baselines.naive_dataset` (``TFRecordDataset ->
  shuffle(1000) -> map(parse + decode + central crop + resize) -> batch``, one thread, no
  prefetch); ``steps_per_execution=1``.
- ``tfopt``: a :class:`tfopt.Run` (its policy, pipeline, fused batch normalisation and
  ``steps_per_execution``), with central crops so that both methods train on the same pixels.

This module keeps only the baseline and the comparison: the tfopt way is ``Run``'s.

Each run reports examples/s per epoch, the input-bound share and the validation accuracy.
What is measured and why: ``docs/bench.md``.

Example:
    >>> report = run_train_bench(TrainBenchSettings("shards/", epochs=3))
    >>> print(report.describe())
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import statistics
from collections.abc import Callable

import keras
import tensorflow as tf

from tfopt._system import usable_cores
from tfopt._validate import choice, flag, optional_whole_number, whole_number
from tfopt.bench.baselines import naive_dataset
from tfopt.data.pipeline import PipelineBuilder
from tfopt.data.plan import CacheMode
from tfopt.data.plan_types import pass_records
from tfopt.data.source import PipelineSource
from tfopt.errors import InvalidArgumentError, MissingSplitError
from tfopt.gpu.peak import PeakFlops
from tfopt.models import (
    DEFAULT_IMAGE_SIZE,
    LEARNING_RATE,
    ModelName,
    build_model,
    compile_model,
)
from tfopt.run.runner import Run
from tfopt.train.callbacks import InputProbe, training_callbacks
from tfopt.train.precision import enable_policy
from tfopt.tune.steps_per_execution import (
    SPE_TOLERANCE,
    EpochClock,
    quiet_fit_warnings,
    trial_steps,
)

logger = logging.getLogger("tfopt")

__all__ = [
    "METHODS",
    "MethodResult",
    "RunResult",
    "TrainBenchReport",
    "TrainBenchSettings",
    "run_train_bench",
]

METHODS = ("baseline", "tfopt")
SPE_TRIAL_COST_STEPS = trial_steps()  # what the steps_per_execution trial runs
SWEEP_EPOCHS = 2
SWEEP_MIN_STEPS = 10  # per epoch: fewer, and a sweep point is a handful of step times


@dataclasses.dataclass(frozen=True)
class TrainBenchSettings:
    """What both methods train, and how often.

    Attributes:
        source: A tfopt dataset folder (with a validation split for the accuracy; without one
            the training split is evaluated, and the report says so).
        model: ``"cnn"`` or ``"mlp"`` (:func:`tfopt.models.build_model`). Defaults to "cnn".
        image_size: Side of the square training images, px. Defaults to 96.
        batch_size: Examples per step for the comparison. Defaults to 64.
        epochs: Epochs per run (the same for both methods). Defaults to 2.
        repeats: Runs per method, alternating. Defaults to 2.
        batch_sizes: Batch sizes for tfopt's throughput sweep (one run of two epochs each; the
            second counts: the first compiles the model). Defaults to () (no sweep).
        steps_per_execution: tfopt's ``steps_per_execution``. Defaults to None: tuned by a
            trial of ``SPE_CANDIDATES`` (:mod:`tfopt.tune.steps_per_execution`), or 1 when
            the whole comparison is shorter than the trial (``max_steps``), which it could not
            pay back.
        policy: tfopt's precision policy name. Defaults to None: ``choose_policy()``.
        seed: Weights, shuffling and trial data. Defaults to 0.
        max_steps: Cap on steps per epoch for both methods (quick runs). When it cuts a fit
            to less than one pass over the training records, tfopt's pipeline goes without
            its cache (it would only be filled in part and discarded), and the report says
            so. Defaults to None.
        fuse_batch_norm: tfopt runs the model's batch normalisation with TensorFlow's fused
            kernel (:func:`tfopt.fuse_batch_norm`). Defaults to True.
    """

    source: object
    model: str = ModelName.CNN.value
    image_size: int = DEFAULT_IMAGE_SIZE
    batch_size: int = 64
    epochs: int = 2
    repeats: int = 2
    batch_sizes: tuple[int, ...] = ()
    steps_per_execution: int | None = None
    policy: str | None = None
    seed: int = 0
    max_steps: int | None = None
    fuse_batch_norm: bool = True

    def __post_init__(self):
        object.__setattr__(self, "model", choice(ModelName, self.model, "model").value)
        for name in ("image_size", "batch_size", "epochs", "repeats"):
            object.__setattr__(self, name, whole_number(getattr(self, name), name, 1))
        object.__setattr__(self, "batch_sizes", tuple(
            whole_number(size, "batch_sizes", 1) for size in self.batch_sizes))
        for name in ("steps_per_execution", "max_steps"):
            object.__setattr__(self, name, optional_whole_number(getattr(self, name), name, 1))
        object.__setattr__(self, "seed", whole_number(self.seed, "seed"))
        object.__setattr__(self, "fuse_batch_norm", flag(self.fuse_batch_norm, "fuse_batch_norm"))

    def replace(self, **changes) -> TrainBenchSettings:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One ``fit`` of one method.

    Attributes:
        epoch_rates: Examples/s of each epoch (training wall time, compile included in the first).
        epoch_examples: Examples trained in each epoch.
        epoch_seconds: Wall seconds of each epoch's training.
        input_bound_percent: Share of step time waiting for input, per epoch (warm-up excluded).
        val_accuracy: Accuracy on the evaluation split after the last epoch (NaN when not
            evaluated, as in the sweep).
        val_loss: Loss on the evaluation split after the last epoch.
        mfu: Model FLOPs utilisation of each epoch (empty without a peak for the device).
    """

    epoch_rates: tuple[float, ...]
    epoch_examples: tuple[int, ...]
    epoch_seconds: tuple[float, ...]
    input_bound_percent: tuple[float, ...]
    val_accuracy: float
    val_loss: float
    mfu: tuple[float, ...] = ()

    @property
    def steady_rate(self) -> float:
        """Examples/s over the epochs after the first (the first one alone if there is one)."""
        if len(self.epoch_rates) == 1:
            return self.epoch_rates[0]
        return sum(self.epoch_examples[1:]) / sum(self.epoch_seconds[1:])

    @property
    def overall_rate(self) -> float:
        """Examples/s over the whole fit, compile and cache fill included."""
        return sum(self.epoch_examples) / sum(self.epoch_seconds)

    @property
    def steady_input_bound(self) -> float:
        later = self.input_bound_percent[1:] or self.input_bound_percent
        return statistics.fmean(later) if later else math.nan

    @property
    def steady_mfu(self) -> float:
        """Mean MFU of the epochs after the first (the first alone if there is one)."""
        later = self.mfu[1:] or self.mfu
        return statistics.fmean(later) if later else math.nan

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "steady_rate": self.steady_rate,
                "overall_rate": self.overall_rate}


def _percent(value: float, decimals: int = 1) -> str:
    """``12.3 %``, or ``n/a`` where an epoch had no step after the warm-up to measure."""
    return "n/a" if math.isnan(value) else f"{value:.{decimals}f} %"


def _median_spread(values) -> dict:
    values = list(values)
    return {"median": statistics.median(values), "spread": [min(values), max(values)]}


@dataclasses.dataclass(frozen=True)
class MethodResult:
    """Every run of one method, with medians over the runs."""

    method: str
    runs: tuple[RunResult, ...]
    policy: str
    steps_per_execution: int
    pipeline: str  # one line: what feeds the model
    batch_norm: str = "Keras"  # how the model's batch normalisation runs

    def median(self, what: str = "steady_rate") -> float:
        """Median over the runs of ``steady_rate``, ``overall_rate``, ``first_epoch_rate``,
        ``val_accuracy``, ``steady_input_bound`` or ``steady_mfu``."""
        return statistics.median(self._values(what))

    def spread(self, what: str = "steady_rate") -> tuple[float, float]:
        values = self._values(what)
        return min(values), max(values)

    def _values(self, what: str) -> list[float]:
        if what == "first_epoch_rate":
            return [run.epoch_rates[0] for run in self.runs]
        return [getattr(run, what) for run in self.runs]

    def to_json(self) -> dict:
        return {
            "policy": self.policy,
            "steps_per_execution": self.steps_per_execution,
            "pipeline": self.pipeline,
            "batch_norm": self.batch_norm,
            **{what: _median_spread(self._values(what))
               for what in ("steady_rate", "first_epoch_rate", "overall_rate",
                            "steady_input_bound", "val_accuracy", "steady_mfu")},
            "runs": [run.to_json() for run in self.runs],
        }


@dataclasses.dataclass(frozen=True)
class TrainBenchReport:
    """The outcome of :func:`run_train_bench`.

    Attributes:
        settings: What was run.
        results: ``{"baseline": MethodResult, "tfopt": MethodResult}``.
        policy_reason: Why tfopt's policy was chosen.
        spe_trial: Candidate ``steps_per_execution`` -> examples/s of the trial (empty when
            given).
        pipeline_choices: tfopt's pipeline choices, described.
        sweep: Batch size -> tfopt's steady examples/s (empty without ``batch_sizes``).
        examples_per_epoch: Training examples in an epoch (of the baseline: one pass).
        eval_split: The split the accuracy was measured on.
        cores: CPU cores usable by this process.
        load_average: The 1-minute load average when the benchmark started.
        tfopt_cached: tfopt's pipeline had a cache in the comparison (filled in its first
            epoch). Defaults to True.
        notes: What the runs did otherwise than asked, and why. Defaults to ().
        peak: The device's peak FLOPs the MFU is of; None where there is none (a GPU: no
            table yet).
    """

    settings: TrainBenchSettings
    results: dict[str, MethodResult]
    policy_reason: str
    spe_trial: dict[int, float]
    pipeline_choices: str
    sweep: dict[int, float]
    examples_per_epoch: int
    eval_split: str
    cores: int
    load_average: float
    tfopt_cached: bool = True
    notes: tuple[str, ...] = ()
    peak: PeakFlops | None = None

    def ratio(self, what: str = "steady_rate") -> float:
        """tfopt's median over the baseline's for ``what`` (see :meth:`MethodResult.median`)."""
        return self.results["tfopt"].median(what) / self.results["baseline"].median(what)

    def to_json(self) -> dict:
        settings = dataclasses.asdict(self.settings)
        settings["source"] = str(settings["source"])
        return {
            "settings": settings,
            "examples_per_epoch": self.examples_per_epoch,
            "eval_split": self.eval_split,
            "cores": self.cores,
            "load_average": self.load_average,
            "methods": {name: result.to_json() for name, result in self.results.items()},
            "ratios": {what: self.ratio(what)
                       for what in ("steady_rate", "first_epoch_rate", "overall_rate")},
            "policy_reason": self.policy_reason,
            "steps_per_execution_trial": {str(k): v for k, v in self.spe_trial.items()},
            "pipeline_choices": self.pipeline_choices,
            "sweep": {str(k): v for k, v in self.sweep.items()},
            "notes": list(self.notes),
            "peak": None if self.peak is None else {
                "device": self.peak.device, "per_second": dict(self.peak.per_second),
                "basis": self.peak.basis},
        }

    def describe(self) -> str:
        s = self.settings
        # with one epoch, the steady column is that epoch, compile and cache fill included
        steady_label = "after epoch 1" if s.epochs > 1 else "(1 epoch)    "
        lines = [
            f"training benchmark: {s.model} at {s.image_size}x{s.image_size}, batch "
            f"{s.batch_size}, {s.epochs} epoch(s) of {self.examples_per_epoch} examples, median "
            f"of {s.repeats} alternating run(s), {self.cores} cores (load {self.load_average:.2f} "
            f"at start); source {s.source}",
            f"method     ex/s {steady_label} (spread)   epoch 1 ex/s (spread)   whole fit   "
            f"input-bound   {self.eval_split} accuracy (spread)",
        ]
        for name, result in self.results.items():
            low, high = result.spread()
            first_low, first_high = result.spread("first_epoch_rate")
            acc_low, acc_high = result.spread("val_accuracy")
            lines.append(
                f"{name:9s}  {result.median():8.1f} ({low:7.1f}-{high:7.1f})   "
                f"{result.median('first_epoch_rate'):7.1f} ({first_low:6.1f}-{first_high:6.1f})"
                f"   {result.median('overall_rate'):8.1f}   "
                f"{_percent(result.median('steady_input_bound')):>11s}   "
                f"{result.median('val_accuracy'):.3f} ({acc_low:.3f}-{acc_high:.3f})")
        included = "compile and cache fill" if self.tfopt_cached else "compile"
        if s.epochs > 1:
            lines.append(f"tfopt/baseline: {self.ratio():.2f}x after epoch 1, "
                         f"{self.ratio('first_epoch_rate'):.2f}x in epoch 1 ({included} "
                         f"included), {self.ratio('overall_rate'):.2f}x over the whole fit")
        else:
            lines.append(f"tfopt/baseline: {self.ratio('first_epoch_rate'):.2f}x in the one "
                         f"epoch ({included} included; --epochs 3 shows the rate after it)")
        for name, result in self.results.items():
            lines.append(f"{name}: policy {result.policy}, steps_per_execution "
                         f"{result.steps_per_execution}, batch norm {result.batch_norm}, "
                         f"{result.pipeline}")
        if self.peak is not None:
            mfu = ", ".join(f"{name} {_percent(100 * result.median('steady_mfu'), 2)}"
                            for name, result in self.results.items())
            lines.append(f"MFU {steady_label.strip()}: {mfu} of the peak of {self.peak.device}"
                         f" in each method's compute dtype ({self.peak.basis})")
        lines.append(f"policy: {self.policy_reason}")
        if self.spe_trial:
            trial = ", ".join(f"{k}: {v:.1f}" for k, v in self.spe_trial.items())
            lines.append(f"steps_per_execution trial (examples/s on one in-memory batch): {trial}; "
                         f"smallest within {SPE_TOLERANCE:.0%} of the fastest kept")
        if self.sweep:
            best = max(self.sweep, key=self.sweep.get)
            lines.append("tfopt batch-size sweep   batch   examples/s")
            lines.extend(f"                         {size:5d}   {rate:10.1f}"
                         f"{'   best' if size == best else ''}"
                         for size, rate in self.sweep.items())
        lines.extend(f"note: {note}" for note in self.notes)
        lines.append("tfopt's pipeline choices:")
        lines.extend("  " + line for line in self.pipeline_choices.splitlines())
        return "\n".join(lines)


# -- measuring -------------------------------------------------------------------------------


def _clear_session() -> None:
    """Free the last run's models; keep the global policy (clear_session resets it to float32)."""
    policy = keras.mixed_precision.global_policy()
    keras.backend.clear_session(free_memory=True)
    keras.mixed_precision.set_global_policy(policy)


@dataclasses.dataclass
class _Context:
    """What every run shares: sources, evaluation data, tfopt's policy and settings."""

    settings: TrainBenchSettings
    classes: int
    policy: str
    steps_per_execution: int
    evaluation: tf.data.Dataset
    source: PipelineSource  # what the baseline reads
    peak: PeakFlops | None  # the MFU's, as tfopt's Run takes it


def _tfopt_run(settings: TrainBenchSettings, batch_size: int, epochs: int, policy: str,
               spe: int | str) -> tuple[Run, str | None]:
    """tfopt's :class:`~tfopt.run.Run` for a fit of ``epochs`` epochs at ``batch_size``, and
    why its pipeline runs without its cache (None when it does not).

    Its cache is "auto", unless ``max_steps`` cuts the fit to less than one pass over the
    records: Keras reads them through one iterator, so such a fit never reads from a cache, and
    tf.data discards the part filled (logging "did not fully read the dataset being cached");
    the pipeline then runs without one.
    """
    def make(cache):
        # central crops (not random ones): the two methods must train on the same pixels
        return Run(settings.source, image_size=settings.image_size, batch_size=batch_size,
                   precision=policy, steps_per_execution=spe, cache=cache, augment=False,
                   batch_norm="fused" if settings.fuse_batch_norm else "keras",
                   seed=settings.seed, validation=None)

    run = make("auto")
    plan = run.train_pipeline.plan
    steps, records = _steps(settings, run.steps_per_epoch), pass_records(plan)
    if (not settings.max_steps or steps is None or records is None
            or plan.cache is CacheMode.NONE or steps * epochs * batch_size >= records):
        return run, None
    return make(False), (
        f"--max-steps {steps} x {epochs} epoch(s) at batch {batch_size} read "
        f"{steps * epochs * batch_size:,} of the {records:,} training examples of one pass, and "
        "a cache is filled only by a pass read to its end: it would serve nothing and be "
        "discarded after each fit")


def _steps(settings: TrainBenchSettings, pass_steps: int | None) -> int | None:
    """tfopt's steps per epoch: a pass, or ``max_steps`` if fewer."""
    if settings.max_steps:
        return min(pass_steps or settings.max_steps, settings.max_steps)
    return pass_steps


def _tfopt_model(run: Run, settings: TrainBenchSettings, classes: int) -> keras.Model:
    """The built-in model built and compiled by ``run`` (as compile_model does: Adam at its
    learning rate, sparse cross-entropy on logits)."""
    with run.scope():
        model = build_model(settings.model, settings.image_size, classes)
    run.compile(model, keras.optimizers.Adam(LEARNING_RATE),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"])
    return model


def _train_once(ctx: _Context, method: str, batch_size: int, epochs: int,
                evaluate: bool = True) -> tuple[RunResult, str | None]:
    """One fit of ``method``, and why tfopt's pipeline ran without its cache in it (None when
    it had its cache, and for the baseline): see :func:`_tfopt_run`."""
    settings = ctx.settings
    uncached = None
    keras.utils.set_random_seed(settings.seed)  # same initial weights for every run
    with quiet_fit_warnings():
        if method == "baseline":
            history, clock, model = _baseline_fit(ctx, batch_size, epochs)
        else:
            run, uncached = _tfopt_run(settings, batch_size, epochs, ctx.policy,
                                       ctx.steps_per_execution)
            model = _tfopt_model(run, settings, ctx.classes)
            clock = EpochClock(run.probe)
            history = run.fit(model, epochs=epochs,
                              steps_per_epoch=_steps(settings, run.steps_per_epoch),
                              callbacks=[clock], verbose=0)
        accuracy = loss = math.nan
        if evaluate:
            scores = model.evaluate(ctx.evaluation, verbose=0, return_dict=True)
            accuracy, loss = float(scores["accuracy"]), float(scores["loss"])
    _clear_session()
    stalls = tuple(float(v) for v in history.history.get("input_bound_percent", []))
    mfu = tuple(float(v) for v in history.history.get("mfu", []))
    return RunResult(
        epoch_rates=tuple(e / s for e, s in zip(clock.examples, clock.seconds, strict=True)),
        epoch_examples=tuple(clock.examples),
        epoch_seconds=tuple(clock.seconds),
        input_bound_percent=stalls,
        val_accuracy=accuracy,
        val_loss=loss,
        mfu=mfu,
    ), uncached


def _baseline_fit(ctx: _Context, batch_size: int, epochs: int):
    """The plain Keras way: float32, the naive pipeline, one step per call, no rewrites."""
    settings = ctx.settings
    dataset = naive_dataset(ctx.source, settings.image_size, batch_size, pixels="uint8",
                            shuffle=True)
    if settings.max_steps:
        # a pass of max_steps batches per epoch, restarted each epoch
        dataset = dataset.take(settings.max_steps)
    probe = InputProbe()  # outside the policy and any scope: plain CPU variables
    clock = EpochClock(probe)
    with enable_policy("float32"):
        model = build_model(settings.model, settings.image_size, ctx.classes)
        compile_model(model, steps_per_execution=1, metrics=["accuracy"])
        history = model.fit(probe.instrument(dataset), epochs=epochs, verbose=0,
                            callbacks=[*training_callbacks(batch_size, probe, gpu=False,
                                                           peak=ctx.peak), clock])
    return history, clock, model


def run_train_bench(settings: TrainBenchSettings,
                    progress: Callable[[str], None] | None = None) -> TrainBenchReport:
    """Train the built-in model both ways, alternating, and report speed and accuracy.

    See the module docstring for the methods and what is measured. The global precision policy
    is the same afterwards as before.

    Args:
        settings: What to run.
        progress: Called with one line per step of the benchmark (the CLI prints them on
            stderr). Defaults to None.

    Returns:
        A :class:`TrainBenchReport`.

    Raises:
        tfopt.errors.DatasetError: The source has no readable shards.
        tfopt.errors.InvalidArgumentError: The source has no images or no labels.

    Example:
        >>> report = run_train_bench(TrainBenchSettings("shards/", epochs=3))
        >>> print(report.describe())
    """
    say = progress or (lambda line: None)
    load = os.getloadavg()[0]
    first, uncached = _tfopt_run(settings, settings.batch_size, settings.epochs,
                                 settings.policy or "auto", settings.steps_per_execution or "auto")
    notes = [f"tfopt's pipeline runs without its cache: {uncached}; runs of whole epochs (no "
             "--max-steps, or more --epochs) measure it"] if uncached else []
    train_pipeline = first.train_pipeline
    source = train_pipeline.source
    if source.image_key is None or source.label_key is None:
        raise InvalidArgumentError(f"{settings.source}: the training benchmark needs images "
                                   "with class labels (a dataset from 'tfopt convert' of an "
                                   "image folder)")
    classes = first.num_classes
    try:
        eval_builder = PipelineBuilder(settings.source, batch_size=settings.batch_size,
                                       image_size=settings.image_size, split="validation")
        eval_split = "validation"
    except MissingSplitError:  # no validation split: the training one, said in the report
        eval_builder = PipelineBuilder(settings.source, batch_size=settings.batch_size,
                                       image_size=settings.image_size, split="train")
        eval_split = "train"
        logger.warning("%s has no validation split: accuracy is measured on the training split",
                       settings.source)

    policy, reason = first.plan.policy, first.plan.policy_reason
    peak = first.peak  # MFU's denominator, the Run's
    say(f"tfopt policy {policy}: {reason}")

    trial: dict[int, float] = {}
    spe = settings.steps_per_execution
    fit_steps = (settings.max_steps * settings.epochs * settings.repeats
                 if settings.max_steps else None)
    if spe is None and fit_steps is not None and fit_steps < SPE_TRIAL_COST_STEPS:
        # the trial runs SPE_TRIAL_COST_STEPS steps (and compiles a model per candidate):
        # more than tfopt's whole share of so short a comparison
        spe = 1
        say(f"steps_per_execution 1, no trial: tfopt's runs take {fit_steps} steps in all, "
            f"fewer than the trial's {SPE_TRIAL_COST_STEPS} (give --steps-per-execution)")
    if spe is None:
        # Run's own rule: a trial of 1, 4 and 16 where an epoch pays for it, else untried
        say(f"steps_per_execution: {first.plan.spe_reason} ...")
        spe = int(_tfopt_model(first, settings, classes).steps_per_execution)
        trial = first.steps_per_execution_trial
        _clear_session()
        if trial:
            say("steps_per_execution trial: " + ", ".join(f"{k}: {v:.1f} ex/s"
                                                          for k, v in trial.items())
                + f"; chosen {spe}")
    del first

    ctx = _Context(settings, classes, policy, spe, eval_builder.build(), source,
                   peak)
    runs: dict[str, list[RunResult]] = {method: [] for method in METHODS}
    for repeat in range(settings.repeats):
        for method in METHODS:
            result, _ = _train_once(ctx, method, settings.batch_size, settings.epochs)
            runs[method].append(result)
            say(f"run {repeat + 1}/{settings.repeats} {method:8s} "
                + " ".join(f"{rate:7.1f}" for rate in result.epoch_rates)
                + " examples/s per epoch, input-bound "
                + " ".join(_percent(p, 0) for p in result.input_bound_percent)
                + f", {eval_split} accuracy {result.val_accuracy:.3f}")

    sweep: dict[int, float] = {}
    if settings.batch_sizes and settings.max_steps and settings.max_steps < SWEEP_MIN_STEPS:
        logger.warning("the batch-size sweep times epochs of %d steps (--max-steps): fewer "
                       "than %d make its figures noisy", settings.max_steps, SWEEP_MIN_STEPS)
    uncached_sizes = []
    for size in settings.batch_sizes:
        # two epochs: the first compiles the model for this batch size, the second counts
        result, uncached = _train_once(ctx, "tfopt", size, SWEEP_EPOCHS, evaluate=False)
        sweep[size] = result.epoch_rates[-1]
        say(f"sweep batch {size}: {sweep[size]:.1f} examples/s")
        if uncached:
            uncached_sizes.append(size)
    if uncached_sizes:
        notes.append(f"the sweep ran batch {', '.join(map(str, uncached_sizes))} without "
                     f"tfopt's cache: --max-steps {settings.max_steps} x {SWEEP_EPOCHS} epochs "
                     "read less than one pass there")

    pipelines = {
        "baseline": "TFRecordDataset -> shuffle(1000) -> map(parse_single_example, decode, "
                    "crop, resize) -> batch, no num_parallel_calls, no prefetch",
        "tfopt": f"tfopt.Run's PipelineBuilder (cache {train_pipeline.choices.cache.value}, parallel, "
                 "prefetch)",
    }
    batch_norm = {"baseline": "Keras",
                  "tfopt": "fused (tfopt.fuse_batch_norm)" if settings.fuse_batch_norm
                  else "Keras"}
    results = {method: MethodResult(method, tuple(runs[method]),
                                    "float32" if method == "baseline" else policy,
                                    1 if method == "baseline" else spe, pipelines[method],
                                    batch_norm[method])
               for method in METHODS}
    examples = runs["baseline"][0].epoch_examples[-1]
    return TrainBenchReport(settings, results, reason, trial, train_pipeline.choices.describe(),
                            sweep, examples, eval_split, usable_cores(), load,
                            train_pipeline.plan.cache is not CacheMode.NONE, tuple(notes),
                            peak)
