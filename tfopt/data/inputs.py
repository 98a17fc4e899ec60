"""What ``tfopt.Run`` trains on besides TFRecord shards, read once into facts: NumPy arrays (as
``model.fit(x, y)`` takes them), a pandas DataFrame with its label column, or a
``tf.data.Dataset`` of ``(x, y)`` or ``(x, y, sample_weight)``.

:func:`read_input` checks the source (before anything is trained or written) and returns an
:class:`ArraysInput` or :class:`DatasetInput` whose ``facts`` the planner reads; the tf.data
pipelines are built from them by :mod:`tfopt.data.input_pipeline`. A source is named in every
message by its type and shape (:func:`shown`), never printed whole. Arrays and DataFrames stay
in memory: they are already there, and a copy through files would only add a write and a read.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence

import numpy as np

from tfopt.errors import InvalidArgumentError

__all__ = ["ArraysInput", "DatasetInput", "InputFacts", "InputKind", "read_input", "shown"]


class InputKind(str, enum.Enum):
    """The kinds of source ``tfopt.Run`` takes."""

    SHARDS = "shards"  # TFRecord files: tfopt.data.pipeline.PipelineBuilder
    ARRAYS = "arrays"  # (x, y[, sample_weight]): arrays or dicts of arrays
    DATAFRAME = "dataframe"  # a pandas DataFrame and its label column(s)
    DATASET = "dataset"  # a tf.data.Dataset of (x, y[, sample_weight])


@dataclasses.dataclass(frozen=True)
class InputFacts:
    """What was read of an in-memory or tf.data source; the planner decides from these.

    Attributes:
        kind: Which kind of source.
        shown: Its type and shape, as messages and ``describe()`` name it.
        examples: Examples in one pass (None: unknown, or endless).
        batched: The source arrives in batches (a batched dataset); arrays never do.
        batch_size: The dataset's own batch when it is batched and known.
        endless: The dataset repeats forever (``fit`` then needs ``steps_per_epoch``).
        weighted: Elements carry a sample weight.
        nbytes: Bytes of the arrays (None for a dataset).
    """

    kind: InputKind
    shown: str
    examples: int | None
    batched: bool = False
    batch_size: int | None = None
    endless: bool = False
    weighted: bool = False
    nbytes: int | None = None


def _shape_of(value) -> str:
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is None:
        return type(value).__name__
    dims = ", ".join("?" if d is None else str(d) for d in tuple(shape))
    return f"{getattr(dtype, 'name', dtype)}[{dims}]"


def shown(value) -> str:
    """``value`` by its type and shape, never its contents: ``tuple(uint8[60000, 28, 28],
    uint8[60000])``, ``DataFrame[1000 rows x 14 columns]``, ``Dataset``."""
    if isinstance(value, (str, bytes)) or value is None:
        text = repr(value)
        return text if len(text) <= 80 else text[:77] + "..."
    if _is_dataframe(value):
        return f"DataFrame[{len(value)} rows x {len(value.columns)} columns]"
    if isinstance(value, Mapping):
        parts = ", ".join(f"{key}: {_shape_of(item)}" for key, item in list(value.items())[:8])
        more = ", ..." if len(value) > 8 else ""
        return f"dict({parts}{more})"
    if isinstance(value, (tuple, list)):
        parts = ", ".join(shown(item) if isinstance(item, (Mapping, tuple, list))
                          else _shape_of(item) for item in list(value)[:4])
        more = ", ..." if len(value) > 4 else ""
        return f"{type(value).__name__}({parts}{more})"
    return _shape_of(value)


def _is_dataframe(value) -> bool:
    # pandas stays optional: a DataFrame is recognised by its class, without importing pandas
    return any(cls.__name__ == "DataFrame" and cls.__module__.startswith("pandas")
               for cls in type(value).__mro__)


def _is_dataset(value) -> bool:
    return any(cls.__name__ == "DatasetV2" and cls.__module__.startswith("tensorflow")
               for cls in type(value).__mro__)


def is_in_memory_or_dataset(source) -> bool:
    """Whether ``source`` is one of this module's kinds (else: TFRecord files, a path)."""
    return (_is_dataset(source) or _is_dataframe(source)
            or (isinstance(source, tuple) and not all(isinstance(s, str) for s in source))
            or isinstance(source, Mapping) or isinstance(source, np.ndarray))


