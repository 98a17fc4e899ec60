"""``tfopt bench train``: end-to-end ``model.fit`` the default Keras way beside the tfopt way.

Two methods train the same built-in model (:mod:`tfopt.bench.models`) on the same shards for the
same number of epochs, from the same initial weights (``keras.utils.set_random_seed``):

- ``baseline``: what a first attempt looks like. float32 policy;
  ``TFRecordDataset -> map(parse_single_example + decode + central crop + resize) -> batch``,
  no ``num_parallel_calls``, no prefetch, no shuffle; ``compile`` defaults
  (``steps_per_execution=1``). tf.data's default static optimisations still apply, as they do
  for every user (``map_parallelization`` and map-and-batch fusion may run that map ahead on
  several threads): the baseline is the default, not a deliberately crippled pipeline.
- ``tfopt``: the policy ``tfopt.choose_policy()`` picks (mixed_bfloat16 on a CPU with AMX or
  AVX512-BF16), applied with ``tfopt.enable_policy`` as a context manager; the pipeline of
  ``tfopt.PipelineBuilder`` (training: shuffled, parallel, cache "auto", prefetch); a tuned
  ``steps_per_execution``; batch normalisation on TensorFlow's fused kernel
  (``tfopt.fuse_batch_norm``, which Keras 3 lacks; ``fuse_batch_norm=False`` leaves it out).

Both see the same pixels: the central 87.5 % square of each image resized to ``image_size``,
as uint8 batches the model turns into floats in its first layer (tfopt's pipeline is asked for
``random_crop=False`` so that the accuracies compare the training speed-ups, not augmentation).

``steps_per_execution`` is tuned by a short trial before the timed runs: each candidate
(1, 4, 16) compiles the model and warms up on one in-memory batch, then three alternating
rounds time 16 steps of each (median); the smallest candidate within 3 % of the fastest
wins, since fewer steps per call keep callbacks and logs finer-grained for the same speed.

Runs alternate (baseline, tfopt, baseline, tfopt, ...) so that caches, clocks and other load on
the machine treat both alike. Each run reports examples/s per epoch (training wall time of the
epoch; examples counted by :class:`tfopt.InputProbe`), the input-bound share per epoch
(:class:`tfopt.InputStallCallback`) and the validation accuracy after the last epoch. The first
epoch holds the compile (tracing) and, for tfopt, the filling of the cache: the report gives the
rate of the later epochs ("steady"), of the first epoch, and of the whole fit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import logging
import math
import os
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from tfopt._system import usable_cores
from tfopt._tf import import_tensorflow
from tfopt.errors import DatasetError, InvalidArgumentError

tf = import_tensorflow()
import keras  # noqa: E402 - after the quiet TensorFlow import

from tfopt.bench.models import DEFAULT_IMAGE_SIZE, ModelName, build_model  # noqa: E402
from tfopt.data.decode import central_crop_window, resize_uint8  # noqa: E402
from tfopt.data.pipeline import PipelineBuilder  # noqa: E402
from tfopt.records.format.tfrecord import tf_compression_type  # noqa: E402
from tfopt.train.callbacks import InputProbe, training_callbacks  # noqa: E402
from tfopt.train.fused_batch_norm import fuse_batch_norm  # noqa: E402
from tfopt.train.precision import choose_policy, enable_policy  # noqa: E402

logger = logging.getLogger("tfopt")

__all__ = [
    "METHODS",
    "MethodResult",
    "RunResult",
    "TrainBenchReport",
    "TrainBenchSettings",
    "make_demo_shards",
    "run_train_bench",
    "sweep_svg",
    "tune_steps_per_execution",
]

METHODS = ("baseline", "tfopt")
SPE_CANDIDATES = (1, 4, 16)
SPE_TRIAL_STEPS = 16  # steps per timed pass: a whole number of calls for every candidate
SPE_TRIAL_ROUNDS = 3  # timed passes per candidate, alternating; the median counts
SPE_TOLERANCE = 0.03  # a smaller steps_per_execution within 3 % of the fastest is preferred
LEARNING_RATE = 1e-3  # Adam's default: fine for both models at batch 32-128


@dataclasses.dataclass(frozen=True)
class TrainBenchSettings:
    """What both methods train, and how often.

    Attributes:
        source: A tfopt dataset folder (with a validation split for the accuracy; without one
            the training split is evaluated, and the report says so).
        model: ``"cnn"`` or ``"mlp"`` (:func:`tfopt.bench.models.build_model`). Defaults to "cnn".
        image_size: Side of the square training images, px. Defaults to 96.
        batch_size: Examples per step for the comparison. Defaults to 64.
        epochs: Epochs per run (the same for both methods). Defaults to 2.
        repeats: Runs per method, alternating. Defaults to 2.
        batch_sizes: Batch sizes for tfopt's throughput sweep (one run of ``min(epochs, 2)``
            epochs each; the last epoch counts). Defaults to () (no sweep).
        steps_per_execution: tfopt's ``steps_per_execution``. Defaults to None: tuned by a
            trial of ``SPE_CANDIDATES`` (module docstring).
        policy: tfopt's precision policy name. Defaults to None: ``choose_policy()``.
        seed: Weights, shuffling and trial data. Defaults to 0.
        max_steps: Cap on steps per epoch for both methods (quick runs). Defaults to None.
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
        try:
            object.__setattr__(self, "model", ModelName(self.model).value)
        except ValueError:
            raise InvalidArgumentError(f"model={self.model!r}: choose one of "
                                       f"{', '.join(m.value for m in ModelName)}") from None
        object.__setattr__(self, "batch_sizes", tuple(self.batch_sizes))
        for name in ("image_size", "batch_size", "epochs", "repeats"):
            _positive(name, getattr(self, name))
        for size in self.batch_sizes:
            _positive("batch_sizes", size)
        if self.steps_per_execution is not None:
            _positive("steps_per_execution", self.steps_per_execution)
        if self.max_steps is not None:
            _positive("max_steps", self.max_steps)

    def replace(self, **changes) -> TrainBenchSettings:
        return dataclasses.replace(self, **changes)


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name}={value!r}: expected a positive integer")


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
    """

    epoch_rates: tuple[float, ...]
    epoch_examples: tuple[int, ...]
    epoch_seconds: tuple[float, ...]
    input_bound_percent: tuple[float, ...]
    val_accuracy: float
    val_loss: float

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
        ``val_accuracy`` or ``steady_input_bound``."""
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
                            "steady_input_bound", "val_accuracy")},
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
        }

    def describe(self) -> str:
        s = self.settings
        lines = [
            f"training benchmark: {s.model} at {s.image_size}x{s.image_size}, batch "
            f"{s.batch_size}, {s.epochs} epoch(s) of {self.examples_per_epoch} examples, median "
            f"of {s.repeats} alternating run(s), {self.cores} cores (load {self.load_average:.2f} "
            f"at start); source {s.source}",
            "method     ex/s after epoch 1 (spread)   epoch 1 ex/s (spread)   whole fit   "
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
        lines.append(f"tfopt/baseline: {self.ratio():.2f}x after epoch 1, "
                     f"{self.ratio('first_epoch_rate'):.2f}x in epoch 1 (compile and cache fill "
                     f"included), {self.ratio('overall_rate'):.2f}x over the whole fit")
        for name, result in self.results.items():
            lines.append(f"{name}: policy {result.policy}, steps_per_execution "
                         f"{result.steps_per_execution}, batch norm {result.batch_norm}, "
                         f"{result.pipeline}")
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
        lines.append("tfopt's pipeline choices:")
        lines.extend("  " + line for line in self.pipeline_choices.splitlines())
        return "\n".join(lines)


# -- the baseline pipeline -------------------------------------------------------------------


def naive_dataset(builder: PipelineBuilder, image_size: int, batch_size: int) -> tf.data.Dataset:
    """The default way: shuffle, then one thread parses, decodes, crops and resizes each record,
    then batch.

    The crop (central 87.5 % square) and the bilinear resize to uint8 are tfopt's own, so that
    both methods train on the same pixels.
    """
    source = builder.source
    spec = {source.image_key: tf.io.FixedLenFeature([], tf.string),
            source.label_key: tf.io.FixedLenFeature([], tf.int64)}
    size = (image_size, image_size)

    def parse(serialized):
        example = tf.io.parse_single_example(serialized, spec)
        image = tf.io.decode_image(example[source.image_key], channels=3,
                                   expand_animations=False)
        image.set_shape([None, None, 3])
        window = central_crop_window(tf.shape(image))
        image = tf.slice(image, [window[0], window[1], 0], [window[2], window[3], 3])
        return resize_uint8(image, size), example[source.label_key]

    dataset = tf.data.TFRecordDataset(source.files, tf_compression_type(source.compression))
    # a fresh order every epoch, as any training input needs (without it the baseline read the
    # same order each epoch and lost 6-7 points of validation accuracy to tfopt, which reshuffles)
    dataset = dataset.shuffle(1000, reshuffle_each_iteration=True)
    return dataset.map(parse).batch(batch_size)


# -- measuring -------------------------------------------------------------------------------


class _EpochClock(keras.callbacks.Callback):
    """Wall time and examples (from the probe) of each epoch's training."""

    def __init__(self, probe: InputProbe):
        super().__init__()
        self.probe = probe
        self.seconds: list[float] = []
        self.examples: list[int] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._examples = self.probe.read()[1]
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._started)
        self.examples.append(self.probe.read()[1] - self._examples)


