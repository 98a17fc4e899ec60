"""What the augmentation does: :class:`AugmentConfig` and its checks.

Imports no TensorFlow (an ``output_dtype`` is checked with it, when one is given).

Raises:
    InvalidArgumentError: A field is outside what is allowed (the message names it, shows the
        value and what is allowed).

Example:
    >>> config = AugmentConfig(output_size=224, random_crop=True, brightness=0.2)
    >>> config.replace(mixup_alpha=0.2, num_classes=10).mixes
    True
"""

from __future__ import annotations

import dataclasses
import enum
import math

from tfopt._validate import (
    choice,
    flag,
    is_bool,
    known_options,
    number,
    number_pair,
    numbers_above,
    optional_whole_number,
    size_pair,
)
from tfopt.errors import InvalidArgumentError

# ImageNet's per-channel RGB statistics in 0-255 units (torchvision and Keras use these).
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


class Normalization(str, enum.Enum):
    """The preset normalisations; values are in 0-255 units whatever the input dtype."""

    IMAGENET = "imagenet"  # (x - IMAGENET_MEAN) / IMAGENET_STD: ResNet, most torchvision ports
    UNIT = "unit"  # x / 255 -> [0, 1]
    SYMMETRIC = "symmetric"  # x / 127.5 - 1 -> [-1, 1]: MobileNet, Inception, many ViTs
    NONE = "none"  # 0-255 floats: Keras EfficientNet and ConvNeXt normalise inside the model


PRESET_MEAN_STD = {
    Normalization.IMAGENET: (IMAGENET_MEAN, IMAGENET_STD),
    Normalization.UNIT: ((0.0,), (255.0,)),
    Normalization.SYMMETRIC: ((127.5,), (127.5,)),
    Normalization.NONE: ((0.0,), (1.0,)),
}

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