# -- arrays and DataFrames --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ArraysInput:
    """``(x, y[, sample_weight])`` in memory, each an array or a dict of arrays (a DataFrame
    becomes this: its feature columns as a dict, in column order, and its label)."""

    x: object
    y: object
    sample_weight: np.ndarray | None
    facts: InputFacts
    columns: tuple[str, ...] | None = None  # a DataFrame's feature columns, in order

    def __len__(self) -> int:
        return int(self.facts.examples)

    def split(self, fraction: float) -> tuple[ArraysInput, ArraysInput]:
        """(the first part, the last ``fraction``), as Keras's ``validation_split`` cuts."""
        at = int(len(self) * (1 - fraction))
        if at == 0 or at == len(self):
            raise InvalidArgumentError(
                f"validation={fraction}: holds out {len(self) - at} of {len(self)} examples; "
                "expected a fraction that leaves examples on both sides")
        return self._part(slice(0, at)), self._part(slice(at, None))

    def _part(self, where: slice) -> ArraysInput:
        def cut(value):
            if value is None:
                return None
            if isinstance(value, Mapping):
                return {key: item[where] for key, item in value.items()}
            return value[where]

        x, y, w = cut(self.x), cut(self.y), cut(self.sample_weight)
        examples = len(range(len(self))[where])
        facts = dataclasses.replace(self.facts, examples=examples,
                                    shown=f"{self.facts.shown}[{where.start or 0}:"
                                          f"{'' if where.stop is None else where.stop}]",
                                    nbytes=_nbytes(x, y, w))
        return ArraysInput(x, y, w, facts, self.columns)

    def features(self, input_names: Sequence[str] | None):
        """``x`` as the model takes it: a DataFrame's columns as one float32 matrix in column
        order (as ``model.fit(dataframe)`` reads one), or as a dict when the model's inputs
        are named after columns. Arrays are returned as given.

        Raises:
            InvalidArgumentError: a non-numeric column that no named input takes.
        """
        if self.columns is None:
            return self.x
        if input_names and set(input_names) <= set(self.columns):
            return {name: self.x[name] for name in input_names}
        text = [name for name in self.columns if self.x[name].dtype.kind not in "biuf"]
        if text:
            raise InvalidArgumentError(
                f"source: column(s) {', '.join(map(repr, text))} are not numeric and the "
                f"model has no input named so (its inputs: {', '.join(input_names or [])}); "
                "expected numeric feature columns, or a model with one named input per "
                "column (keras.Input(name=column))")
        return np.stack([self.x[name].astype(np.float32) for name in self.columns], axis=1)


def _nbytes(*parts) -> int:
    total = 0
    for part in parts:
        if isinstance(part, Mapping):
            total += sum(int(getattr(v, "nbytes", 0)) for v in part.values())
        elif part is not None:
            total += int(getattr(part, "nbytes", 0))
    return total


def _as_array(value, where: str):
    if isinstance(value, Mapping):
        if not value:
            raise InvalidArgumentError(f"{where}=dict(): expected at least one array")
        return {str(key): _as_array(item, f"{where}[{key!r}]") for key, item in value.items()}
    if _is_dataframe(value) or type(value).__name__ == "Series":
        return value.to_numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{where}={shown(value)}: expected an array ({error})") from None
    if array.dtype == object or array.ndim == 0:
        raise InvalidArgumentError(
            f"{where}={shown(value)}: expected an array of numbers with a first axis of "
            "examples (a NumPy array, or a dict of them)")
    return array