def _clear_session() -> None:
    """Free the last run's models; keep the global policy (clear_session resets it to float32)."""
    policy = keras.mixed_precision.global_policy()
    keras.backend.clear_session(free_memory=True)
    keras.mixed_precision.set_global_policy(policy)


@contextlib.contextmanager
def _quiet_keras():
    """Silence Keras's warnings about datasets that are as meant: not shuffled by fit (tf.data
    shuffles) and ending the epoch (the baseline's one pass per epoch)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*shuffle=True.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=r".*ran out of data.*", category=UserWarning)
        yield


def _compile(model, steps_per_execution: int) -> None:
    model.compile(keras.optimizers.Adam(LEARNING_RATE),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], steps_per_execution=steps_per_execution)


def tune_steps_per_execution(model_fn: Callable[[], keras.Model], batch_size: int,
                             image_size: int, classes: int,
                             candidates=SPE_CANDIDATES,
                             seed: int = 0) -> tuple[int, dict[int, float]]:
    """Pick ``steps_per_execution`` by a short trial on one in-memory batch.

    Each candidate compiles a fresh model (``model_fn()``, built under the policy in force) and
    runs one untimed call (tracing, warm-up); then three alternating rounds time a pass of 16
    steps of each, and the median counts. The input is one batch held in memory, so the trial
    sees the per-call overhead against the compute, not the pipeline.

    Args:
        model_fn: Returns an uncompiled model taking uint8 images.
        batch_size: Examples per step.
        image_size: Side of the images, px.
        classes: Number of classes.
        candidates: Values to try. Defaults to (1, 4, 16).
        seed: For the trial batch. Defaults to 0.

    Returns:
        (chosen value, {candidate: examples/s}); the chosen value is the smallest candidate
        within 3 % of the fastest.

    Example:
        >>> spe, rates = tune_steps_per_execution(lambda: build_model("mlp", 32, 10), 64, 32, 10)
    """
    rng = tf.random.Generator.from_seed(seed)
    images = tf.cast(rng.uniform((batch_size, image_size, image_size, 3), maxval=256,
                                 dtype=tf.int32), tf.uint8)
    labels = tf.cast(rng.uniform((batch_size,), maxval=classes, dtype=tf.int32), tf.int64)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()
    steps = max(SPE_TRIAL_STEPS, *candidates)
    trials = {}
    for candidate in candidates:
        model = model_fn()
        _compile(model, candidate)
        probe = InputProbe()
        clock = _EpochClock(probe)
        with _quiet_keras():
            # one call traces and warms up; later fit() calls reuse the compiled function
            model.fit(probe.instrument(dataset), epochs=1, steps_per_epoch=candidate,
                      verbose=0)
        trials[candidate] = (model, probe.instrument(dataset), clock)
    timed: dict[int, list[float]] = {candidate: [] for candidate in candidates}
    for _ in range(SPE_TRIAL_ROUNDS):  # alternating rounds: load from elsewhere hits all alike
        for candidate, (model, data, clock) in trials.items():
            with _quiet_keras():
                model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[clock])
            timed[candidate].append(clock.examples[-1] / clock.seconds[-1])
    del trials
    rates = {candidate: statistics.median(values) for candidate, values in timed.items()}
    fastest = max(rates.values())
    chosen = min(c for c, rate in rates.items() if rate >= (1 - SPE_TOLERANCE) * fastest)
    return chosen, rates


@dataclasses.dataclass
class _Context:
    """What every run shares: sources, evaluation data, tfopt's policy and settings."""

    settings: TrainBenchSettings
    classes: int
    policy: str
    steps_per_execution: int
    evaluation: tf.data.Dataset
    train_builder: PipelineBuilder


