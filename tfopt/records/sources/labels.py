"""Labels of the array-like sources (NumPy arrays and CSV columns): which one, and as what.

Example:
    >>> choose_label(None, ["x", "y"], Path("data.npz"), "array")
    'y'
"""

from __future__ import annotations

import logging
from pathlib import Path

from tfopt.errors import InvalidArgumentError, SourceError
from tfopt.records.schema import Encoding, FeatureKind, FeatureSpec

logger = logging.getLogger("tfopt")


# Label names recognised without --label, in order of preference.
DEFAULT_LABEL_NAMES = ("label", "labels", "class", "target", "y")


def labels_from_values(values, key: str, where, value_spec: FeatureSpec):
    """The labels of a label array or column: ``(class labels, class names, stored spec)``.

    Integers are class indices as they are; strings become class indices into their sorted
    names; floats are regression targets, stored as ``value_spec`` says, with no class labels
    (so the validation split is a plain seeded random one, not stratified).
    """
    if values.ndim != 1:
        raise SourceError(where, f"label {key!r} must hold one value per example, "
                          f"got shape {values.shape}")
    class_spec = FeatureSpec(key, FeatureKind.INT64, "int64", [], Encoding.VALUES)
    if values.dtype.kind in "US":
        if values.dtype.kind == "S":
            texts = []
            for row, value in enumerate(values.tolist()):
                try:
                    texts.append(value.decode("utf-8"))
                except UnicodeDecodeError:
                    raise SourceError(where, f"label {key!r} holds {value!r} at row {row}, bytes "
                                      "that are not UTF-8 text; class names must be text: save "
                                      "the labels as str or as integer class indices") from None
        else:
            texts = values.tolist()
        names = sorted(set(texts))
        index = {name: i for i, name in enumerate(names)}
        return [index[text] for text in texts], names, class_spec
    if values.dtype.kind in "biu":
        labels = [int(v) for v in values.tolist()]
        negative = [(row, label) for row, label in enumerate(labels) if label < 0]
        if negative:
            # kept (-1 often marks "unlabelled"), but Keras's sparse losses fail on them
            row, label = negative[0]
            logger.warning("%s: label %r holds %d negative value(s), e.g. %d at row %d: class "
                           "indices start at 0 (SparseCategoricalCrossentropy fails on them; rows count "
                           "from 0); "
                           "filter those examples out or shift the labels",
                           where, key, len(negative), label, row)
        return labels, None, class_spec
    if values.dtype.kind == "f":
        return None, None, value_spec.replace(name=key)
    raise SourceError(where, f"label {key!r} must hold integers, class names or (for "
                      f"regression) floats, got {values.dtype}")


def choose_label(label: str | None, names: list[str], src: Path, what: str) -> str | None:
    if label is not None:
        if label not in names:
            raise InvalidArgumentError(
                f"label {label!r}: no such {what} in {src}; it has: {', '.join(names)}"
            )
        return label
    return next((name for name in DEFAULT_LABEL_NAMES if name in names), None)
