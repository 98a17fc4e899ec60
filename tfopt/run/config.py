"""What a :class:`tfopt.Run` was asked for: a frozen config of intent, checked, nothing resolved.

Every choice defaults to ``"auto"``; the planner (:mod:`tfopt.run.plan`) decides it from what the
machine and the data say, and ``Run.describe()`` says what was decided and why.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from pathlib import Path

from tfopt._validate import choice, fail, is_bool, is_int, optional_whole_number, whole_number

__all__ = ["AUTO", "BatchNorm", "RunConfig"]

AUTO = "auto"
TRIAL = "trial"  # jit_compile: time XLA whatever the epoch's length
DEFAULT_BATCH_SIZE = 64  # per replica, where the data brings no batch of its own


class BatchNorm(str, enum.Enum):
    """How the model's ``BatchNormalization`` layers run."""

    AUTO = "auto"  # fused on one replica, synchronised over the global batch on several
    FUSED = "fused"  # TensorFlow's fused kernel (tfopt.fuse_batch_norm): one op, not a dozen
    SYNCHRONIZED = "synchronized"  # statistics over the global batch (synchronize_batch_norm)
    KERAS = "keras"  # as Keras builds them


_PRECISIONS = ("auto", "float32", "mixed_float16", "mixed_bfloat16")
_STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker", "tpu")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """The intent of a :class:`tfopt.Run`; two configs of the same arguments are equal anywhere.

    Attributes:
        source: What to train on: a tfopt dataset folder (from ``tfopt convert``), a glob or a
            list of TFRecord files; ``(x, y)`` or ``(x, y, sample_weight)`` arrays (or dicts
            of arrays) as ``model.fit(x, y)`` takes them; a pandas DataFrame with ``label``;
            or a ``tf.data.Dataset`` of such tuples, batched or not.
        label: A DataFrame's label column, or a list of them; None for other sources.
        image_size: Side (or ``(height, width)``) of the images the model takes; required for
            image data, None for other features.
        batch_size: Examples per replica per step; the global batch is this times the replicas.
            Defaults to None: 64, or a batched dataset's own batches (kept as the global
            batch; a batch_size given re-batches its examples).
        workdir: The run's folder: backups (a rerun resumes from them), the best model,
            ``history.csv`` and the steps_per_execution trial. Defaults to None (no backups,
            no history).
        precision: "auto" (the policy :func:`tfopt.choose_policy` picks for this hardware),
            "float32", "mixed_float16" or "mixed_bfloat16". Defaults to "auto".
        strategy: "auto" (:func:`tfopt.select_strategy`'s rules), a strategy name, or a
            :class:`~tfopt.distribute.strategy.StrategyPlan`. Defaults to "auto".
        steps_per_execution: "auto" (a trial, when an epoch is long enough to pay for it;
            cached in ``workdir``) or a number of steps per compiled call. Defaults to "auto".
        jit_compile: "auto" (XLA tried at compile on the user's batches, beside the
            steps_per_execution trial, where an epoch is long enough to pay for the trial, and
            kept only where it is faster; cached in ``workdir``), "trial" (the same trial
            whatever the epoch's length: for short fits run again and again on one
            ``workdir``, which pay for it once), True or False (Keras's ``jit_compile``).
            Defaults to "auto".
        effective_batch_size: Examples per optimizer update over all replicas, a multiple of
            the global batch: gradients are accumulated over the micro-batches in between.
            Defaults to None (one update per step).
        cache: The training pipeline's cache: "auto" (what fits the RAM budget), True, False,
            or a file path. Defaults to "auto".
        augment: "auto" or True (random-resized crops in the pipeline), False (central crops),
            or "device" (the pipeline ships squares; put ``run.augment_layer()`` first in the
            model to crop and flip on the accelerator). Defaults to "auto".
        batch_norm: "auto", "fused", "synchronized" or "keras" (:class:`BatchNorm`). Defaults
            to "auto".
        validation: "auto" (the shards' validation split when they have one), None (no
            evaluation), another source of the same kind to evaluate on, or for arrays and a
            DataFrame a fraction held out from the end (as Keras's ``validation_split``).
            Defaults to "auto".
        seed: Seed of the initial weights (set on entering ``run.scope()``), shuffling and
            crops; with one, a resumed run trains on the same data order as an uninterrupted
            one. Defaults to None (random).
        keep: The newest backups kept in ``workdir/backup``, each checksummed; a restore
            takes the newest that verifies. Defaults to 3.
        copy_to: A second location for the backups, a folder or an fsspec URL
            (``s3://bucket/run1``; ``pip install 'tfopt[remote]'``): each backup is copied
            there in a background thread, under a new name, and a rerun whose workdir is gone
            or damaged resumes from it. Needs ``workdir``. Defaults to None.
        copy_keep: The newest versions kept at ``copy_to``; None deletes nothing there.
            Defaults to None.

    Raises:
        tfopt.errors.InvalidArgumentError: A field outside what is allowed (the message names it).
    """

    source: object = dataclasses.field(compare=False)  # arrays have no equality: see source_id
    image_size: int | tuple[int, int] | None = None
    batch_size: int | None = None
    workdir: str | os.PathLike | None = None
    precision: str = AUTO
    strategy: object = AUTO
    steps_per_execution: int | str = AUTO
    jit_compile: bool | str = AUTO
    effective_batch_size: int | None = None
    cache: bool | str = AUTO
    augment: bool | str = AUTO
    batch_norm: str = BatchNorm.AUTO.value
    validation: object = dataclasses.field(default=AUTO, compare=False)
    seed: int | None = None
    keep: int = 3
    copy_to: str | os.PathLike | None = None
    copy_keep: int | None = None
    label: str | tuple[str, ...] | None = None

    def __post_init__(self):
        def set_field(name, value):
            object.__setattr__(self, name, value)

        if self.source is None:
            raise fail("source", None, "TFRecord files (a tfopt dataset folder, a glob or a "
                       "list of files), (x, y) arrays, a DataFrame or a tf.data.Dataset")
        if self.batch_size is not None:
            set_field("batch_size", whole_number(
                self.batch_size, "batch_size", 1, "a positive int (examples per replica per "
                "step) or None"))
        if self.label is not None:
            labels = (self.label,) if isinstance(self.label, str) else self.label
            if not (isinstance(labels, (list, tuple)) and labels
                    and all(isinstance(name, str) and name for name in labels)):
                raise fail("label", self.label, "a column name or a list of them")
            set_field("label", labels[0] if len(labels) == 1 else tuple(labels))
        if self.workdir is not None:
            if not isinstance(self.workdir, (str, os.PathLike)):
                raise fail("workdir", self.workdir, "a folder path, or None")
            set_field("workdir", Path(self.workdir))
        if self.precision not in _PRECISIONS:
            raise fail("precision", self.precision, f"one of {', '.join(_PRECISIONS)}")
        if isinstance(self.strategy, str) and self.strategy not in _STRATEGIES:
            raise fail("strategy", self.strategy,
                       f"one of {', '.join(_STRATEGIES)}, or a StrategyPlan")
        if self.steps_per_execution != AUTO:
            set_field("steps_per_execution", whole_number(
                self.steps_per_execution, "steps_per_execution", 1, "'auto' or an int >= 1"))
        if not (is_bool(self.jit_compile) or self.jit_compile in (AUTO, TRIAL)):
            raise fail("jit_compile", self.jit_compile, "'auto', 'trial', True or False")
        set_field("effective_batch_size", optional_whole_number(
            self.effective_batch_size, "effective_batch_size", 1))
        if not (is_bool(self.cache) or isinstance(self.cache, (str, os.PathLike))):
            raise fail("cache", self.cache, "'auto', True, False or a file path")
        if not (is_bool(self.augment) or self.augment in (AUTO, "device")):
            raise fail("augment", self.augment, "'auto', True, False or 'device'")
        set_field("batch_norm", choice(BatchNorm, self.batch_norm, "batch_norm").value)
        set_field("keep", whole_number(self.keep, "keep", 1, "a positive number of backups"))
        if self.copy_to is not None:
            if not isinstance(self.copy_to, (str, os.PathLike)) or not os.fspath(self.copy_to):
                raise fail("copy_to", self.copy_to, "a folder path or a URL (s3://bucket/run)")
            if self.workdir is None:
                raise fail("copy_to", self.copy_to, "None without a workdir (the backups it "
                           "copies are written in the workdir)")
            # a path stays as given, a URL a string: equal configs from equal arguments
            set_field("copy_to", os.fspath(self.copy_to))
        set_field("copy_keep", optional_whole_number(self.copy_keep, "copy_keep", 1,
                                                     "None or a positive number of versions"))
        if self.copy_keep is not None and self.copy_to is None:
            raise fail("copy_keep", self.copy_keep, "None without copy_to")
        if self.seed is not None and not (is_int(self.seed) and self.seed >= 0):
            raise fail("seed", self.seed, "None or an int >= 0")

    def replace(self, **changes) -> RunConfig:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    @property
    def per_replica_batch(self) -> int:
        """``batch_size``, or its default."""
        return self.batch_size if self.batch_size is not None else DEFAULT_BATCH_SIZE

    @property
    def random_crop(self) -> bool | str | None:
        """The pipeline's ``random_crop`` for this ``augment``: None leaves it to the planner."""
        return {AUTO: None, True: True, False: False, "device": "device"}[self.augment]