def _tfopt_builder(settings: TrainBenchSettings, batch_size: int) -> PipelineBuilder:
    # central crops (not random ones): the two methods must train on the same pixels
    return PipelineBuilder(settings.source, batch_size=batch_size, training=True,
                           image_size=settings.image_size, random_crop=False, cache="auto",
                           seed=settings.seed, split="train")


def _tfopt_model(settings: TrainBenchSettings, classes: int) -> keras.Model:
    model = build_model(settings.model, settings.image_size, classes)
    if settings.fuse_batch_norm:
        fuse_batch_norm(model)
    return model


def _train_once(ctx: _Context, method: str, batch_size: int, epochs: int,
                evaluate: bool = True) -> RunResult:
    settings = ctx.settings
    if method == "baseline":
        policy, spe = "float32", 1
        dataset = naive_dataset(ctx.train_builder, settings.image_size, batch_size)
        steps = settings.max_steps
    else:
        policy, spe = ctx.policy, ctx.steps_per_execution
        builder = _tfopt_builder(settings, batch_size)
        dataset, steps = builder.build(), builder.steps_per_epoch
        if settings.max_steps:
            steps = min(steps or settings.max_steps, settings.max_steps)
    if method == "baseline" and steps:
        dataset = dataset.take(steps)  # a pass of max_steps batches per epoch, restarted each epoch
        steps = None
    probe = InputProbe()  # outside the policy and any scope: plain CPU variables
    dataset = probe.instrument(dataset)
    clock = _EpochClock(probe)
    keras.utils.set_random_seed(settings.seed)  # same initial weights for every run
    with enable_policy(policy), _quiet_keras():
        model = (_tfopt_model(settings, ctx.classes) if method == "tfopt"
                 else build_model(settings.model, settings.image_size, ctx.classes))
        _compile(model, spe)
        history = model.fit(dataset, epochs=epochs, steps_per_epoch=steps, verbose=0,
                            callbacks=[*training_callbacks(batch_size, probe, gpu=False), clock])
        accuracy = loss = math.nan
        if evaluate:
            scores = model.evaluate(ctx.evaluation, verbose=0, return_dict=True)
            accuracy, loss = float(scores["accuracy"]), float(scores["loss"])
    _clear_session()
    stalls = tuple(float(v) for v in history.history.get("input_bound_percent", []))
    return RunResult(
        epoch_rates=tuple(e / s for e, s in zip(clock.examples, clock.seconds, strict=True)),
        epoch_examples=tuple(clock.examples),
        epoch_seconds=tuple(clock.seconds),
        input_bound_percent=stalls,
        val_accuracy=accuracy,
        val_loss=loss,
    )


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
        tfopt.DatasetError: The source has no readable shards.
        tfopt.InvalidArgumentError: The source has no images or no labels.

    Example:
        >>> report = run_train_bench(TrainBenchSettings("shards/", epochs=3))
        >>> print(report.describe())
    """
    say = progress or (lambda line: None)
    load = os.getloadavg()[0]
    train_builder = _tfopt_builder(settings, settings.batch_size)
    source = train_builder.source
    if source.image_key is None or source.label_key is None:
        raise InvalidArgumentError(f"{settings.source}: the training benchmark needs images "
                                   "with class labels (a dataset from 'tfopt convert' of an "
                                   "image folder)")
    classes = len(source.class_names) if source.class_names else _count_classes(source)
    try:
        eval_builder = PipelineBuilder(settings.source, batch_size=settings.batch_size,
                                       image_size=settings.image_size, split="validation")
        eval_split = "validation"
    except DatasetError:
        eval_builder = PipelineBuilder(settings.source, batch_size=settings.batch_size,
                                       image_size=settings.image_size, split="train")
        eval_split = "train"
        logger.warning("%s has no validation split: accuracy is measured on the training split",
                       settings.source)

    if settings.policy is None:
        choice = choose_policy()
        policy, reason = choice.name, choice.reason
    else:
        policy, reason = settings.policy, "given"
    say(f"tfopt policy {policy}: {reason}")

    trial: dict[int, float] = {}
    spe = settings.steps_per_execution
    if spe is None:
        say(f"steps_per_execution trial of {', '.join(map(str, SPE_CANDIDATES))} ...")
        with enable_policy(policy):
            spe, trial = tune_steps_per_execution(
                lambda: _tfopt_model(settings, classes),
                settings.batch_size, settings.image_size, classes, seed=settings.seed)
        _clear_session()
        say("steps_per_execution trial: " + ", ".join(f"{k}: {v:.1f} ex/s"
                                                      for k, v in trial.items())
            + f"; chosen {spe}")

    ctx = _Context(settings, classes, policy, spe, eval_builder.build(), train_builder)
    runs: dict[str, list[RunResult]] = {method: [] for method in METHODS}
    for repeat in range(settings.repeats):
        for method in METHODS:
            result = _train_once(ctx, method, settings.batch_size, settings.epochs)
            runs[method].append(result)
            say(f"run {repeat + 1}/{settings.repeats} {method:8s} "
                + " ".join(f"{rate:7.1f}" for rate in result.epoch_rates)
                + " examples/s per epoch, input-bound "
                + " ".join(_percent(p, 0) for p in result.input_bound_percent)
                + f", {eval_split} accuracy {result.val_accuracy:.3f}")

    sweep: dict[int, float] = {}
    for size in settings.batch_sizes:
        result = _train_once(ctx, "tfopt", size, min(settings.epochs, 2), evaluate=False)
        sweep[size] = result.epoch_rates[-1]
        say(f"sweep batch {size}: {sweep[size]:.1f} examples/s")

    pipelines = {
        "baseline": "TFRecordDataset -> shuffle(1000) -> map(parse_single_example, decode, "
                    "crop, resize) -> batch, no num_parallel_calls, no prefetch",
        "tfopt": f"PipelineBuilder (cache {train_builder.choices.cache.value}, parallel, "
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
    return TrainBenchReport(settings, results, reason, trial, train_builder.choices.describe(),
                            sweep, examples, eval_split, usable_cores(), load)


def _count_classes(source) -> int:
    """Classes from the largest label in the training shards (no manifest class names)."""
    spec = {source.label_key: tf.io.FixedLenFeature([], tf.int64)}
    reader = tf.data.TFRecordDataset(source.files, tf_compression_type(source.compression))
    labels = reader.map(lambda r: tf.io.parse_single_example(r, spec)[source.label_key])
    return max(2, int(labels.reduce(tf.constant(0, tf.int64), tf.maximum)) + 1)


# -- demo data and the plot ------------------------------------------------------------------


def make_demo_shards(folder, count: int = 600, min_size: int = 160, max_size: int = 240) -> Path:
    """Demo images converted to shards with a 10 % validation split, under ``folder``.

    Args:
        folder: Where ``images/`` and ``shards/`` are written (an empty or new folder).
        count: Images, over 10 classes. Defaults to 600 (a CPU epoch of seconds).
        min_size: Smallest image side, px. Defaults to 160.
        max_size: Largest image side, px. Defaults to 240.

    Returns:
        The shards folder.
    """
    from tfopt.records.convert import convert
    from tfopt.records.demo_data import make_demo_data

    folder = Path(folder)
    make_demo_data(folder / "images", count=count, min_size=min_size, max_size=max_size)
    convert(folder / "images", folder / "shards", val_fraction=0.1, seed=0)
    return folder / "shards"


_SVG_WIDTH, _SVG_HEIGHT = 480, 300
_MARGIN = {"left": 64, "right": 16, "top": 32, "bottom": 44}


def sweep_svg(sweep: dict[int, float], title: str = "tfopt throughput by batch size") -> str:
    """An SVG line chart of examples/s against batch size (log2 axis), as a string.

    Args:
        sweep: Batch size -> examples/s.
        title: The chart's title. Defaults to "tfopt throughput by batch size".

    Raises:
        tfopt.InvalidArgumentError: An empty sweep.
    """
    if not sweep:
        raise InvalidArgumentError("sweep is empty: give batch sizes to plot")
    sizes = sorted(sweep)
    left, top = _MARGIN["left"], _MARGIN["top"]
    width = _SVG_WIDTH - left - _MARGIN["right"]
    height = _SVG_HEIGHT - top - _MARGIN["bottom"]
    low, high = math.log2(sizes[0]), math.log2(sizes[-1])
    top_rate = max(sweep.values()) * 1.1 or 1.0

    def x(size):  # batch sizes are mostly powers of two: a log2 axis spaces them evenly
        return left + (width / 2 if high == low else (math.log2(size) - low) / (high - low) * width)

    def y(rate):
        return top + height - rate / top_rate * height

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_SVG_WIDTH}" height="{_SVG_HEIGHT}" '
        f'viewBox="0 0 {_SVG_WIDTH} {_SVG_HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_SVG_WIDTH}" height="{_SVG_HEIGHT}" fill="white"/>',
        f'<text x="{_SVG_WIDTH / 2}" y="20" text-anchor="middle" font-size="14">'
        f'{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{top + height}" x2="{left + width}" y2="{top + height}" '
        'stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="black"/>',
        f'<text x="{left + width / 2}" y="{_SVG_HEIGHT - 8}" text-anchor="middle">'
        'batch size</text>',
        f'<text x="14" y="{top + height / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + height / 2})">examples/s</text>',
    ]
    for step in range(5):
        rate = top_rate * step / 4
        parts.append(f'<line x1="{left - 4}" y1="{y(rate):.1f}" x2="{left}" y2="{y(rate):.1f}" '
                     'stroke="black"/>')
        parts.append(f'<text x="{left - 6}" y="{y(rate) + 4:.1f}" text-anchor="end">'
                     f'{rate:.0f}</text>')
    points = " ".join(f"{x(size):.1f},{y(sweep[size]):.1f}" for size in sizes)
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for size in sizes:
        parts.append(f'<circle cx="{x(size):.1f}" cy="{y(sweep[size]):.1f}" r="3.5" '
                     'fill="#1f77b4"/>')
        parts.append(f'<text x="{x(size):.1f}" y="{top + height + 16}" text-anchor="middle">'
                     f'{size}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_sweep_svg(path, sweep: dict[int, float], title: str | None = None) -> Path:
    """Write :func:`sweep_svg` to ``path`` atomically (temporary name, fsync, rename)."""
    from tfopt._files import atomic_write_bytes

    path = Path(path)
    text = sweep_svg(sweep, title) if title else sweep_svg(sweep)
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def write_sweep_png(path, sweep: dict[int, float], title: str | None = None) -> Path:
    """Draw the sweep as a PNG with matplotlib (the optional ``plot`` extra), atomically.

    Raises:
        tfopt.InvalidArgumentError: An empty sweep, or matplotlib is not installed.
    """
    if not sweep:
        raise InvalidArgumentError("sweep is empty: give batch sizes to plot")
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display here or on servers
        from matplotlib import pyplot
    except ImportError:
        raise InvalidArgumentError(
            f"--plot {path}: a PNG needs matplotlib (pip install 'tfopt[plot]'); "
            "or write an SVG (--plot FILE.svg), which needs nothing") from None
    from tfopt._files import atomic_path

    sizes = sorted(sweep)
    figure, axes = pyplot.subplots(figsize=(6.4, 4.0), dpi=100)
    axes.plot(sizes, [sweep[size] for size in sizes], marker="o")
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [str(size) for size in sizes])
    axes.set_xlabel("batch size")
    axes.set_ylabel("examples/s")
    axes.set_title(title or "tfopt throughput by batch size")
    axes.grid(True, alpha=0.3)
    path = Path(path)
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png", bbox_inches="tight")
    pyplot.close(figure)
    return path


# Chart writers by file suffix: --plot picks one from the name it is given.
_PLOT_WRITERS = {".svg": write_sweep_svg, ".png": write_sweep_png}


def write_sweep_plot(path, sweep: dict[int, float], title: str | None = None) -> Path:
    """Write the sweep chart as SVG or PNG, chosen by ``path``'s suffix.

    Raises:
        tfopt.InvalidArgumentError: Another suffix (the message lists the valid ones).
    """
    writer = _PLOT_WRITERS.get(Path(path).suffix.lower())
    if writer is None:
        raise InvalidArgumentError(f"--plot {path}: expected a file ending in "
                                   f"{' or '.join(_PLOT_WRITERS)}")
    return writer(path, sweep, title)
