"""What every workload of the corpus is made of, and the helpers they share.

A workload reproduces one public Keras training example on data it makes itself: the data step
(:attr:`Workload.make_data`) writes files or draws arrays once, from a seed; the inputs step
(:attr:`Workload.inputs`) builds what the example hands to ``fit`` (its own ``tf.data``
pipeline, arrays or DataFrame), fresh for each fit, so that a cache in one fit never serves
another; then the model is built, compiled and fitted the way the example does it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tfopt._validate import number
from tfopt.errors import OutputExistsError

__all__ = ["Data", "Workload", "count_examples", "fresh_folder", "majority_share",
           "run_counts", "scaled_count", "split_for_keras"]

MARKER = ".tfopt-workload.json"  # written in each data folder: what made it


@dataclasses.dataclass
class Data:
    """What a workload's data step made: its files and arrays, and how many examples each split
    holds as the example's ``fit`` sees them.

    Attributes:
        name: The workload's name.
        folder: Where its files are (None for a workload that writes none).
        seed: The seed everything was drawn from.
        scale: The size asked for, as a multiple of the workload's default size.
        num_train: Examples the plain fit trains on in one epoch.
        num_validation: Examples its validation pass evaluates.
        arrays: In-memory arrays the inputs step reads, by name.
        files: The files written, in the order written.
        info: Anything else the later steps need (class names, splits, paths).
    """

    name: str
    folder: Path | None
    seed: int
    scale: float
    num_train: int
    num_validation: int
    arrays: dict[str, Any] = dataclasses.field(default_factory=dict)
    files: list[Path] = dataclasses.field(default_factory=list)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def fingerprint(self) -> str:
        """SHA-256 over every array (dtype, shape, bytes) and every file (path relative to the
        folder, bytes): equal for equal data, whatever the folder."""
        digest = hashlib.sha256()
        for key in sorted(self.arrays):
            _hash_value(digest, key, self.arrays[key])
        for path in sorted(self.files):
            name = path.relative_to(self.folder).as_posix() if self.folder else path.name
            digest.update(name.encode() + b"\0")
            digest.update(path.read_bytes())
        return digest.hexdigest()


def _hash_value(digest, key: str, value) -> None:
    digest.update(key.encode() + b"\0")
    if isinstance(value, Mapping):
        for inner in sorted(value):
            _hash_value(digest, f"{key}.{inner}", value[inner])
        return
    array = np.asarray(value)
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    if array.dtype.kind in "OUS":
        digest.update("\0".join(map(str, array.ravel())).encode())
    else:
        digest.update(np.ascontiguousarray(array).tobytes())


def no_callbacks(_inputs) -> list:
    """The callbacks of an example that passes none to ``fit``."""
    return []


@dataclasses.dataclass(frozen=True)
class Workload:
    """One public Keras example reproduced on local data.

    The steps, in the order a fit calls them: ``make_data(folder, seed, scale) -> Data`` (once);
    ``inputs(data)`` (what the example builds for ``fit``, fresh for each fit);
    ``build_model(inputs) -> keras.Model`` (including the ``adapt`` calls the example makes on
    layers inside the model); ``compile(model)`` (the example's optimizer, loss and metrics,
    from ``compile_args()``); ``plain_fit(model, inputs, epochs) -> History`` (the example's own
    ``fit`` call, with ``callbacks(inputs)``: the example's callbacks, fresh, which the other
    arm passes too). ``run_inputs(inputs)`` is what :class:`tfopt.Run` receives for the same data
    (``source``, ``validation``, ``batch_size``, ``label``): what the example's ``fit``
    receives, named as Run names it.

    Attributes:
        name: Short name (the registry's key).
        kind: What sort of data: numpy, text, dataframe, featurespace, timeseries,
            image_folder, segmentation, audio, transformer.
        source: The example's page and its source file (URLs).
        scaled: What differs from the example in size, and why.
        epochs: The epochs the plain fit runs by default.
        metric: The validation metric compared (a key of ``History.history``).
        higher_is_better: True for an accuracy, False for a loss.
        baseline: ``baseline(data)``: the metric of the naive predictor on the validation split
            (the majority class's share, or the loss of predicting the training mean or class
            frequencies): what the fit has to beat.
        callbacks: ``callbacks(inputs)``: the callbacks the example passes to ``fit``, made
            anew for each fit. Defaults to none.
        learned_from: The ``History`` key that shows the data's signal was learned, where it
            is not ``metric`` (the segmentation example's validation loss trails its training
            loss by more than the signal: its module says why). Empty: ``metric``.
    """

    name: str
    kind: str
    source: tuple[str, ...]
    scaled: str
    epochs: int
    metric: str
    higher_is_better: bool
    make_data: Callable[[Path, int, float], Data]
    inputs: Callable[[Data], Any]
    build_model: Callable[[Any], Any]
    compile_args: Callable[[], dict]
    plain_fit: Callable[[Any, Any, int], Any]
    run_inputs: Callable[[Any], dict]
    baseline: Callable[[Data], float]
    callbacks: Callable[[Any], list] = no_callbacks
    learned_from: str = ""

    @property
    def learned_key(self) -> str:
        """The ``History`` key :meth:`beats_baseline` is asked about."""
        return self.learned_from or self.metric

    def compile(self, model) -> None:
        """``model.compile`` with the example's optimizer, loss and metrics."""
        model.compile(**self.compile_args())

    def beats_baseline(self, value: float, baseline: float) -> bool:
        """Clearly better than the naive predictor: an accuracy at least a quarter of the way
        from the baseline to 1, a loss at most 0.8 of the baseline's."""
        if not math.isfinite(value):
            return False
        if self.higher_is_better:
            return value >= baseline + 0.25 * (1.0 - baseline)
        return value <= 0.8 * baseline


def scaled_count(default: int, scale: float, minimum: int) -> int:
    """``default * scale`` rounded, and at least ``minimum``.

    Raises:
        tfopt.errors.InvalidArgumentError: ``scale`` is not a positive finite number.
    """
    scale = number(scale, "scale", low=0, open_low=True, expected="a positive number")
    return max(minimum, round(default * scale))


def fresh_folder(folder, name: str, seed: int, scale: float) -> Path:
    """``folder``, created empty: a folder a workload made before (its marker file says so) is
    emptied, any other non-empty folder refused rather than deleted.

    Raises:
        tfopt.errors.OutputExistsError: ``folder`` holds files no workload wrote.
    """
    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()):
        if not (folder / MARKER).is_file():
            raise OutputExistsError(f"{folder}: not empty, and not a workload's data folder "
                                    f"(no {MARKER}): choose another folder")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text(json.dumps({"workload": name, "seed": seed, "scale": scale}))
    return folder