CROP_SCALE_EXPECTED = "0 < low <= high <= 1, e.g. (0.08, 1.0)"
CROP_RATIO_EXPECTED = "0 < low <= high, e.g. (3/4, 4/3)"
_PER_CHANNEL = "{}, one or one per channel, in 0-255 units"


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    """What :func:`augment_batch` and :class:`Augment` do to a batch of images.

    Ops run in this order: crop/resize, flips, brightness, contrast, saturation, MixUp/CutMix,
    normalisation, cast. All pixel arithmetic is float32 in 0-255 units; only the result is
    cast to ``output_dtype``. In inference (``training=False``) only the centre resize (when
    ``output_size`` differs from the input), normalisation and the cast run.

    Attributes:
        output_size: Output ``(height, width)``, or one int for a square. In training with
            ``random_crop`` the random crop is resized to it; otherwise the largest central
            crop with its aspect ratio is resized to it (bilinear without antialiasing, as
            ``tf.image.crop_and_resize``). Defaults to None (the input size; no resize).
        random_crop: Random resized crop on the batch (Inception-style), for pipelines that
            did not crop at decode. Defaults to False.
        crop_scale: Range of the crop's area as a fraction of the image area, in (0, 1].
            Defaults to (0.08, 1.0).
        crop_ratio: Range of the crop's width/height ratio (sampled log-uniformly).
            Defaults to (3/4, 4/3).
        horizontal_flip: Probability of a left-right flip per example, in [0, 1]; True means
            0.5. Defaults to 0.5.
        vertical_flip: Probability of an up-down flip per example; True means 0.5. Defaults
            to 0.0 (natural photos are rarely upside down).
        brightness: Per-example brightness shift drawn from [-brightness, brightness] times the
            full range (255), in [0, 1]. Defaults to 0.0 (off).
        contrast: Per-example contrast factor drawn from [1 - contrast, 1 + contrast] around
            each image's per-channel mean (as ``tf.image.adjust_contrast``), in [0, 1].
            Defaults to 0.0 (off).
        saturation: Per-example saturation factor drawn from [1 - saturation, 1 + saturation]:
            a blend with the image's grayscale (as torchvision's ColorJitter; needs 3
            channels), in [0, 1]. Defaults to 0.0 (off).
        normalization: A preset, one of "imagenet" (``(x - IMAGENET_MEAN) / IMAGENET_STD``,
            0-255 units), "unit" (``x / 255``, [0, 1]), "symmetric" (``x / 127.5 - 1``,
            [-1, 1]) or "none" (0-255 floats). Defaults to None: "imagenet" unless ``mean`` and
            ``std`` are given.
        mean: Per-channel (or one) mean in 0-255 units, subtracted after augmentation; give it
            with ``std`` instead of a preset. Defaults to None.
        std: Per-channel (or one) standard deviation in 0-255 units, all positive. Defaults to
            None.
        input_max: The value of full intensity in float inputs: 255 for uint8 batches cast to
            float, 1.0 for images already in [0, 1]. uint8 inputs always use 255. Defaults to
            255.0.
        mixup_alpha: MixUp's Beta(alpha, alpha) parameter; 0 is off, 0.2-0.4 is usual. Mixes
            each example with its neighbour in the batch (the pipeline shuffles) and mixes the
            labels the same way. Defaults to 0.0.
        cutmix_alpha: CutMix's Beta(alpha, alpha) parameter; 0 is off, 1.0 is usual. Pastes a
            box of the neighbour; the label weight is the pasted area. When both alphas are
            positive each example gets one of the two, with equal probability. Defaults to 0.0.
        num_classes: Number of classes, to turn integer labels into one-hot vectors when
            mixing (one-hot or soft ``[batch, classes]`` labels are used as they are). Mixed
            labels are float32 probabilities: train with ``categorical_crossentropy``, not the
            sparse loss. Defaults to None.
        output_dtype: The float dtype of the output images. Defaults to None: the compute dtype
            of the Keras dtype policy (the layer's; the global policy for the function), so
            the batch is what ``mixed_float16`` or ``mixed_bfloat16`` models expect.

    Raises:
        InvalidArgumentError: A field is outside what is allowed (the message names it, shows
            the value and what is allowed).

    Example:
        >>> config = AugmentConfig(output_size=224, random_crop=True, brightness=0.2)
        >>> config.replace(mixup_alpha=0.2, num_classes=10).mixes
        True
    """

    output_size: int | tuple[int, int] | None = None
    random_crop: bool = False
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    horizontal_flip: float = 0.5
    vertical_flip: float = 0.0
    brightness: float = 0.0
    contrast: float = 0.0
    saturation: float = 0.0
    normalization: str | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    input_max: float = 255.0
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    num_classes: int | None = None
    output_dtype: str | None = None

    def __post_init__(self):
        set_field = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if self.output_size is not None:
            set_field("output_size", size_pair(self.output_size, "output_size"))
        set_field("random_crop", flag(self.random_crop, "random_crop"))
        set_field("crop_scale", number_pair(self.crop_scale, "crop_scale", 0.0, 1.0,
                                            CROP_SCALE_EXPECTED))
        set_field("crop_ratio", number_pair(self.crop_ratio, "crop_ratio", 0.0, math.inf,
                                            CROP_RATIO_EXPECTED))
        for name in ("horizontal_flip", "vertical_flip"):
            value = getattr(self, name)
            if is_bool(value):  # a plain on/off switch means a fair coin
                value = 0.5 if value else 0.0
            set_field(name, number(value, name, low=0.0, high=1.0,
                                   expected="a probability in [0, 1] or a bool"))
        for name in ("brightness", "contrast", "saturation"):
            set_field(name, number(getattr(self, name), name, low=0.0, high=1.0,
                                   expected="a strength in [0, 1]; 0 switches it off"))
        if self.normalization is not None:
            set_field("normalization", choice(Normalization, self.normalization,
                                               "normalization").value)
        if (self.mean is None) != (self.std is None):
            given = "mean" if self.mean is not None else "std"
            raise InvalidArgumentError(
                f"{given}={getattr(self, given)!r} given alone: give both mean and std "
                "(0-255 units), or neither and choose a normalization preset")
        if self.mean is not None:
            if self.normalization is not None:
                raise InvalidArgumentError(
                    f"normalization={self.normalization!r} and mean/std both given: use one "
                    "(mean and std replace the preset)")
            set_field("mean", numbers_above(self.mean, "mean", -math.inf,
                                            _PER_CHANNEL.format("finite numbers")))
            set_field("std", numbers_above(self.std, "std", 0.0,
                                           _PER_CHANNEL.format("positive numbers")))
        set_field("input_max", number(self.input_max, "input_max", low=0.0, open_low=True,
                                      expected="a positive number: 255.0 or 1.0"))
        for name in ("mixup_alpha", "cutmix_alpha"):
            set_field(name, number(getattr(self, name), name, low=0.0,
                                   expected="a Beta parameter >= 0 (0 switches it off), e.g. 0.2"))
        set_field("num_classes", optional_whole_number(self.num_classes, "num_classes",
                                                       minimum=2))
        if self.output_dtype is not None:
            set_field("output_dtype", _float_dtype("output_dtype", self.output_dtype))

    def replace(self, **changes) -> AugmentConfig:
        """A copy with ``changes`` applied (and validated).

        Raises:
            InvalidArgumentError: An unknown field, or a value outside what is allowed.
        """
        known_options(changes, FIELD_NAMES, "AugmentConfig.replace")
        return dataclasses.replace(self, **changes)

    @property
    def mean_std(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The effective ``(mean, std)`` in 0-255 units (the preset's or the given ones)."""
        if self.mean is not None:
            return self.mean, self.std
        return PRESET_MEAN_STD[Normalization(self.normalization or Normalization.IMAGENET)]

    @property
    def mixes(self) -> bool:
        """Whether MixUp or CutMix is on (they change the labels)."""
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0

    @property
    def is_random(self) -> bool:
        """Whether any random op is on (otherwise training and inference are the same)."""
        return (self.random_crop or self.horizontal_flip > 0 or self.vertical_flip > 0
                or self.brightness > 0 or self.contrast > 0 or self.saturation > 0
                or self.mixes)


FIELD_NAMES = tuple(field.name for field in dataclasses.fields(AugmentConfig))


def _float_dtype(name, value) -> str:
    """A float dtype's name from a name, a NumPy or a TensorFlow dtype (none in _validate)."""
    import tensorflow as tf  # only here: the rest of the config needs no TensorFlow

    try:
        dtype = tf.as_dtype(value).name
    except TypeError:
        dtype = None
    if dtype not in FLOAT_DTYPES:
        raise InvalidArgumentError(
            f"{name}={value!r}: expected a float dtype, one of: {', '.join(FLOAT_DTYPES)}")
    return dtype



def make_config(config: AugmentConfig | None, fields: dict, where: str) -> AugmentConfig:
    """``config`` (or ``AugmentConfig()``) with ``fields`` applied.

    Raises:
        InvalidArgumentError: ``config`` is not an AugmentConfig, or an unknown field (named
            with ``where``, the function it was given to, and the known ones).
    """
    known_options(fields, FIELD_NAMES, where)
    if config is None:
        return AugmentConfig(**fields)
    if not isinstance(config, AugmentConfig):
        raise InvalidArgumentError(
            f"config={config!r}: expected an AugmentConfig or None (options may also be given "
            "as keyword arguments)")
    return config.replace(**fields) if fields else config