def _lengths(value, where: str) -> dict[str, int]:
    if isinstance(value, Mapping):
        return {f"{where}[{key!r}]": len(item) for key, item in value.items()}
    return {where: len(value)}


def _read_arrays(source, role: str) -> ArraysInput:
    if not 2 <= len(source) <= 3:
        raise InvalidArgumentError(
            f"{role}={shown(source)}: expected (x, y) or (x, y, sample_weight), as "
            "model.fit(x, y) takes them")
    x = _as_array(source[0], f"{role}[0] (x)")
    y = _as_array(source[1], f"{role}[1] (y)")
    w = _as_array(source[2], f"{role}[2] (sample_weight)") if len(source) == 3 else None
    lengths = {**_lengths(x, f"{role}[0]"), **_lengths(y, f"{role}[1]"),
               **({} if w is None else _lengths(w, f"{role}[2]"))}
    if len(set(lengths.values())) != 1:
        listed = ", ".join(f"{where}: {count}" for where, count in lengths.items())
        raise InvalidArgumentError(
            f"{role}={shown(source)}: arrays of different lengths ({listed}); expected one "
            "example per row in every array")
    examples = next(iter(lengths.values()))
    if examples == 0:
        raise InvalidArgumentError(f"{role}={shown(source)}: no examples")
    facts = InputFacts(InputKind.ARRAYS, shown(source), examples, weighted=w is not None,
                       nbytes=_nbytes(x, y, w))
    return ArraysInput(x, y, w, facts)


def _read_dataframe(frame, label, role: str) -> ArraysInput:
    if label is None:
        raise InvalidArgumentError(
            f"label=None: a DataFrame {role} needs label='column' (or a list of columns); its "
            f"columns: {', '.join(map(str, list(frame.columns)[:20]))}")
    labels = [label] if isinstance(label, str) else list(label)
    missing = [name for name in labels if name not in frame.columns]
    if missing or not labels:
        raise InvalidArgumentError(
            f"label={label!r}: no column {', '.join(map(repr, missing)) or 'given'} in the "
            f"{role} {shown(frame)}; its columns: {', '.join(map(str, list(frame.columns)[:20]))}")
    if len(frame) == 0:
        raise InvalidArgumentError(f"{role}={shown(frame)}: no rows")
    columns = tuple(str(name) for name in frame.columns if name not in labels)
    if not columns:
        raise InvalidArgumentError(f"label={label!r}: leaves no feature column in {shown(frame)}")
    x = {name: frame[name].to_numpy() for name in columns}
    y = (frame[labels[0]].to_numpy() if len(labels) == 1
         else np.stack([frame[name].to_numpy() for name in labels], axis=1))
    if y.dtype.kind not in "biuf":
        raise InvalidArgumentError(
            f"label={label!r}: the label is {y.dtype}; expected numbers (encode classes as "
            "integers first)")
    facts = InputFacts(InputKind.DATAFRAME, shown(frame), len(frame), nbytes=_nbytes(x, y))
    return ArraysInput(x, y, None, facts, columns)


# -- tf.data datasets --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DatasetInput:
    """A ``tf.data.Dataset`` of ``(x, y[, sample_weight])``, kept as it is."""

    dataset: object
    facts: InputFacts


def _leading_dims(spec) -> list:
    import tensorflow as tf

    return [None if s.shape.rank in (None, 0) else s.shape[0]
            for s in tf.nest.flatten(spec)] if spec is not None else []


