"""The data side of a :class:`tfopt.Run` for sources that are not TFRecord shards: NumPy arrays
and DataFrames (:class:`MemoryData`) and ``tf.data`` datasets (:class:`DatasetData`).

Each is made from a source read once (:func:`tfopt.data.inputs.read_input`) and answers what
``Run`` asks of its data: the steps of an epoch, the training stream for a fit (resumed after
the epochs a backup holds), the validation data, real batches for the ``steps_per_execution``
trial, and the lines ``describe()`` prints. The model is known when the streams are built, so a
DataFrame's columns reach the model as one matrix or as named inputs, whichever it takes.
"""

from __future__ import annotations

import logging

import tensorflow as tf

import tfopt.rules as rules
from tfopt._system import available_memory
from tfopt.data.input_pipeline import array_batches, array_steps, dataset_for_fit
from tfopt.data.inputs import ArraysInput, DatasetInput, InputKind, held_out, read_input
from tfopt.errors import InvalidArgumentError

logger = logging.getLogger("tfopt")

__all__ = ["DatasetData", "MemoryData", "training_data"]


def model_input_names(model) -> list[str] | None:
    """The names of a functional model's inputs, or None for a model without named inputs."""
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        return None
    names = [getattr(tensor, "name", None) for tensor in inputs or []]
    return names if names and all(names) else None


class MemoryData:
    """Arrays or a DataFrame held in memory, with the validation held out or given."""

    def __init__(self, train: ArraysInput, validation: ArraysInput | None, held: float | None):
        self.input = train
        self.validation_input = validation
        self.held = held

    @property
    def kind(self) -> InputKind:
        return self.input.facts.kind

    def steps_per_epoch(self, global_batch: int, drop_remainder: bool) -> int:
        return array_steps(len(self.input), global_batch, drop_remainder)

    def train(self, model, global_batch: int, *, drop_remainder: bool, seed: int | None,
              skip_batches: int) -> tf.data.Dataset:
        x = self.input.features(model_input_names(model))
        return array_batches(self.input, x, global_batch, training=True, seed=seed,
                             drop_remainder=drop_remainder, skip_batches=skip_batches)

    def validation(self, model, global_batch: int) -> tf.data.Dataset | None:
        if self.validation_input is None:
            return None
        x = self.validation_input.features(model_input_names(model))
        # a second copy of the validation set, as batches, where it fits the cache's share
        # of the RAM budget: every epoch's evaluation then reads it without gathering
        keep = rules.cache_fits(self.validation_input.facts.nbytes or 0,
                                rules.default_ram_budget(available_memory()))
        return array_batches(self.validation_input, x, global_batch, training=False,
                             keep_batches=keep)

    def check(self, model) -> None:
        """Refuse (before anything trains) a DataFrame whose columns this model cannot take."""
        self.input.features(model_input_names(model))
        if self.validation_input is not None:
            self.validation_input.features(model_input_names(model))

    def trial_stream(self, model, global_batch: int) -> tf.data.Dataset:
        """Training batches as the fit reads them (a fixed seed), for the trials."""
        x = self.input.features(model_input_names(model))
        return array_batches(self.input, x, global_batch, training=True, seed=0,
                             drop_remainder=True)

    def trial_batches(self, model, global_batch: int, count: int) -> tf.data.Dataset:
        return self.trial_stream(model, global_batch).take(count).cache()

    def describe(self, global_batch: int, drop_remainder: bool) -> list[str]:
        facts = self.input.facts
        steps = self.steps_per_epoch(global_batch, drop_remainder)
        kind = "a DataFrame" if facts.kind is InputKind.DATAFRAME else "arrays"
        last = ("the last partial batch left out: every step takes the whole global batch"
                if drop_remainder and len(self.input) % global_batch else
                "the last batch partial, as model.fit(x, y) makes it"
                if len(self.input) % global_batch else "")
        lines = [f"data         {kind} in memory, {len(self.input):,} examples: kept in "
                 "memory, shuffled anew each epoch, each batch gathered in one op",
                 f"epoch        {steps} steps of the global batch" + (f" ({last})" if last
                                                                      else "")]
        if facts.kind is InputKind.DATAFRAME:
            lines.append(f"columns      {len(self.input.columns)} feature columns, as one "
                         "matrix in column order, or as named inputs when the model has an "
                         "input named after each")
        return lines

    def validation_reason(self) -> str | None:
        if self.validation_input is None:
            return None
        if self.held is not None:
            return (f"the last {self.held:g} of the examples "
                    f"({len(self.validation_input):,}), held out as Keras's "
                    "validation_split does")
        return f"the given {self.validation_input.facts.shown}"


