"""``tfopt.Run``: strategy, precision, pipelines, batch norm, accumulation, steps_per_execution,
measuring callbacks and resumable backups, composed in the order they must happen.

The order is the point: the strategy is built first (it decides the global batch and how the
pipelines shard), the pipelines are planned under its scope, the probe that times input waits
is made outside it (plain CPU variables), the model is built under the policy and the scope,
batch norm is rewritten after the build and before compile, accumulation and
steps_per_execution are set at compile, and a rerun's training stream starts where the
restored backup left it. ``docs/run.md`` is the guide.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import weakref
from pathlib import Path

import keras
import tensorflow as tf

from tfopt._internals.keras_model import initial_epoch
from tfopt._internals.tf_runtime import op_determinism_enabled
from tfopt.data.augment.layer import Augment
from tfopt.data.inputs import is_in_memory_or_dataset
from tfopt.data.pipeline import PipelineBuilder
from tfopt.distribute.cluster import cluster_info
from tfopt.distribute.strategy import StrategyPlan, plan_strategy, select_strategy
from tfopt.errors import InvalidArgumentError
from tfopt.records.format.layout import resolve_dataset
from tfopt.records.format.tfrecord import tf_compression_type
from tfopt.run.config import AUTO, BatchNorm, RunConfig
from tfopt.run.plan import (
    RunFacts,
    RunPlan,
    SpeSource,
    divide_epoch,
    plan_jit_compile,
    plan_run,
)
from tfopt.run.training_data import DatasetData, MemoryData, training_data
from tfopt.run.workdir import (
    HISTORY_FILE,
    XlaChoice,
    check_workdir_files,
    earlier_results,
    keep_earlier_results,
    lock_workdir,
    read_spe_choice,
    read_xla_choice,
    resume_point,
    write_spe_choice,
    write_xla_choice,
)
from tfopt.train.accumulation import configure_accumulation
from tfopt.train.backup import BACKUP_FOLDER, AtomicBackupAndRestore, backup_callbacks
from tfopt.train.backup_store import BackupStore
from tfopt.train.callbacks import (
    GpuStatsCallback,
    InputProbe,
    ProgressLine,
    ThroughputCallback,
    training_callbacks,
)
from tfopt.train.flops import device_peak
from tfopt.train.fused_batch_norm import fuse_batch_norm
from tfopt.train.precision import (
    PolicyChoice,
    check_model_precision,
    choose_policy,
    compute_in,
    enable_policy,
    keep_outputs_float32,
    recurrent_layers,
)
from tfopt.train.sync_batch_norm import synchronize_batch_norm
from tfopt.tune.model import copy_model
from tfopt.tune.steps_per_execution import (
    HALF_PRECISION_GAIN,
    trial_steps,
    tune_precision_and_steps_on,
    tune_steps_per_execution,
    tune_steps_per_execution_on,
)
from tfopt.tune.xla import input_rate, trial_xla, variable_axes, xla_blockers

logger = logging.getLogger("tfopt")

__all__ = ["Run"]

VALIDATION_SPLIT = "validation"
CACHE_ONE_PASS = ("as each pipeline plans it (below), except in a fit that reads one pass or "
                  "less: a cache serves only the passes after the one that fills it")


def _has_validation_split(source) -> bool:
    """The source is a dataset folder with a non-empty validation split: a tfopt manifest's,
    or files named so in a folder without one (``validation-00000-of-00004``: the same
    resolution the pipelines use). A glob or a file list has no splits: its files are all one
    split."""
    path = Path(str(source)) if isinstance(source, (str, Path)) else None
    if path is None or not path.is_dir():
        return False
    dataset = resolve_dataset(path)
    if dataset.manifest is not None:
        split = dataset.manifest.splits.get(VALIDATION_SPLIT)
        return split is not None and split.num_records > 0
    return bool(dataset.splits.get(VALIDATION_SPLIT))


def _split_to_evaluate(source) -> str | None:
    """The split of another dataset given as ``validation=``: its validation split, else the
    whole of it ("train" of a folder; None for a glob or a file list, which have no splits)."""
    if _has_validation_split(source):
        return VALIDATION_SPLIT
    path = Path(str(source)) if isinstance(source, (str, Path)) else None
    return "train" if path is not None and path.is_dir() else None


class _ResumeCheck(keras.callbacks.Callback):
    """After the backup's restore: warns when the epoch restored is not the one the training
    stream was positioned for (the newest backup was damaged and an older one restored)."""

    def __init__(self, expected_epoch: int):
        super().__init__()
        self.expected_epoch = expected_epoch

    def on_train_begin(self, logs=None):
        restored = initial_epoch(self.model)
        if restored != self.expected_epoch:
            logger.warning(
                "training resumes at epoch %d, but the input stream was positioned for epoch "
                "%d (the newest backup's): the data order from here differs from an "
                "uninterrupted run's", restored + 1, self.expected_epoch + 1)


class Run:
    """One object for the common job: train a Keras model the tfopt way, on TFRecord shards,
    NumPy arrays, a DataFrame or a ``tf.data.Dataset``.

    Building a ``Run`` decides everything that does not need the model: the strategy (built),
    the precision policy, the training and validation pipelines, where a rerun resumes.
    ``scope()`` is where the model is built; ``compile()`` rewrites batch norm, sets gradient
    accumulation and ``steps_per_execution``, checks precision; ``fit()`` trains with the
    measuring callbacks and atomic backups in ``workdir``: run the same script again after a
    crash and it resumes. ``describe()`` says every choice and why. For ``model.fit`` by hand:
    ``run.train``, ``run.steps_per_epoch``, ``run.validation``, ``run.callbacks()``.

    Args:
        source: A tfopt dataset folder, a glob or a list of TFRecord files; ``(x, y)`` or
            ``(x, y, sample_weight)`` arrays; a pandas DataFrame (with ``label=``); or a
            ``tf.data.Dataset`` of such tuples.
        **options: :class:`~tfopt.run.config.RunConfig` fields (``label``, ``image_size``,
            ``batch_size`` per replica, ``workdir``, ``precision``, ``strategy``,
            ``steps_per_execution``, ``effective_batch_size``, ``cache``, ``augment``,
            ``batch_norm``, ``validation``, ``seed``, and the backups' ``keep``, ``copy_to``,
            ``copy_keep``); each choice defaults to "auto".

    Raises:
        tfopt.errors.InvalidArgumentError: An option out of range, a combination that cannot
            work, or a source that is not what ``fit`` takes (named by its type and shape).
        tfopt.errors.DatasetError: Nothing readable at ``source``.

    Example:
        >>> run = tfopt.Run("shards/", image_size=96, batch_size=64, workdir="runs/exp1")
        >>> with run.scope():
        ...     model = build_model("cnn", image_size=96, classes=run.num_classes)
        >>> run.compile(model, "adam", keras.losses.SparseCategoricalCrossentropy(True))
        >>> history = run.fit(model, epochs=10)
    """

    def __init__(self, source, **options):
        self.config = config = RunConfig(source, **options)
        strategy_plan = (config.strategy if isinstance(config.strategy, StrategyPlan)
                         else plan_strategy(config.strategy))
        self.strategy = select_strategy(strategy_plan)
        self._strategy_plan = strategy_plan
        replicas = int(self.strategy.num_replicas_in_sync)
        self._gpus = len(tf.config.list_physical_devices("GPU"))
        policy = (choose_policy() if config.precision == AUTO
                  else PolicyChoice(config.precision, "given"))
        global_batch = config.per_replica_batch * replicas
        cluster = cluster_info()
        self._peak, self._no_peak = device_peak(cluster.workers, replicas, self._gpus)
        self._data: MemoryData | DatasetData | None = None
        self._train_builder: PipelineBuilder | None = None
        if is_in_memory_or_dataset(source):
            # read once, checked before anything is built or written
            batch = None if config.batch_size is None else global_batch
            self._data = training_data(source, config.validation, label=config.label,
                                       batch_size=batch)
            has_validation = self._data.validation_input is not None
        else:
            if config.label is not None:
                raise InvalidArgumentError(
                    f"label={config.label!r}: only for a DataFrame source; TFRecord shards "
                    "name their label feature themselves")
            if isinstance(config.validation, float):
                raise InvalidArgumentError(
                    f"validation={config.validation}: a fraction is held out of arrays or a "
                    "DataFrame; TFRecord shards bring their validation split (tfopt convert "
                    "--val-fraction) or take validation= other shards")
            # the planner reads the strategy's replicas and workers (drop_remainder, sharding)
            self._train_builder = PipelineBuilder(
                source, batch_size=global_batch, training=True, image_size=config.image_size,
                cache=config.cache, random_crop=config.random_crop, seed=config.seed,
                split="train", input_context=self.strategy)
            has_validation = (config.validation not in (None, AUTO)
                              or (config.validation == AUTO and _has_validation_split(source)))
        if config.copy_to is not None:
            BackupStore(config.copy_to)  # a URL fsspec cannot open: refused now, not at fit
        chief = bool(getattr(self.strategy.extended, "should_checkpoint", True))
        self._workdir_lock = None
        self._chief = chief
        if config.workdir is not None and Path(config.workdir).is_dir():
            self._hold_workdir()  # else at its first write: nothing is made before then
        resumed, resumed_steps, resume_from = resume_point(config.workdir, config.copy_to)
        # a finished run's results, renamed aside at the first fit (a new run writes its own)
        self._earlier = (earlier_results(config.workdir)
                         if chief and not (resumed or resumed_steps) else ([], 0))
        self._fitted = False  # a later fit of this object trains on: no resume point then
        self._facts = RunFacts(
            replicas=replicas,
            workers=cluster.workers,
            chief=chief,
            policy=policy.name,
            policy_reason=policy.reason,
            steps_per_epoch=self._source_steps(global_batch, replicas),
            trial_steps=trial_steps(),
            trial_possible=self._data is not None or self._trial_image_size() is not None,
            has_validation=has_validation,
            resume_epoch=resumed,
            resume_steps=resumed_steps,
            resume_from=resume_from,
            **self._data_facts(),
        )
        self.plan: RunPlan = plan_run(config, self._facts)
        self._eval_builder = None
        if self.plan.validation and self._data is None:
            evaluate = source if config.validation == AUTO else config.validation
            split = VALIDATION_SPLIT if config.validation == AUTO else _split_to_evaluate(evaluate)
            self._eval_builder = PipelineBuilder(
                evaluate, batch_size=global_batch, image_size=config.image_size,
                image_key=self._train_builder.source.image_key,
                label_key=self._train_builder.source.label_key, split=split,
                input_context=self.strategy)
        # outside the strategy's scope: its counters are plain CPU variables. Under op
        # determinism TensorFlow refuses the probe's tf.timestamp: stalls are then estimated
        # from the step times alone
        self._probe = None if _op_determinism() else InputProbe()
        self._train_cache: dict[tuple[int, int, bool], tf.data.Dataset] = {}
        # the pipelines without their cache, for fits that read one pass or less
        self._uncached: dict[str, PipelineBuilder] = {}
        self._train_in_use = self._train_builder  # the one the last fit read (its advice)
        self._uncached_validation: tf.data.Dataset | None = None
        self._compiled_spe: int | None = None  # what compile() set
        self._validation = None
        self._classes: int | None = None
        self._spe_trial: dict[int, float] = {}
        self._xla_trial: dict[bool, float] = {}
        self._held_trial_batches: tuple | None = None  # (model, its trial batches)
        self._precision_warnings: list[str] = []
        self._precision_changes: list[str] = []
        self._policy_trial: dict[str, float] = {}
        self._seeded = False

    def _hold_workdir(self) -> None:
        """Lock the workdir for this run (made if absent) and check the files it writes
        there: one run writes a workdir at a time; the lock goes with this object (or its
        process). The chief's to do; once."""
        if self._workdir_lock is not None or self.config.workdir is None or not self._chief:
            return
        self._workdir_lock = lock_workdir(self.config.workdir)
        weakref.finalize(self, self._workdir_lock.release)
        check_workdir_files(self.config.workdir)

    # -- what a user reads -------------------------------------------------------------------

    @property
    def global_batch(self) -> int:
        """Examples per step over all replicas (what the pipelines batch)."""
        return self.plan.global_batch

    @property
    def steps_per_epoch(self) -> int | None:
        """Batches in one pass of the training data (None when its length is unknown)."""
        return self._facts.steps_per_epoch

    def _source_steps(self, global_batch: int, replicas: int) -> int | None:
        if self._train_builder is not None:
            return self._train_builder.steps_per_epoch
        if isinstance(self._data, MemoryData):
            return self._data.steps_per_epoch(global_batch, drop_remainder=replicas > 1)
        return self._data.steps_per_epoch(global_batch)

    def _data_facts(self) -> dict:
        """What the planner reads of an in-memory or dataset source."""
        if self._data is None:
            return {}
        facts = {"validation_reason": self._data.validation_reason(), "epoch_is_pass": True}
        if isinstance(self._data, DatasetData) and self._data.keeps_batches:
            facts.update(keeps_batches=True, dataset_batch=self._data.own_batch())
        return facts

    def _shown_source(self) -> str:
        return (self._data.input.facts.shown if self._data is not None
                else str(self.config.source))

    @property
    def peak(self):
        """The :class:`~tfopt.gpu.peak.PeakFlops` the ``mfu`` in the history is of (None: no
        MFU, ``describe()`` says why)."""
        return self._peak

    @property
    def probe(self) -> InputProbe | None:
        """The probe on the training dataset (None under op determinism, which refuses it)."""
        return self._probe

    @property
    def train_pipeline(self) -> PipelineBuilder | None:
        """The training :class:`~tfopt.data.pipeline.PipelineBuilder` (its plan and choices);
        None for arrays, a DataFrame or a dataset."""
        return self._train_builder

    @property
    def train(self) -> tf.data.Dataset:
        """The training dataset: repeating, probed, positioned where a resumed fit starts (for
        TFRecord shards; arrays, DataFrames and datasets are built for a model in ``fit``)."""
        self._shards_only("run.train")
        return self._train_dataset(self._steps(None), self._spe())

    def _shards_only(self, what: str) -> None:
        if self._data is not None:
            raise InvalidArgumentError(
                f"{what}: only for TFRecord shards; with {self._shown_source()} call "
                "run.fit(model, ...), which builds the data for that model")

    @property
    def validation(self) -> tf.data.Dataset | None:
        """The evaluation dataset (every record once, in order), or None without one."""
        if self._data is not None:
            self._shards_only("run.validation")
        if self._eval_builder is not None and self._validation is None:
            self._validation = self._eval_builder.build()
        return self._validation

    @property
    def num_classes(self) -> int:
        """Classes of the label: the manifest's class names, else the largest label + 1."""
        self._shards_only("run.num_classes")
        if self._classes is None:
            source = self._train_builder.source
            if source.label_key is None:
                raise InvalidArgumentError(
                    f"{self.config.source}: num_classes: the dataset has no label feature")
            self._classes = (len(source.class_names) if source.class_names
                             else _count_classes(source))
        return self._classes

    @property
    def steps_per_execution_trial(self) -> dict[int, float]:
        """The trial's examples/s per candidate (empty when none ran in this process)."""
        return dict(self._spe_trial)

    @property
    def xla_trial(self) -> dict[bool, float]:
        """The XLA trial's examples/s without (False) and with (True) XLA (empty when none
        ran, or one was read from the workdir without its rates)."""
        return dict(self._xla_trial)

    @property
    def precision_warnings(self) -> list[str]:
        """What the precision check found at compile ([] when the model is fine)."""
        return list(self._precision_warnings)

    @property
    def precision_trial(self) -> dict[str, float]:
        """Each policy's best examples/s where the trial chose the precision too (else {})."""
        return dict(self._policy_trial)

    @property
    def precision_changes(self) -> list[str]:
        """What compile changed for precision: output layers given float32 ([] when none)."""
        return list(self._precision_changes)

    def describe(self) -> str:
        """Every choice of the run and why, one per line, then the pipeline's."""
        plan, config = self.plan, self.config
        spe = ("timed by a trial at compile" if plan.steps_per_execution is None
               else str(plan.steps_per_execution))
        if config.workdir is None:
            workdir = "none: no backups, no history (give workdir= to resume after a crash)"
        else:
            writer = "" if self._facts.chief else " (written by the chief)"
            workdir = (f"{config.workdir}: backups (a rerun resumes), best model by "
                       f"{plan.monitor}, {HISTORY_FILE}{writer}")
        backups = ("none (no workdir)" if config.workdir is None else
                   f"the {config.keep} newest in {Path(config.workdir) / BACKUP_FOLDER}, "
                   "each checksummed" + (
                       "; no second copy (give copy_to= a folder on another disk or a URL)"
                       if config.copy_to is None else
                       f"; each copied to {config.copy_to} in the background ("
                       + ("all kept there" if config.copy_keep is None
                          else f"the {config.copy_keep} newest kept there") + ")"))
        resume = (f"from the backup of epoch {plan.resume_epoch}" if plan.resume_epoch
                  else "a new run")
        if plan.resume_steps:
            resume = (f"from the backup taken at step {plan.resume_steps} of epoch "
                      f"{plan.resume_epoch + 1} (on SIGTERM): that epoch's other steps first")
        found, number = self._earlier
        if found:
            names = ", ".join(path.name for path in found)
            resume += (f"; the finished run's {names} are kept as <name>-previous-{number} "
                       "when it starts")
        if plan.resume_epoch and self._facts.resume_from is not None:
            resume += f" in {self._facts.resume_from} (the workdir holds none as new)"
        if plan.resume_epoch and config.seed is None:
            resume += " (no seed: the data order differs from an uninterrupted run's)"
        elif (plan.resume_epoch and isinstance(self._data, DatasetData)
              and self.steps_per_epoch is None):
            resume += (" (a dataset of unknown length: its own shuffles start from their "
                       "seeds again, so the data order differs from an uninterrupted run's; "
                       "give fit steps_per_epoch= to continue them)")
        if plan.global_batch is None:
            batch = "the dataset's own batches, kept as the global batch"
        elif self._facts.keeps_batches:
            batch = f"the dataset's own batches of {plan.global_batch}, kept as the global batch"
        else:
            batch = (f"{config.per_replica_batch} per replica x {plan.replicas} = "
                     f"{plan.global_batch} per step")
        lines = [
            f"tfopt.Run on {self._shown_source()}",
            *self._strategy_plan.describe(self.strategy).splitlines(),
            f"batch        {batch}",
            f"precision    {plan.policy}: {plan.policy_reason}",
            f"batch norm   {plan.batch_norm.value}: {plan.batch_norm_reason}",
            f"accumulation {plan.accumulation_reason}",
            f"steps/call   {spe}: {plan.spe_reason}",
            f"xla          {_xla_state(plan.jit_compile)}: {plan.xla_reason}",
            f"validation   {plan.validation_reason}",
            *([f"cache        {CACHE_ONE_PASS}"] if self._cache_may_go() else []),
            f"mfu          {self._mfu_line()}",
            f"workdir      {workdir}",
            f"backups      {backups}",
            f"resume       {resume}",
            *self._data_lines(),
        ]
        return "\n".join(lines)

    def _mfu_line(self) -> str:
        if self._peak is None:
            return self._no_peak
        return (f"the model's FLOPs counted at fit, over the peak of {self._peak.device} "
                "(run.peak has the figures and their basis; history.csv's mfu)")

    def _data_lines(self) -> list[str]:
        if self._data is None:
            return ["training pipeline:", *("  " + line for line in
                                            self._train_builder.choices.describe().splitlines())]
        if isinstance(self._data, MemoryData):
            return self._data.describe(self.plan.global_batch, self.plan.replicas > 1)
        return self._data.describe(self.plan.global_batch)

    def _cache_may_go(self) -> bool:
        """Whether a fit of one pass or less would leave out a pipeline's cache
        (:meth:`PipelineBuilder.keeps_cache` of one pass: ``cache="auto"`` and a pass of exact
        length)."""
        if self._train_builder is None:
            return False
        builders = [self._train_builder, *([self._eval_builder] if self._eval_builder else [])]
        return any(not b.keeps_cache(b.pass_examples) for b in builders)

    # -- building and training -------------------------------------------------------------

    @contextlib.contextmanager
    def _entered(self):
        with enable_policy(self.plan.policy), self.strategy.scope():
            yield

    @contextlib.contextmanager
    def scope(self):
        """Build the model in here: the precision policy and the strategy's scope, and the
        seed (``seed=``) set once, on the first entry, for the same initial weights."""
        with self._entered():
            if self.config.seed is not None and not self._seeded:
                keras.utils.set_random_seed(self.config.seed)
                self._seeded = True
            try:
                yield self.strategy
            except Exception as error:
                if self.plan.policy != "float32":
                    # some Keras layers fail under a mixed policy (enable_policy makes a
                    # Normalization adapt in float32; others may not): the error keeps its
                    # type, and says which policy it met and how to build without it
                    error.add_note(
                        f"tfopt.Run: the model was built under the {self.plan.policy} policy "
                        f"({self.plan.policy_reason}); if a layer fails under mixed precision, "
                        "build the Run with precision='float32' or give that layer "
                        "dtype='float32'")
                raise

    def augment_layer(self) -> Augment:
        """With ``augment="device"``: the layer to put first in the model (random-resized crop
        and flip on the accelerator, its seed the run's)."""
        if self.config.augment != "device":
            raise InvalidArgumentError(
                f"augment_layer(): this run augments in the pipeline (augment="
                f"{self.config.augment!r}); build the Run with augment='device' to crop on "
                "the accelerator")
        return Augment(output_size=self.config.image_size, random_crop=True,
                       horizontal_flip=0.5, seed=self.config.seed)

    def compile(self, model, optimizer="adam", loss=None, metrics=None, **compile_options):
        """Compile ``model`` the tfopt way: batch norm rewritten, gradient accumulation,
        ``steps_per_execution`` (given, cached, or by a short trial), the precision check.

        Args:
            model: A built Keras model (made in ``run.scope()``).
            optimizer: An optimizer or its name. Defaults to "adam".
            loss: As for ``keras.Model.compile``.
            metrics: As for ``keras.Model.compile``.
            **compile_options: Other ``compile`` arguments (not ``steps_per_execution``: the
                Run's option sets it).

        Raises:
            tfopt.errors.InvalidArgumentError: ``steps_per_execution`` given here, or a model the
                batch-norm rewrite cannot take.
        """
        if "steps_per_execution" in compile_options:
            raise InvalidArgumentError(
                "compile(steps_per_execution=...): give it to the Run "
                "(tfopt.Run(..., steps_per_execution=N)); 'auto' tunes it")
        if "jit_compile" in compile_options:
            raise InvalidArgumentError(
                "compile(jit_compile=...): give it to the Run (tfopt.Run(..., "
                "jit_compile=True)); 'auto' times the model with and without XLA")
        if isinstance(self._data, MemoryData):
            self._data.check(model)  # a DataFrame's columns this model cannot take: refused now
        with self._entered():
            self._rewrite_batch_norm(model)
            self._check_model_copies(model)
            self._keep_recurrent_untried_in_float32(model)
            if self.plan.policy != "float32":
                self._precision_changes = keep_outputs_float32(model)
                for change in self._precision_changes:
                    logger.info("%s", change)
            if isinstance(optimizer, (str, dict)):
                optimizer = keras.optimizers.get(optimizer)
            if self.plan.accumulation_steps > 1:
                configure_accumulation(optimizer, self.config.effective_batch_size,
                                       self.plan.global_batch)
            spe = self._resolve_steps_per_execution(model, optimizer, loss, metrics,
                                                    compile_options)
            if self.steps_per_epoch is not None and spe > self.steps_per_epoch:
                spe = self.steps_per_epoch  # a call longer than an epoch would run past it
            jit = self._resolve_jit_compile(model, spe, optimizer, loss, metrics,
                                            compile_options)
            model.compile(optimizer=optimizer, loss=loss, metrics=metrics,
                          steps_per_execution=spe, jit_compile=jit, **compile_options)
            self._compiled_spe = spe
            self._precision_warnings = check_model_precision(model)
        return model

    def callbacks(self) -> list:
        """The callbacks ``fit`` uses: examples/s and input stalls (GPU stats on a GPU), then
        with a workdir the backups, the best model and ``history.csv`` (the chief's), and last
        the progress line: Keras's metrics, examples/s and the input-bound share (History and
        ``history.csv`` hold every measurement)."""
        if self._probe is not None:
            callbacks = training_callbacks(self.plan.global_batch, self._probe,
                                           gpu=self._gpus > 0, pipeline=self._train_in_use,
                                           peak=self._peak)
        else:  # op determinism: no probe, so no input-stall figures to give
            callbacks = [ThroughputCallback(self.plan.global_batch, peak=self._peak),
                         *([GpuStatsCallback()] if self._gpus else [])]
        workdir = self.config.workdir
        if workdir is None:
            return [*callbacks, ProgressLine()]
        self._hold_workdir()
        if self._earlier[0]:  # once: later fits of this run continue its own results
            keep_earlier_results(workdir)
            self._earlier = ([], 0)
        config = self.config
        callbacks += backup_callbacks(workdir, monitor=self.plan.monitor, keep=config.keep,
                                      copy_to=config.copy_to, copy_keep=config.copy_keep)
        callbacks.append(_ResumeCheck(self.plan.resume_epoch))
        if self._facts.chief:
            callbacks.append(keras.callbacks.CSVLogger(str(Path(workdir) / HISTORY_FILE),
                                                       append=self.plan.resume_epoch > 0
                                                       or self.plan.resume_steps > 0))
        callbacks.append(ProgressLine())
        return callbacks

    def fit(self, model, epochs: int = 1, *, steps_per_epoch: int | None = None,
            callbacks=(), verbose="auto", **fit_options):
        """Train ``model`` (compiled by :meth:`compile`) on the training pipeline.

        Args:
            model: The compiled model.
            epochs: Epochs in all, those a restored backup holds included. Defaults to 1.
            steps_per_epoch: Batches per epoch. Defaults to None: one pass of the split.
            callbacks: More callbacks, after the Run's. Defaults to ().
            verbose: As for ``keras.Model.fit``. Defaults to "auto".
            **fit_options: Other ``keras.Model.fit`` arguments.

        Returns:
            The ``History``.

        Raises:
            tfopt.errors.InvalidArgumentError: The training split's length is unknown and no
                ``steps_per_epoch`` is given.
        """
        if self._data is not None:
            return self._fit_data(model, epochs, steps_per_epoch, callbacks, verbose,
                                  fit_options)
        spe = int(getattr(model, "steps_per_execution", 1) or 1)
        steps = self._steps(steps_per_epoch)
        if steps > spe and steps % spe:
            # Keras 3 runs an epoch as whole calls of spe steps: asked for 5 steps at 4 per
            # call it trains 8. Whole calls it is, rounded down: the stream repeats and goes
            # on, so the batches left out of one epoch open the next
            logger.info("an epoch of %d steps: %d whole calls of steps_per_execution=%d",
                        steps // spe * spe, steps // spe, spe)
            steps = steps // spe * spe
        # the pipeline shuffles; Keras's shuffle=True only warns that it ignores a dataset
        fit_options.setdefault("shuffle", False)
        # a cache serves only the passes after the one that fills it: a fit of one pass or
        # less reads each pipeline without it (cache="auto" only)
        remaining = max(0, int(epochs) - self.plan.resume_epoch)
        batches = -(-steps // spe) * spe
        train = self._cache_if_read("train", self._train_builder,
                                    remaining * batches * self.plan.global_batch)
        validation = self._validation_for(remaining)
        with self._entered():
            return self._fit_stream(
                model, lambda skip: self._train_dataset(steps, spe, train, skip), epochs,
                steps, batches, validation, callbacks, verbose, fit_options)

    def _fit_data(self, model, epochs, steps_per_epoch, callbacks, verbose, fit_options):
        """``fit`` on arrays, a DataFrame or a dataset (see :meth:`fit`)."""
        data = self._data
        spe = int(getattr(model, "steps_per_execution", 1) or 1)
        fit_options.setdefault("shuffle", False)  # the stream shuffles (or the user's dataset)
        global_batch = self.plan.global_batch
        if isinstance(data, MemoryData):
            data.check(model)
            steps = steps_per_epoch or self.steps_per_epoch
            if steps > spe and steps % spe:
                steps = steps // spe * spe  # whole calls, as for shards (the stream goes on)
            batches = -(-steps // spe) * spe

            # every worker reads the whole stream of global batches and keeps its slice of
            # each (data sharding), so each skips all the batches trained before
            def stream(skip):
                return self._instrumented(data.train(
                    model, global_batch, drop_remainder=self.plan.replicas > 1,
                    seed=self._stream_seed(), skip_batches=skip))

            validation = data.validation(model, global_batch)
        else:
            if data.input.facts.endless and steps_per_epoch is None:
                raise InvalidArgumentError(
                    f"steps_per_epoch=None: the training dataset ({data.input.facts.shown}) "
                    "repeats forever; pass run.fit(model, epochs, steps_per_epoch=N)")
            pass_steps = self.steps_per_epoch
            steps = steps_per_epoch or pass_steps
            batches = None
            if steps is not None:
                # one stream for the fit (the dataset repeated, each pass reshuffled by its
                # own shuffles): epochs of whole calls, as for shards, and a resumed run
                # placed after the batches its backup took
                if steps > spe and steps % spe:
                    steps = steps // spe * spe
                batches = -(-steps // spe) * spe

            def stream(skip):
                return self._instrumented(data.train(
                    global_batch, repeat=steps is not None, pass_steps=pass_steps,
                    resume_batches=skip if steps is not None else 0))

            validation = data.validation(global_batch)
        with self._entered():
            return self._fit_stream(model, stream, epochs, steps, batches, validation,
                                    callbacks, verbose, fit_options)

    def _instrumented(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
        return dataset if self._probe is None else self._probe.instrument(dataset)

    def _fit_stream(self, model, stream, epochs: int, steps: int | None, batches: int | None,
                    validation, callbacks, verbose, fit_options):
        """``model.fit`` on ``stream(skip)`` (the training stream started ``skip`` batches in).

        A run resumed from a backup taken mid-epoch (on SIGTERM) first trains the steps left
        of that epoch, then the epochs after it: the batches, steps and weights of an
        uninterrupted run. The two fits share one set of callbacks (the backup is kept between
        them). SIGTERM and Ctrl-C get their own handlers back however the fit ends.
        """
        start = self.plan.resume_epoch
        done = self.plan.resume_steps if not self._fitted else 0
        every = [*self.callbacks(), *callbacks]
        backup = next((c for c in every if isinstance(c, AtomicBackupAndRestore)), None)
        check = next((c for c in every if isinstance(c, _ResumeCheck)), None)
        common = dict(validation_data=validation, callbacks=every, verbose=verbose,
                      **fit_options)
        try:
            if not done or batches is None or done >= batches or int(epochs) <= start:
                if done:
                    logger.warning("the backup holds %d steps of epoch %d: that epoch is "
                                   "trained again from its first step", done, start + 1)
                return model.fit(stream(start * (batches or 0)), epochs=epochs,
                                 steps_per_epoch=steps, **common)
            logger.info("resuming at step %d of epoch %d: its %d steps left first", done + 1,
                        start + 1, batches - done)
            keep = backup.delete_checkpoint
            backup.delete_checkpoint = False  # the backup lives on between the two fits
            try:
                first = model.fit(stream(start * batches + done), initial_epoch=start,
                                  epochs=start + 1, steps_per_epoch=batches - done, **common)
            finally:
                backup.delete_checkpoint = keep
            if int(epochs) == start + 1:
                return first
            if check is not None:
                check.expected_epoch = start + 1
            rest = model.fit(stream((start + 1) * batches), initial_epoch=start + 1,
                             epochs=epochs, steps_per_epoch=steps, **common)
            for key, values in first.history.items():
                rest.history[key] = [*values, *rest.history.get(key, [])]
            rest.epoch = [*first.epoch, *rest.epoch]
            return rest
        finally:
            self._fitted = True
            if backup is not None:
                backup.stop_watching()

    def _stream_seed(self) -> int | None:
        """The arrays' shuffle seed: the run's, else one every worker shares (each must draw
        the same order for the strategy to split its batches), else none."""
        if self.config.seed is not None:
            return self.config.seed
        return 0 if self.plan.workers > 1 else None

    # -- the parts ---------------------------------------------------------------------------

    def _steps(self, steps_per_epoch: int | None) -> int:
        steps = steps_per_epoch or self.steps_per_epoch
        if steps is None:
            raise InvalidArgumentError(
                f"{self.config.source}: the training split's length is unknown (no record "
                "counts): pass steps_per_epoch= to fit")
        return steps

    def _cache_if_read(self, name: str, builder: PipelineBuilder,
                       examples: int | None) -> PipelineBuilder:
        """``builder``, or the same pipeline planned without its cache for a fit that reads
        ``examples`` examples in all, which would never read from it
        (:meth:`PipelineBuilder.for_fit`; the rule: :func:`tfopt.rules.keeps_cache`). Only
        under ``cache="auto"``: a cache asked for is kept. The planner alone runs again: no
        file is read."""
        if builder.keeps_cache(examples):
            return builder
        if name not in self._uncached:
            logger.info("the %s pipeline runs without its %s cache in this fit: it reads %s "
                        "examples, one pass or less, and a cache serves only the passes after "
                        "the one that fills it", name, builder.plan.cache.value, f"{examples:,}")
            self._uncached[name] = builder.for_fit(examples)
        return self._uncached[name]

    def _validation_for(self, epochs: int) -> tf.data.Dataset | None:
        """The evaluation dataset for a fit of ``epochs`` more epochs (one pass each): the
        planned one, or the same without its cache where those passes would not read it."""
        if self._eval_builder is None:
            return None
        records = self._eval_builder.pass_examples
        builder = self._cache_if_read("validation", self._eval_builder,
                                      epochs * records if records else None)
        if builder is self._eval_builder:
            return self.validation
        if self._uncached_validation is None:
            self._uncached_validation = builder.build()
        return self._uncached_validation

    def _train_dataset(self, steps: int, spe: int, builder: PipelineBuilder | None = None,
                       skip: int | None = None) -> tf.data.Dataset:
        """The training stream for epochs of ``steps`` batches run ``spe`` per call, started
        ``skip`` batches in (default: after the epochs the restored backup holds), from
        ``builder`` (the training pipeline's by default).

        Keras 3 runs an epoch as whole calls of ``spe`` steps, so it takes ``spe`` x
        ceil(``steps`` / ``spe``) batches, and each worker takes its share of every global
        batch (the strategy splits each over the workers).
        """
        builder = builder or self._train_builder
        self._train_in_use = builder
        batches = -(-steps // spe) * spe
        skip = self.plan.resume_epoch * batches if skip is None else skip
        key = (steps, spe, builder is self._train_builder, skip)
        if key not in self._train_cache:
            taken = skip * self.plan.global_batch // self.plan.workers
            if taken:
                logger.info("the training stream resumes after %d steps of %d per epoch: %d "
                            "examples skipped where the pipeline shuffles", skip, steps, taken)
            dataset = builder.build(resume_examples=taken)
            self._train_cache[key] = (dataset if self._probe is None
                                      else self._probe.instrument(dataset))
        return self._train_cache[key]

    def _spe(self) -> int:
        """steps_per_execution as compiled, else as planned (1 while a trial is pending)."""
        return self._compiled_spe or self.plan.steps_per_execution or 1

    def _rewrite_batch_norm(self, model) -> None:
        mode = self.plan.batch_norm
        if mode is BatchNorm.FUSED:
            fuse_batch_norm(model)
        elif mode is BatchNorm.SYNCHRONIZED:
            synchronize_batch_norm(model)

    def _trial_image_size(self) -> int | None:
        size = self.config.image_size
        if isinstance(size, tuple):
            return size[0] if size[0] == size[1] else None
        return size

    def _spe_key(self, model) -> dict:
        key = {"params": int(model.count_params()), "layers": len(model.layers),
               "global_batch": self.plan.global_batch, "policy": self.plan.policy,
               "replicas": self.plan.replicas, "batch_norm": self.plan.batch_norm.value,
               "image_size": self._trial_image_size()}
        if self._data is not None:
            key["source"] = self._data.kind.value
        return key

    def _resolve_steps_per_execution(self, model, optimizer=None, loss=None, metrics=None,
                                     compile_options=None) -> int:
        """The plan's value; where it asks for a trial, a cached one for this model, else the
        trial (on clones of the model, their batch norm rewritten the same), kept."""
        if self.plan.spe_source is not SpeSource.TRIAL:
            return self.plan.steps_per_execution
        key = self._spe_key(model)
        cached = read_spe_choice(self.config.workdir, key)
        if cached is not None:
            self._spe_trial = cached.rates
            if cached.policy is not None:
                self._use_policy(model, cached.policy, cached.policy_rates, "an earlier trial")
            self._replan(cached_steps_per_execution=cached.value)
            return self.plan.steps_per_execution

        clone = functools.partial(self._clone, model)
        policy = policy_rates = None
        if self._data is None:
            spe, rates = tune_steps_per_execution(clone, self.plan.global_batch,
                                                  self._trial_image_size(),
                                                  max(2, self.num_classes),
                                                  seed=self.config.seed or 0)
        else:
            def compile_clone(copy, steps_per_execution):
                _compile_copy(copy, steps_per_execution, False, optimizer, loss, metrics,
                              compile_options)

            if self._trial_precision():
                # the policy the machine suggests against float32, on this model and data
                policy, spe, joint = tune_precision_and_steps_on(
                    clone, compile_clone, self._trial_batches(model),
                    (self.plan.policy, "float32"))
                rates = {c: rate for (p, c), rate in joint.items() if p == policy}
                policy_rates = {p: max(rate for (q, _), rate in joint.items() if q == p)
                                for p, _ in joint}
                self._use_policy(model, policy, policy_rates, "the trial")
            else:
                spe, rates = tune_steps_per_execution_on(clone, compile_clone,
                                                         self._trial_batches(model))
        self._spe_trial = rates
        if self.config.workdir is not None and self._facts.chief:
            self._hold_workdir()
            write_spe_choice(self.config.workdir, key, spe, rates, policy=policy,
                             policy_rates=policy_rates)
        reason = ("the trial's choice: the smallest within 3 % of the fastest "
                  "(run.steps_per_execution_trial has the rates)")
        spe, _, reason = divide_epoch(spe, SpeSource.TRIAL, reason, self._facts)
        self.plan = _with_trial(self.plan, spe, reason)
        return spe

    def _clone(self, model, policy=None):
        """A copy of ``model`` for a trial: new weights, the run's policy (or ``policy``), its
        batch norm rewritten as the run's."""
        copy = copy_model(model)
        if policy is not None and policy != self.plan.policy:
            compute_in(copy, policy)
        self._rewrite_batch_norm(copy)
        return copy

    def _check_model_copies(self, model) -> None:
        """Where a trial is planned, make sure the model can be copied for it; where it cannot,
        replan without trials (named in ``describe()``) instead of failing the compile."""
        if self.plan.spe_source is not SpeSource.TRIAL and self.plan.jit_compile is not None:
            return
        try:
            copy_model(model)
        except (TypeError, ValueError, NotImplementedError, KeyError) as error:
            text = " ".join(str(error).split())
            self._replan(copy_refused=f"{type(error).__name__}: {text[:160]}"
                                      f"{'...' if len(text) > 160 else ''}")

    def _resolve_jit_compile(self, model, spe: int, optimizer, loss, metrics,
                             compile_options) -> bool | str:
        """The plan's ``jit_compile``; where it asks for a trial: off for a model with layers
        XLA cannot compile or batches that change shape, else a cached trial's choice for this
        model, else :func:`~tfopt.tune.xla.trial_xla` on clones, kept."""
        if self.plan.jit_compile is not None:
            return self.plan.jit_compile
        blockers = xla_blockers(model)
        if blockers:
            return self._decide_xla(False, (
                f"off: layers XLA cannot compile ({_named(blockers)}); Keras compiles such a model "
                "without XLA whatever is asked"))
        batches = self._trial_batches(model)
        axes = variable_axes(batches.element_spec)
        if axes and len(_batch_shapes(batches)) > 1:
            return self._decide_xla_by_plan(variable_axes=tuple(axes))
        # the input's own rate, read whether or not a cached choice follows: each read opens
        # an iterator, which draws the dataset's shuffle seeds, and a rerun must draw as many
        # as the first run did to resume on the same stream
        feed = input_rate(self._trial_stream(model))
        key = {**self._spe_key(model), "steps_per_execution": spe}
        cached = read_xla_choice(self.config.workdir, key)
        if cached is not None:
            self._xla_trial = cached.rates
            return self._decide_xla_by_plan(cached.reason, cached_jit_compile=cached.chosen)
        steps = self.steps_per_epoch
        epoch_examples = (steps * self.plan.global_batch
                          if steps is not None and self.plan.global_batch else None)
        trial = trial_xla(functools.partial(self._clone, model),
                          functools.partial(_compile_copy, optimizer=optimizer, loss=loss,
                                            metrics=metrics, compile_options=compile_options),
                          batches, spe, policy=self.plan.policy,
                          epoch_examples=epoch_examples, feed=feed)
        reason = trial.reason
        if trial.rates:
            fed = f", the input alone {feed:.1f}" if feed is not None else ""
            reason += (f" (examples/s with XLA {trial.rates[True]:.1f}, without "
                       f"{trial.rates[False]:.1f}{fed}: run.xla_trial)")
        self._xla_trial = dict(trial.rates)
        if self.config.workdir is not None and self._facts.chief:
            self._hold_workdir()
            write_xla_choice(self.config.workdir, key,
                             XlaChoice(trial.chosen, reason, dict(trial.rates)))
        return self._decide_xla(trial.chosen, reason)

    def _decide_xla(self, chosen: bool, reason: str) -> bool:
        self.plan = dataclasses.replace(self.plan, jit_compile=chosen, xla_reason=reason)
        return chosen

    def _decide_xla_by_plan(self, detail: str | None = None, **facts) -> bool:
        """Record ``facts`` found at compile and take the planner's XLA rule for them, leaving
        the rest of the plan (a trial's steps_per_execution among it) as it is."""
        self._facts = dataclasses.replace(self._facts, **facts)
        chosen, reason = plan_jit_compile(self.config, self._facts)
        return self._decide_xla(chosen, f"{reason}: {detail}" if detail else reason)

    def _trial_precision(self) -> bool:
        """Whether the trial times the policy too: an automatic choice of a half-precision
        policy, for data the trial can feed (not shards' synthetic images)."""
        return (self.config.precision == AUTO and self.plan.policy != "float32"
                and self._data is not None)

    def _keep_recurrent_untried_in_float32(self, model) -> None:
        """On a CPU, a recurrent model whose half-precision policy no trial will time computes
        in float32: a recurrent layer runs one small matrix product per time step, too small
        for bfloat16's faster products to pay for the casts around each (a trial that runs
        keeps or drops the policy by measurement instead)."""
        if (self.config.precision != AUTO or self.plan.policy == "float32" or self._gpus
                or self.plan.spe_source is SpeSource.TRIAL):
            return
        recurrent = recurrent_layers(model)
        if not recurrent:
            return
        compute_in(model, "float32")
        self._replan(policy="float32", policy_reason=(
            f"untried: {self.plan.policy} was the CPU's choice, but the model's "
            f"recurrent layers ({_named(recurrent)}) run one small matrix product per time step, too small "
            "to pay for the casts half precision adds, and no trial times it in an epoch this "
            "short"))

    def _use_policy(self, model, policy: str, rates: dict[str, float], whose: str) -> None:
        """Make the run (and ``model``) compute under the trial's ``policy``."""
        self._policy_trial = dict(rates)
        if policy == self.plan.policy:
            self._replan(policy_reason=(
                f"{self.plan.policy_reason}; kept by {whose}: at least {HALF_PRECISION_GAIN:g}x float32's rate on this model and "
                "data"))
            return
        compute_in(model, policy)
        self._replan(policy=policy, policy_reason=(
            f"{whose}'s choice on this model and data: {self.plan.policy} was not "
            f"{HALF_PRECISION_GAIN:g}x float32's rate, the least a half-precision policy must "
            "gain to be kept (run.precision_trial has the rates)"))

    def _trial_stream(self, model) -> tf.data.Dataset:
        """The training batches as the fit reads them, not held: the input's own rate."""
        if isinstance(self._data, MemoryData):
            return self._data.trial_stream(model, self.plan.global_batch)
        return self._data.trial_stream(self.plan.global_batch)

    def _trial_batches(self, model) -> tf.data.Dataset:
        """A few real batches of the training data for the trials (read once for this model,
        held in memory: each read of a dataset opens an iterator, which draws its shuffles'
        seeds)."""
        count = 4
        held = self._held_trial_batches
        if held is not None and held[0] is model:
            return held[1]
        if isinstance(self._data, MemoryData):
            batches = self._data.trial_batches(model, self.plan.global_batch, count)
        else:
            batches = self._data.trial_batches(self.plan.global_batch, count)
        self._held_trial_batches = (model, batches)
        return batches

    def _replan(self, **facts) -> None:
        self._facts = dataclasses.replace(self._facts, **facts)
        self.plan = plan_run(self.config, self._facts)


def _compile_copy(copy, steps_per_execution: int, jit_compile: bool, optimizer=None, loss=None,
                  metrics=None, compile_options=None) -> None:
    """Compile a trial's copy of the model as the user compiles it (fresh optimizer, loss and
    metric objects: a copy must not share the user's state)."""
    copy.compile(optimizer=_fresh(optimizer), loss=_fresh(loss), metrics=_fresh(metrics),
                 steps_per_execution=steps_per_execution, jit_compile=jit_compile,
                 **(compile_options or {}))


def _named(names: list[str], shown: int = 3) -> str:
    """The first ``shown`` of ``names``, quoted, and how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(repr(name) for name in names[:shown]) + more


def _batch_shapes(batches) -> set:
    """The distinct shapes of ``batches``' elements (each as a tuple of its parts' shapes)."""
    return {tuple(tuple(part.shape) for part in tf.nest.flatten(batch)) for batch in batches}


def _fresh(value):
    """A new copy of a Keras optimizer, loss or metric (a clone's must not share the user's
    state); names and plain functions as they are."""
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(item) for item in value)
    if isinstance(value, dict):
        return {key: _fresh(item) for key, item in value.items()}
    get_config = getattr(value, "get_config", None)
    if get_config is None or isinstance(value, str):
        return value
    return type(value).from_config(get_config())


def _xla_state(jit_compile) -> str:
    return {None: "timed by a trial at compile", True: "on", False: "off"}.get(
        jit_compile, "auto")


def _with_trial(plan: RunPlan, spe: int, reason: str) -> RunPlan:
    return dataclasses.replace(plan, steps_per_execution=spe, spe_reason=reason)


def _op_determinism() -> bool:
    """Whether ``tf.config.experimental.enable_op_determinism()`` is in force (TensorFlow
    exports only the setter; the reader is in its framework module)."""
    return op_determinism_enabled()


def _count_classes(source) -> int:
    """Classes from the largest label in the training shards (no manifest class names)."""
    spec = {source.label_key: tf.io.FixedLenFeature([], tf.int64)}
    reader = tf.data.TFRecordDataset(source.files, tf_compression_type(source.compression))
    labels = reader.map(lambda r: tf.io.parse_single_example(r, spec)[source.label_key])
    return max(2, int(labels.reduce(tf.constant(0, tf.int64), tf.maximum)) + 1)
