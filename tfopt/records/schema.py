"""The feature schema of a dataset: what each feature of a ``tf.train.Example`` holds.

A schema travels in the manifest so that readers (``tfopt inspect``, the pipeline builders) know
how to parse and decode every feature without guessing.
"""

from __future__ import annotations

import dataclasses
import enum

# The one integer type of a TFRecord (tf.train.Int64List): values outside it cannot be stored.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class FeatureKind(str, enum.Enum):
    """The ``tf.train.Feature`` list a value is stored in."""

    BYTES = "bytes"
    INT64 = "int64"
    FLOAT = "float"


class Encoding(str, enum.Enum):
    """How the stored values map back to the original data."""

    JPEG = "jpeg"  # encoded image bytes, all JPEG
    PNG = "png"
    GIF = "gif"
    BMP = "bmp"
    IMAGE = "image"  # encoded images of mixed formats: decode with tf.io.decode_image
    RAW = "raw"  # the bytes of one example's array, little-endian, C order: tf.io.decode_raw
    VALUES = "values"  # numbers stored as they are in an int64 or float list
    TEXT = "text"  # UTF-8 strings
    BYTES = "bytes"  # opaque byte strings

    @property
    def is_image(self) -> bool:
        return self in _IMAGE_ENCODINGS


_IMAGE_ENCODINGS = {Encoding.JPEG, Encoding.PNG, Encoding.GIF, Encoding.BMP, Encoding.IMAGE}


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One feature of every record.

    Attributes:
        name: The feature key in the ``tf.train.Example``, e.g. ``"image/encoded"``.
        kind: The list type it is stored in (bytes, int64 or float).
        dtype: The value's dtype once decoded, as a NumPy name (``"uint8"``, ``"float32"``,
            ``"string"``).
        shape: Per-example shape once decoded; ``[]`` for a scalar, None where it varies
            (encoded images: their size is per image).
        encoding: How stored values map back to the data (see :class:`Encoding`).
    """

    name: str
    kind: FeatureKind
    dtype: str
    shape: list[int] | None
    encoding: Encoding

    def __post_init__(self):
        object.__setattr__(self, "kind", FeatureKind(self.kind))
        object.__setattr__(self, "encoding", Encoding(self.encoding))
        if self.shape is not None:
            object.__setattr__(self, "shape", [int(d) for d in self.shape])

    def replace(self, **changes) -> FeatureSpec:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "dtype": self.dtype,
            "shape": self.shape,
            "encoding": self.encoding.value,
        }

    @classmethod
    def from_json(cls, data: dict) -> FeatureSpec:
        return cls(data["name"], data["kind"], data["dtype"], data["shape"], data["encoding"])


# Keys of the image-folder layout: those of the TensorFlow Model Garden's image classification
# TFRecords, so that readers written for that layout read tfopt's shards unchanged.
IMAGE_KEY = "image/encoded"
IMAGE_FORMAT_KEY = "image/format"
IMAGE_HEIGHT_KEY = "image/height"
IMAGE_WIDTH_KEY = "image/width"
IMAGE_FILENAME_KEY = "image/filename"
LABEL_KEY = "image/class/label"