def _read_dataset(dataset, role: str) -> DatasetInput:
    import tensorflow as tf

    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and 2 <= len(spec) <= 3):
        raise InvalidArgumentError(
            f"{role}=Dataset with elements {spec}: expected (x, y) or (x, y, sample_weight) "
            "tuples (map the dataset to them, e.g. .map(lambda e: (e['image'], e['label'])))")
    ranks = [s.shape.rank for s in tf.nest.flatten(spec)]
    leading = [None if r in (None, 0) else s.shape[0]
               for s, r in zip(tf.nest.flatten(spec), ranks, strict=True)]
    # batched: every part has a first axis, and that axis is unknown (a partial last batch)
    # or the same size in every part (drop_remainder=True); a scalar part is one example
    batched = all(r is not None and r >= 1 for r in ranks) and (
        all(d is None for d in leading) or len(set(leading)) == 1)
    batch = leading[0] if batched and leading and leading[0] is not None else None
    cardinality = int(dataset.cardinality())
    endless = cardinality == int(tf.data.INFINITE_CARDINALITY)
    count = cardinality if cardinality >= 0 else None
    facts = InputFacts(InputKind.DATASET, f"Dataset of {_spec_shown(spec)}",
                       None if (batched or count is None) else count, batched, batch, endless,
                       weighted=len(spec) == 3)
    if batched and count is not None:
        facts = dataclasses.replace(facts, examples=None)
    return DatasetInput(dataset, dataclasses.replace(facts, batch_size=batch) if batched
                        else facts)


def _spec_shown(spec) -> str:
    import tensorflow as tf

    def one(part):
        if isinstance(part, Mapping):
            return "{" + ", ".join(f"{k}: {one(v)}" for k, v in part.items()) + "}"
        return _shape_of(part)

    return "(" + ", ".join(one(part) for part in spec) + ")" if isinstance(spec, tuple) else str(
        tf.nest.map_structure(_shape_of, spec))


def dataset_batches(dataset_input: DatasetInput) -> int | None:
    """Batches (or examples, unbatched) in one pass of the dataset when TensorFlow knows."""
    count = int(dataset_input.dataset.cardinality())
    return count if count >= 0 else None


# -- the one entry ----------------------------------------------------------------------------


def read_input(source, *, label=None, role: str = "source") -> ArraysInput | DatasetInput:
    """Read ``source`` into facts, checking it; nothing is trained or written.

    Args:
        source: ``(x, y)`` or ``(x, y, sample_weight)`` (arrays or dicts of arrays), a pandas
            DataFrame (with ``label``), or a ``tf.data.Dataset`` of such tuples.
        label: A DataFrame's label column, or a list of them. Defaults to None.
        role: The argument's name in messages ("source", "validation"). Defaults to "source".

    Raises:
        InvalidArgumentError: An element that is not ``(x, y[, w])``, arrays of different
            lengths, a label column that is missing, no examples; each names the argument
            and what was expected.
    """
    if _is_dataset(source):
        if label is not None:
            raise InvalidArgumentError(
                f"label={label!r}: only for a DataFrame {role}; a dataset's elements are "
                "(x, y[, sample_weight]) already")
        return _read_dataset(source, role)
    if _is_dataframe(source):
        return _read_dataframe(source, label, role)
    if label is not None:
        raise InvalidArgumentError(
            f"label={label!r}: only for a DataFrame {role}; arrays come as (x, y)")
    if isinstance(source, list):
        source = tuple(source)
    if isinstance(source, tuple):
        return _read_arrays(source, role)
    raise InvalidArgumentError(
        f"{role}={shown(source)}: expected TFRecord files (a tfopt dataset folder, a glob or "
        "a list of files), (x, y) arrays, a pandas DataFrame with label=, or a "
        "tf.data.Dataset of (x, y)")


def held_out(fraction) -> float | None:
    """``fraction`` when it is a validation fraction (a float in (0, 1)), else None."""
    if isinstance(fraction, bool) or not isinstance(fraction, float):
        return None
    if not (math.isfinite(fraction) and 0 < fraction < 1):
        raise InvalidArgumentError(
            f"validation={fraction}: expected a fraction of the examples to hold out, "
            "between 0 and 1 (exclusive)")
    return fraction