class DatasetData:
    """A ``tf.data.Dataset`` the user wrote, trained on as ``model.fit(dataset)`` would."""

    def __init__(self, train: DatasetInput, validation: DatasetInput | None, batch_size):
        self.input = train
        self.validation_input = validation
        # an unbatched dataset is batched here; a batched one keeps its batches unless a
        # batch_size was given, which then re-batches its examples
        self.keeps_batches = train.facts.batched and batch_size is None

    @property
    def kind(self) -> InputKind:
        return InputKind.DATASET

    def own_batch(self) -> int | None:
        """The global batch the dataset brings, when it keeps its own (None: unknown)."""
        return self.input.facts.batch_size if self.keeps_batches else None

    def steps_per_epoch(self, global_batch: int | None) -> int | None:
        """Batches in one pass, when TensorFlow knows the dataset's length."""
        facts = self.input.facts
        if facts.endless:
            return None
        count = int(self.input.dataset.cardinality())
        if count < 0:
            return None
        if self.keeps_batches:
            return count
        if facts.batched:
            return None  # re-batched: its examples are not counted before it is read
        return -(-count // global_batch)

    def _batch_for(self, given: DatasetInput, global_batch: int | None) -> int | None:
        """The batch ``fit`` reads ``given`` in: None keeps the dataset's own."""
        if given.facts.batched and self.keeps_batches:
            return None
        return global_batch

    def train(self, global_batch: int | None, *, repeat: bool, pass_steps: int | None,
              resume_batches: int) -> tf.data.Dataset:
        """The training stream.

        ``repeat``: one stream for the fit, the dataset repeated (each pass reshuffled by its
        own shuffles), started ``resume_batches`` batches in: with ``pass_steps`` (batches in
        one pass) known, whole passes by drawing their shuffle seeds and the rest read and
        dropped; else all read and dropped. Not ``repeat``: as given, each epoch a new
        iteration, as ``model.fit(dataset)`` reads it (a resumed run's shuffles then start
        from their seeds again).
        """
        batch = self._batch_for(self.input, global_batch)
        if not repeat:
            return dataset_for_fit(self.input, batch_size=batch)
        if pass_steps is None:
            return dataset_for_fit(self.input, batch_size=batch, repeat=True,
                                   skip_batches=resume_batches)
        passes, batches = divmod(resume_batches, pass_steps)
        return dataset_for_fit(self.input, batch_size=batch, repeat=True, skip_passes=passes,
                               skip_batches=batches)

    def validation(self, global_batch: int) -> tf.data.Dataset | None:
        if self.validation_input is None:
            return None
        return dataset_for_fit(self.validation_input,
                               batch_size=self._batch_for(self.validation_input, global_batch))

    def trial_stream(self, global_batch: int | None) -> tf.data.Dataset:
        """The dataset batched as the fit reads it, for the trials."""
        return dataset_for_fit(self.input, batch_size=self._batch_for(self.input, global_batch))

    def trial_batches(self, global_batch: int | None, count: int) -> tf.data.Dataset:
        # read once into memory: the trial times the model, not the user's pipeline
        return self.trial_stream(global_batch).take(count).cache()

    def describe(self, global_batch: int | None) -> list[str]:
        facts = self.input.facts
        steps = self.steps_per_epoch(global_batch)
        if self.keeps_batches:
            batching = "its own batches kept as the global batch"
        elif facts.batched:
            batching = f"re-batched to the global batch {global_batch} (batch_size= given)"
        else:
            batching = f"batched here to the global batch {global_batch}"
        if facts.endless:
            epoch = "endless: fit needs steps_per_epoch; one stream for the fit"
        elif steps is not None:
            epoch = (f"{steps} steps, one pass; the dataset repeated into one stream for the "
                     "fit, each pass reshuffled by its own shuffles as a new iteration would be")
        else:
            epoch = ("its length unknown before it is read: each epoch iterates it anew, as "
                     "model.fit does (with steps_per_epoch= given, one repeated stream)")
        return [f"data         {facts.shown}: its elements, order and shuffling kept as "
                f"written; {batching}; prefetched; tf.data's autotuner off, as in tfopt's own "
                "pipelines (its AUTOTUNE stages one thread per core: with the autotuner on, "
                "TensorFlow now and then runs a pipeline on one core, and holds an iterator's "
                "release at the end of a fit)",
                f"epoch        {epoch}"]

    def validation_reason(self) -> str | None:
        if self.validation_input is None:
            return None
        return f"the given {self.validation_input.facts.shown}"


def _none_or_auto(validation) -> bool:
    """``validation`` asks for no data of its own (compared by identity and type: a DataFrame
    or an array compared with ``==`` would answer element by element)."""
    return validation is None or (isinstance(validation, str) and validation == "auto")


def training_data(source, validation, *, label, batch_size, role_of_validation="validation"):
    """The :class:`MemoryData` or :class:`DatasetData` of an in-memory or dataset source.

    ``validation``: None, "auto" (none: such a source has no split of its own), a fraction held
    out from the end (arrays and DataFrames), or another source of the same kinds.

    Raises:
        InvalidArgumentError: a bad source (see :func:`tfopt.data.inputs.read_input`), a
            validation fraction outside (0, 1) or given for a dataset, or a validation source
            of another kind.
    """
    given = read_input(source, label=label)
    fraction = held_out(validation)
    if isinstance(given, DatasetInput):
        if fraction is not None:
            raise InvalidArgumentError(
                f"validation={validation}: a fraction is held out of arrays or a DataFrame; "
                "for a tf.data.Dataset pass validation= another dataset")
        checked = None
        if not _none_or_auto(validation):
            checked = read_input(validation, role=role_of_validation)
            if not isinstance(checked, DatasetInput):
                raise InvalidArgumentError(
                    f"validation={checked.facts.shown}: expected a tf.data.Dataset of (x, y), "
                    "as the training source is one")
        return DatasetData(given, checked, batch_size)
    if fraction is not None:
        train, held = given.split(fraction)
        return MemoryData(train, held, fraction)
    if _none_or_auto(validation):
        return MemoryData(given, None, None)
    label_of_validation = label if given.facts.kind is InputKind.DATAFRAME else None
    checked = read_input(validation, label=label_of_validation, role=role_of_validation)
    if not isinstance(checked, ArraysInput):
        raise InvalidArgumentError(
            f"validation={checked.facts.shown}: expected the same kind as the training source "
            f"({given.facts.kind.value}), or a fraction to hold out")
    return MemoryData(given, checked, None)