def split_for_keras(count: int, validation_split: float) -> tuple[int, int]:
    """(train, validation) examples of ``fit(x, y, validation_split=...)``: Keras keeps the
    first ``ceil(count * (1 - split))`` examples for training and validates on the rest."""
    train = int(math.ceil(count * (1.0 - validation_split)))
    return train, count - train


def majority_share(labels) -> float:
    """The share of the most frequent label: the accuracy of always predicting it."""
    labels = np.asarray(labels).ravel()
    _, counts = np.unique(labels, return_counts=True)
    return float(counts.max() / labels.size)


def count_examples(source) -> int:
    """Examples in what ``fit`` or ``tfopt.Run`` is given: a ``tf.data`` dataset (its batches
    counted by iterating it), arrays, an ``(x, y)`` tuple, a dict of columns or a DataFrame."""
    import tensorflow as tf

    if isinstance(source, tf.data.Dataset):
        total = 0
        for element in source:
            first = element
            while isinstance(first, (tuple, list, dict)):
                first = next(iter(first.values())) if isinstance(first, dict) else first[0]
            total += int(first.shape[0])
        return total
    if isinstance(source, (tuple, list)):
        return count_examples(source[0])
    if isinstance(source, Mapping):
        return count_examples(next(iter(source.values())))
    return len(source)


def run_counts(run_inputs: dict) -> tuple[int, int]:
    """(train, validation) examples that ``tfopt.Run(**run_inputs)`` would read: a float
    ``validation`` is a share split off the end of the source, as Keras's
    ``validation_split`` does; a ``label`` names a column of the source, not an example."""
    total = count_examples(run_inputs["source"])
    validation = run_inputs.get("validation")
    if isinstance(validation, float):
        return split_for_keras(total, validation)
    return total, (0 if validation is None else count_examples(validation))
