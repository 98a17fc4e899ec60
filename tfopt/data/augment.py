"""Batched image augmentation that runs where the model runs.

The pipeline (``tfopt.data.pipeline``) yields fixed-size uint8 batches and stops there: turning
them into float, cropping, flipping, colour jitter, normalisation and MixUp/CutMix happen here,
on whole batches, with every per-example random decision drawn as one vector. Inside the model
(the :class:`Augment` layer) that is the accelerator; on the CPU side of ``tf.data``
(:func:`augment_dataset`) it is one vectorised map per batch instead of one per image.

Randomness is stateless (``tf.random.stateless_*``): a seed fixes every decision, so the same
seed gives the same batch on any run, and the layer draws a fresh seed per call from a
``keras.random.SeedGenerator`` whose start is its ``seed``.

Every op is XLA-compatible except MixUp/CutMix (``StatelessRandomGammaV2`` has no XLA kernel):
the crop does its bilinear resampling with gathers instead of ``tf.image.crop_and_resize``,
which has no XLA kernel either and would make Keras turn XLA off for the whole model (Keras
compiles ``model.fit`` with XLA by default on GPUs, ``jit_compile="auto"``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import operator

import keras
import numpy as np
import tensorflow as tf

from tfopt._validate import choice
from tfopt.errors import InvalidArgumentError

# Stateless ops want int32 seeds to compile under XLA (Keras casts its int64 seed state the
# same way), so every seed is reduced modulo this.
_SEED_MODULUS = 2**31 - 1

# ImageNet's per-channel RGB statistics in 0-255 units (torchvision and Keras use these).
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)

# ITU-R BT.601 luma weights; they sum to 1 so that a gray image stays exactly gray
# (tf.image.rgb_to_grayscale's 0.2989, 0.5870, 0.1140 sum to 0.9999).
_LUMA = (0.299, 0.587, 0.114)


class Normalization(str, enum.Enum):
    """The preset normalisations; values are in 0-255 units whatever the input dtype."""

    IMAGENET = "imagenet"  # (x - IMAGENET_MEAN) / IMAGENET_STD: ResNet, most torchvision ports
    UNIT = "unit"  # x / 255 -> [0, 1]
    SYMMETRIC = "symmetric"  # x / 127.5 - 1 -> [-1, 1]: MobileNet, Inception, many ViTs
    NONE = "none"  # 0-255 floats: Keras EfficientNet and ConvNeXt normalise inside the model


_PRESET_MEAN_STD = {
    Normalization.IMAGENET: (IMAGENET_MEAN, IMAGENET_STD),
    Normalization.UNIT: ((0.0,), (255.0,)),
    Normalization.SYMMETRIC: ((127.5,), (127.5,)),
    Normalization.NONE: ((0.0,), (1.0,)),
}

_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


class _Stream(enum.IntEnum):
    """One independent random stream per op: switching one op on leaves the others' draws."""

    CROP = 0
    FLIP_H = 1
    FLIP_V = 2
    BRIGHTNESS = 3
    CONTRAST = 4
    SATURATION = 5
    MIX = 6


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
        InvalidArgumentError: A field is outside what is allowed (the message names it).

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
            set_field("output_size", _size("output_size", self.output_size))
        set_field("random_crop", _flag("random_crop", self.random_crop))
        set_field("crop_scale", _float_range("crop_scale", self.crop_scale, 0.0, 1.0,
                                             "0 < low <= high <= 1, e.g. (0.08, 1.0)"))
        set_field("crop_ratio", _float_range("crop_ratio", self.crop_ratio, 0.0, math.inf,
                                             "0 < low <= high, e.g. (3/4, 4/3)"))
        for name in ("horizontal_flip", "vertical_flip"):
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)):  # a plain on/off switch means a fair coin
                value = 0.5 if value else 0.0
            set_field(name, _number(name, value, 0.0, 1.0, "a probability in [0, 1] or a bool"))
        for name in ("brightness", "contrast", "saturation"):
            set_field(name, _number(name, getattr(self, name), 0.0, 1.0,
                                    "a strength in [0, 1]; 0 switches it off"))
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
            set_field("mean", _floats("mean", self.mean, -math.inf, "finite numbers"))
            set_field("std", _floats("std", self.std, 0.0, "positive numbers"))
        set_field("input_max", _number("input_max", self.input_max, 0.0, math.inf,
                                       "a positive number: 255.0 or 1.0", open_low=True))
        for name in ("mixup_alpha", "cutmix_alpha"):
            set_field(name, _number(name, getattr(self, name), 0.0, math.inf,
                                    "a Beta parameter >= 0 (0 switches it off), e.g. 0.2"))
        if self.num_classes is not None:
            if not _is_int(self.num_classes) or self.num_classes < 2:
                raise InvalidArgumentError(
                    f"num_classes={self.num_classes!r}: expected an integer >= 2")
            set_field("num_classes", int(self.num_classes))
        if self.output_dtype is not None:
            set_field("output_dtype", _float_dtype("output_dtype", self.output_dtype))

    def replace(self, **changes) -> AugmentConfig:
        """A copy with ``changes`` applied (and validated)."""
        _check_fields(changes)
        return dataclasses.replace(self, **changes)

    @property
    def mean_std(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The effective ``(mean, std)`` in 0-255 units (the preset's or the given ones)."""
        if self.mean is not None:
            return self.mean, self.std
        return _PRESET_MEAN_STD[Normalization(self.normalization or Normalization.IMAGENET)]

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


_FIELD_NAMES = tuple(field.name for field in dataclasses.fields(AugmentConfig))


# --- config validation helpers ----------------------------------------------------------------

def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _number(name, value, low, high, expected, open_low=False) -> float:
    ok = _is_number(value) and math.isfinite(value) and (
        (value > low if open_low else value >= low) and value <= high)
    if not ok:
        raise InvalidArgumentError(f"{name}={value!r}: expected {expected}")
    return float(value)


def _flag(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentError(f"{name}={value!r}: expected True or False")
    return bool(value)


def _size(name, value) -> tuple[int, int]:
    pair = (value, value) if _is_int(value) else value
    try:
        pair = tuple(pair)
    except TypeError:
        pair = ()
    if len(pair) != 2 or not all(_is_int(side) and side >= 1 for side in pair):
        raise InvalidArgumentError(
            f"{name}={value!r}: expected a positive int or (height, width), e.g. 224")
    return int(pair[0]), int(pair[1])


def _float_range(name, value, low, high, expected) -> tuple[float, float]:
    try:
        pair = tuple(value)
    except TypeError:
        pair = ()
    ok = (len(pair) == 2 and all(_is_number(x) and math.isfinite(x) for x in pair)
          and low < pair[0] <= pair[1] <= high)
    if not ok:
        raise InvalidArgumentError(f"{name}={value!r}: expected {expected}")
    return float(pair[0]), float(pair[1])


def _floats(name, value, low, expected) -> tuple[float, ...]:
    values = (value,) if _is_number(value) else value
    try:
        values = tuple(values)
    except TypeError:
        values = ()
    if not values or not all(_is_number(x) and math.isfinite(x) and x > low for x in values):
        raise InvalidArgumentError(
            f"{name}={value!r}: expected {expected}, one or one per channel, in 0-255 units")
    return tuple(float(x) for x in values)


def _float_dtype(name, value) -> str:
    try:
        dtype = tf.as_dtype(value).name
    except TypeError:
        dtype = None
    if dtype not in _FLOAT_DTYPES:
        raise InvalidArgumentError(
            f"{name}={value!r}: expected a float dtype, one of: {', '.join(_FLOAT_DTYPES)}")
    return dtype


def _check_fields(fields) -> None:
    unknown = sorted(set(fields) - set(_FIELD_NAMES))
    if unknown:
        raise InvalidArgumentError(
            f"unknown augmentation option(s) {', '.join(unknown)}: "
            f"AugmentConfig fields are {', '.join(_FIELD_NAMES)}")


def _make_config(config, fields) -> AugmentConfig:
    _check_fields(fields)
    if config is None:
        return AugmentConfig(**fields)
    if not isinstance(config, AugmentConfig):
        raise InvalidArgumentError(
            f"config={config!r}: expected an AugmentConfig or None (options may also be given "
            "as keyword arguments)")
    return config.replace(**fields) if fields else config


# --- seeds -----------------------------------------------------------------------------------

def _as_seed(seed) -> tf.Tensor:
    """``seed`` as the shape-[2] int32 tensor stateless ops take."""
    if seed is None:
        # not reproducible unless tf.random.set_seed was called: the documented default
        return tf.random.uniform([2], maxval=_SEED_MODULUS, dtype=tf.int32)
    if _is_int(seed):
        return tf.constant([int(seed) % _SEED_MODULUS, 0], tf.int32)
    try:
        tensor = tf.convert_to_tensor(seed)
    except (TypeError, ValueError):
        tensor = None
    if tensor is None or not tensor.dtype.is_integer or tensor.shape.rank not in (0, 1) or (
            tensor.shape.rank == 1 and tensor.shape[0] != 2):
        raise InvalidArgumentError(
            f"seed={seed!r}: expected an int, an integer scalar tensor or a shape-[2] integer "
            "tensor (as keras.random.SeedGenerator.next() returns)")
    # int32 for XLA, non-negative so that XLA and the kernels agree (see _non_negative)
    tensor = tf.cast(tf.math.floormod(tf.cast(tensor, tf.int64), _SEED_MODULUS), tf.int32)
    if tensor.shape.rank == 0:
        tensor = tf.stack([tensor, tf.zeros_like(tensor)])
    return tensor


def _non_negative(seeds):
    # XLA reads negative seed words differently from TensorFlow's kernels (TF 2.21: seed
    # [123, -5] draws other numbers compiled than eager; every non-negative seed agrees), and
    # split and fold_in return negative words half the time: clear the sign bit.
    return tf.bitwise.bitwise_and(seeds, 0x7FFFFFFF)


def _split(seed, num: int) -> list:
    """``num`` independent seeds from ``seed``."""
    return tf.unstack(_non_negative(tf.random.experimental.stateless_split(seed, num)))


def _fold_in(seed, data) -> tf.Tensor:
    """A seed from ``seed`` and an integer (a batch index, a replica id)."""
    return _non_negative(tf.random.experimental.stateless_fold_in(seed, data))


def _uniform(shape, seed, minval=0.0, maxval=1.0) -> tf.Tensor:
    """Stateless float32 uniform in [minval, maxval), the same with and without XLA.

    ``tf.random.stateless_uniform`` for floats gives other numbers under XLA than eagerly for
    the same seed and algorithm (seen with TF 2.21 on CPU, Philox and auto_select), so a model
    compiled by ``model.fit`` would not augment like the same model run eagerly. The raw 32-bit
    draws agree (for non-negative seeds, see :func:`_non_negative`), so floats are built from
    those: the top 24 bits, exact in float32.
    """
    bits = tf.random.stateless_uniform(shape, seed, minval=None, maxval=None, dtype=tf.uint32)
    unit = tf.cast(tf.bitwise.right_shift(bits, 8), tf.float32) * (1.0 / (1 << 24))
    return minval + unit * (maxval - minval)


# --- geometry --------------------------------------------------------------------------------

def sample_crop_boxes(seed, batch_size, image_size, *, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                      attempts: int = 10) -> tf.Tensor:
    """Random-resized-crop boxes for a batch, drawn all at once.

    The vectorised form of the Inception / torchvision ``RandomResizedCrop`` sampler: for every
    example, ``attempts`` candidates with an area fraction uniform in ``scale`` and a
    width/height ratio log-uniform in ``ratio``; the first that fits the image is taken, at a
    uniform position. When none fits (rare: about 0.15**10 for square images), the whole image
    is used with its ratio clamped into ``ratio``, as torchvision does.

    Args:
        seed: An int or a shape-[2] integer tensor; the same seed gives the same boxes.
        batch_size: Number of boxes (an int or a scalar tensor).
        image_size: ``(height, width)`` of the images (ints or scalar tensors).
        scale: Range of the crop area as a fraction of the image area. Defaults to
            (0.08, 1.0).
        ratio: Range of the crop's width/height ratio. Defaults to (3/4, 4/3).
        attempts: Candidates per example. Defaults to 10.

    Returns:
        A float32 tensor ``[batch_size, 4]`` of ``(y1, x1, y2, x2)`` in normalised [0, 1]
        image coordinates (``tf.image.crop_and_resize``'s box format).

    Example:
        >>> boxes = sample_crop_boxes(0, 32, (240, 320))
        >>> boxes.shape
        TensorShape([32, 4])
    """
    scale = _float_range("scale", scale, 0.0, 1.0, "0 < low <= high <= 1, e.g. (0.08, 1.0)")
    ratio = _float_range("ratio", ratio, 0.0, math.inf, "0 < low <= high, e.g. (3/4, 4/3)")
    area_seed, ratio_seed, y_seed, x_seed = _split(_as_seed(seed), 4)
    height = tf.cast(image_size[0], tf.float32)
    width = tf.cast(image_size[1], tf.float32)
    shape = tf.stack([tf.cast(batch_size, tf.int32), attempts])

    area = _uniform(shape, area_seed, scale[0], scale[1]) * height * width
    aspect = tf.exp(_uniform(
        shape, ratio_seed, math.log(ratio[0]), math.log(ratio[1])))
    crop_w = tf.sqrt(area * aspect)
    crop_h = tf.sqrt(area / aspect)
    fits = (crop_w <= width) & (crop_h <= height)
    # index of the first candidate that fits (argmax does not promise the first of ties)
    first = tf.reduce_min(tf.where(fits, tf.range(attempts)[tf.newaxis], attempts), axis=1)
    any_fits = first < attempts
    first = tf.minimum(first, attempts - 1)
    crop_w = tf.gather(crop_w, first, axis=1, batch_dims=1)
    crop_h = tf.gather(crop_h, first, axis=1, batch_dims=1)

    image_ratio = width / height
    fallback_w = tf.where(image_ratio > ratio[1], height * ratio[1], width)
    fallback_h = tf.where(image_ratio < ratio[0], width / ratio[0], height)
    crop_w = tf.where(any_fits, crop_w, fallback_w)
    crop_h = tf.where(any_fits, crop_h, fallback_h)

    top = _uniform(shape[:1], y_seed) * (height - crop_h)
    left = _uniform(shape[:1], x_seed) * (width - crop_w)
    boxes = tf.stack([top / height, left / width, (top + crop_h) / height,
                      (left + crop_w) / width], axis=1)
    return tf.clip_by_value(boxes, 0.0, 1.0)  # float rounding only


def _central_boxes(batch_size, image_size, output_size) -> tf.Tensor:
    """The largest central box with the output's aspect ratio (no distortion), per example."""
    height = tf.cast(image_size[0], tf.float32)
    width = tf.cast(image_size[1], tf.float32)
    target = output_size[1] / output_size[0]
    current = width / height
    keep_h = tf.minimum(1.0, current / target)
    keep_w = tf.minimum(1.0, target / current)
    box = tf.stack([(1 - keep_h) / 2, (1 - keep_w) / 2, (1 + keep_h) / 2, (1 + keep_w) / 2])
    return tf.tile(box[tf.newaxis], [batch_size, 1])


def _sample_points(starts, ends, size, out_size):
    """Source coordinates of ``out_size`` points spread over each [start, end] (normalised).

    ``tf.image.crop_and_resize``'s convention: box coordinate y maps to pixel y * (size - 1),
    and the first and last output pixels sit on the box edges.
    """
    extent = tf.cast(size - 1, tf.float32)
    if out_size > 1:
        steps = tf.range(out_size, dtype=tf.float32) / (out_size - 1)
        points = (starts[:, tf.newaxis] + (ends - starts)[:, tf.newaxis] * steps) * extent
    else:
        points = ((starts + ends) / 2 * extent)[:, tf.newaxis]
    points = tf.clip_by_value(points, 0.0, extent)
    low = tf.floor(points)
    high = tf.minimum(low + 1, extent)
    return tf.cast(low, tf.int32), tf.cast(high, tf.int32), points - low


def _crop_and_resize(images, boxes, output_size) -> tf.Tensor:
    """Bilinear crop-and-resize of box ``b`` of image ``b``, as float32.

    Matches ``tf.image.crop_and_resize`` for boxes inside [0, 1] (tested against it), but is
    made of gathers so that XLA compiles it: separable bilinear interpolation, rows first (on
    the input dtype, so a uint8 batch is only widened to float32 after shrinking to the output
    height).
    """
    shape = tf.shape(images)
    out_h, out_w = output_size
    y_low, y_high, y_frac = _sample_points(boxes[:, 0], boxes[:, 2], shape[1], out_h)
    x_low, x_high, x_frac = _sample_points(boxes[:, 1], boxes[:, 3], shape[2], out_w)

    top = tf.cast(tf.gather(images, y_low, axis=1, batch_dims=1), tf.float32)
    bottom = tf.cast(tf.gather(images, y_high, axis=1, batch_dims=1), tf.float32)
    rows = top + (bottom - top) * y_frac[:, :, tf.newaxis, tf.newaxis]
    left = tf.gather(rows, x_low, axis=2, batch_dims=1)
    right = tf.gather(rows, x_high, axis=2, batch_dims=1)
    return left + (right - left) * x_frac[:, tf.newaxis, :, tf.newaxis]


# --- photometric ops (float32, 0-255) ---------------------------------------------------------

def _per_example(seed, batch_size, low, high):
    return _uniform(tf.stack([batch_size, 1, 1, 1]), seed, low, high)


def _flip(images, seed, probability, axis):
    flip = _uniform(tf.shape(images)[:1], seed) < probability
    return tf.where(flip[:, tf.newaxis, tf.newaxis, tf.newaxis],
                    tf.reverse(images, [axis]), images)


def _brightness(images, seed, strength):
    delta = _per_example(seed, tf.shape(images)[0], -strength, strength) * 255.0
    return tf.clip_by_value(images + delta, 0.0, 255.0)


def _contrast(images, seed, strength):
    factor = _per_example(seed, tf.shape(images)[0], 1 - strength, 1 + strength)
    mean = tf.reduce_mean(images, axis=[1, 2], keepdims=True)
    return tf.clip_by_value((images - mean) * factor + mean, 0.0, 255.0)


def _saturation(images, seed, strength):
    factor = _per_example(seed, tf.shape(images)[0], 1 - strength, 1 + strength)
    gray = tf.reduce_sum(images * tf.constant(_LUMA), axis=-1, keepdims=True)
    return tf.clip_by_value(gray + (images - gray) * factor, 0.0, 255.0)


# --- MixUp / CutMix ---------------------------------------------------------------------------

def _beta(seed, shape, alpha):
    """Beta(alpha, alpha) as G1 / (G1 + G2) with two stateless Gamma(alpha) draws."""
    first_seed, second_seed = _split(seed, 2)
    first = tf.random.stateless_gamma(shape, first_seed, alpha=alpha)
    second = tf.random.stateless_gamma(shape, second_seed, alpha=alpha)
    # both underflow to 0 now and then for small alpha; any lambda is then as good as another
    return first / tf.maximum(first + second, 1e-12)


def _checked_class_indices(labels, num_classes):
    """``labels`` after a check that every one is in [0, num_classes).

    ``tf.one_hot`` turns an index outside that range into an all-zero row: a label that mixes
    into nothing, silently. Eagerly the error is ours; in a graph (``dataset.map``, a
    ``tf.function``) the check is an op and TensorFlow raises ``InvalidArgumentError`` with the
    same message when the batch arrives.
    """
    message = f"labels: class indices must be in [0, num_classes={num_classes})"
    if tf.executing_eagerly():
        values = labels.numpy()
        bad = values[(values < 0) | (values >= num_classes)]
        if bad.size:
            raise InvalidArgumentError(
                f"{message}; got {sorted(set(bad.tolist()))[:5]} (labels from 1? give "
                "num_classes = the number of classes and labels 0 .. num_classes - 1)")
        return labels
    checks = [tf.debugging.assert_non_negative(labels, message=message),
              tf.debugging.assert_less(labels, tf.cast(num_classes, labels.dtype),
                                       message=message)]
    with tf.control_dependencies(checks):
        return tf.identity(labels)


def _one_hot_labels(labels, num_classes):
    labels = tf.convert_to_tensor(labels)
    if labels.dtype.is_integer:
        if labels.shape.rank == 2 and labels.shape[1] == 1:  # Keras-style sparse [B, 1]
            labels = labels[:, 0]
        if labels.shape.rank != 1:
            raise InvalidArgumentError(
                f"labels: integer labels must have shape [batch] or [batch, 1], got "
                f"{labels.shape}")
        if num_classes is None:
            raise InvalidArgumentError(
                "num_classes=None: MixUp/CutMix need it to turn integer labels into one-hot "
                "vectors, e.g. num_classes=10")
        return tf.one_hot(_checked_class_indices(labels, num_classes), num_classes,
                          dtype=tf.float32)
    if not labels.dtype.is_floating or labels.shape.rank != 2:
        raise InvalidArgumentError(
            f"labels: expected integer labels [batch] or one-hot/soft float labels "
            f"[batch, classes], got {labels.dtype.name} {labels.shape}")
    if num_classes is not None and labels.shape[1] not in (None, num_classes):
        raise InvalidArgumentError(
            f"num_classes={num_classes} but the labels have {labels.shape[1]} columns")
    return tf.cast(labels, tf.float32)


def _mix(images, labels, config, seed):
    """MixUp and/or CutMix of each example with its neighbour (the batch rolled by one).

    Rolling pairs every example with a different one when the batch has two or more (a random
    permutation would pair some with themselves); the pipeline shuffles, so neighbours are
    random pairs.
    """
    labels = _one_hot_labels(labels, config.num_classes)
    partner_images = tf.roll(images, shift=1, axis=0)
    partner_labels = tf.roll(labels, shift=1, axis=0)
    batch = tf.shape(images)[:1]
    mixup_seed, cutmix_seed, choice_seed = _split(seed, 3)

    if config.mixup_alpha > 0:
        mixup_lambda = _beta(mixup_seed, batch, config.mixup_alpha)
        weight = mixup_lambda[:, tf.newaxis, tf.newaxis, tf.newaxis]
        mixup_images = images * weight + partner_images * (1 - weight)
    if config.cutmix_alpha > 0:
        cutmix_images, cutmix_lambda = _cutmix(images, partner_images, cutmix_seed,
                                               config.cutmix_alpha)

    if config.mixup_alpha > 0 and config.cutmix_alpha > 0:
        use_cutmix = _uniform(batch, choice_seed) < 0.5
        images = tf.where(use_cutmix[:, tf.newaxis, tf.newaxis, tf.newaxis],
                          cutmix_images, mixup_images)
        mix_lambda = tf.where(use_cutmix, cutmix_lambda, mixup_lambda)
    elif config.mixup_alpha > 0:
        images, mix_lambda = mixup_images, mixup_lambda
    else:
        images, mix_lambda = cutmix_images, cutmix_lambda
    weight = mix_lambda[:, tf.newaxis]
    return images, labels * weight + partner_labels * (1 - weight)


def _cutmix(images, partner_images, seed, alpha):
    """Paste a box of area ~(1 - lambda) from the partner; lambda is recomputed from the box
    actually pasted (it is clipped at the image border), so labels match pixels exactly."""
    lambda_seed, y_seed, x_seed = _split(seed, 3)
    shape = tf.shape(images)
    batch = shape[:1]
    height = tf.cast(shape[1], tf.float32)
    width = tf.cast(shape[2], tf.float32)
    cut = tf.sqrt(1.0 - _beta(lambda_seed, batch, alpha))
    center_y = _uniform(batch, y_seed) * height
    center_x = _uniform(batch, x_seed) * width
    top = tf.clip_by_value(tf.round(center_y - cut * height / 2), 0.0, height)
    bottom = tf.clip_by_value(tf.round(center_y + cut * height / 2), 0.0, height)
    left = tf.clip_by_value(tf.round(center_x - cut * width / 2), 0.0, width)
    right = tf.clip_by_value(tf.round(center_x + cut * width / 2), 0.0, width)

    rows = tf.range(height)[tf.newaxis, :, tf.newaxis]
    cols = tf.range(width)[tf.newaxis, tf.newaxis, :]
    inside = ((rows >= top[:, None, None]) & (rows < bottom[:, None, None])
              & (cols >= left[:, None, None]) & (cols < right[:, None, None]))
    mixed = tf.where(inside[..., tf.newaxis], partner_images, images)
    pasted = (bottom - top) * (right - left) / (height * width)
    return mixed, 1.0 - pasted


# --- the whole chain --------------------------------------------------------------------------

def _augment(images, labels, config: AugmentConfig, seed, training: bool, output_dtype: str):
    images = tf.convert_to_tensor(images)
    if images.shape.rank != 4:
        raise InvalidArgumentError(
            f"images: expected a batch [batch, height, width, channels], got shape "
            f"{images.shape}; batch the dataset before augmenting")
    if not (images.dtype == tf.uint8 or images.dtype.is_floating):
        raise InvalidArgumentError(
            f"images: expected uint8 or float images, got {images.dtype.name}")
    channels = images.shape[-1]
    if training and config.saturation > 0 and channels not in (3, None):
        raise InvalidArgumentError(
            f"saturation={config.saturation}: needs RGB images (3 channels), got shape "
            f"{images.shape}; set saturation=0")
    mean, std = config.mean_std
    if channels is not None and len(mean) not in (1, channels):
        raise InvalidArgumentError(
            f"mean={mean!r}, std={std!r}: {len(mean)} values for {channels}-channel images; "
            f"give one or {channels}")
    if training and config.mixes and labels is None:
        raise InvalidArgumentError(
            f"mixup_alpha={config.mixup_alpha}, cutmix_alpha={config.cutmix_alpha}: MixUp and "
            "CutMix mix the labels too; pass labels")
    # uint8 is 0-255 by definition; floats are rescaled so that every op below sees 0-255
    input_scale = 1.0 if images.dtype == tf.uint8 else 255.0 / config.input_max

    streams = None
    if training and config.is_random:
        streams = _split(_as_seed(seed), len(_Stream))
    shape = tf.shape(images)
    static_size = tuple(images.shape[1:3])

    # Geometry first: every op after it works on the output size, usually the smaller one.
    if training and config.random_crop:
        size = config.output_size or static_size
        if None in size:
            raise InvalidArgumentError(
                "output_size=None with images of unknown height or width: give output_size")
        boxes = sample_crop_boxes(streams[_Stream.CROP], shape[0], (shape[1], shape[2]),
                                  scale=config.crop_scale, ratio=config.crop_ratio)
        images = _crop_and_resize(images, boxes, size)
    elif config.output_size is not None and config.output_size != static_size:
        boxes = _central_boxes(shape[0], (shape[1], shape[2]), config.output_size)
        images = _crop_and_resize(images, boxes, config.output_size)
    # Arithmetic in float32 whatever the output dtype: float16 has 10 mantissa bits, so between
    # 128 and 255 it moves in steps of 1/8 pixel level and bfloat16 (7 bits) in whole levels;
    # interpolation, jitter and mean subtraction done in them would round at every op and band
    # smooth gradients. Only the final, normalised values (about -2..3) are cast.
    images = tf.cast(images, tf.float32)
    if input_scale != 1.0:
        images = images * input_scale

    if training:
        if config.horizontal_flip > 0:
            images = _flip(images, streams[_Stream.FLIP_H], config.horizontal_flip, axis=2)
        if config.vertical_flip > 0:
            images = _flip(images, streams[_Stream.FLIP_V], config.vertical_flip, axis=1)
        if config.brightness > 0:
            images = _brightness(images, streams[_Stream.BRIGHTNESS], config.brightness)
        if config.contrast > 0:
            images = _contrast(images, streams[_Stream.CONTRAST], config.contrast)
        if config.saturation > 0:
            images = _saturation(images, streams[_Stream.SATURATION], config.saturation)
        if config.mixes:
            images, labels = _mix(images, labels, config, streams[_Stream.MIX])

    if mean != (0.0,) or std != (1.0,):
        images = (images - tf.constant(mean)) * tf.constant([1.0 / s for s in std])
    return tf.cast(images, output_dtype), labels


def _default_dtype(config: AugmentConfig, policy_dtype: str) -> str:
    return config.output_dtype or policy_dtype


def augment_batch(images, labels=None, *, config: AugmentConfig | None = None, seed=None,
                  training: bool = True, **config_fields):
    """Augment a batch of images (and mix its labels), vectorised over the batch.

    Runs the ops of ``config`` (see :class:`AugmentConfig` for the order) with one vector of
    random draws per op, derived from ``seed``: the same seed gives the same batch. Usable
    anywhere a TensorFlow op is: eagerly, in ``dataset.map`` after ``batch`` (the only place
    for MixUp/CutMix when training with ``model.fit``), or in a custom train step.

    Args:
        images: A batch ``[batch, height, width, channels]``, uint8 (0-255) or any float dtype
            (full intensity ``config.input_max``).
        labels: Optional labels: integers ``[batch]`` (or ``[batch, 1]``), or one-hot/soft
            float ``[batch, classes]``. Returned unchanged unless MixUp/CutMix is on; then
            float32 ``[batch, classes]`` mixed like the images. Defaults to None.
        config: The ops. Defaults to None (``AugmentConfig()``: random horizontal flip and
            ImageNet normalisation).
        seed: An int, an integer scalar tensor or a shape-[2] integer tensor. Defaults to None:
            a fresh seed from TensorFlow's global random state (reproducible only after
            ``tf.random.set_seed``).
        training: Apply the random ops. False runs only the centre resize, normalisation and
            the cast, and leaves the labels alone. Defaults to True.
        **config_fields: :class:`AugmentConfig` fields overriding those of ``config``.

    Returns:
        The images as ``config.output_dtype`` (the Keras global policy's compute dtype when
        unset), or ``(images, labels)`` when labels were given.

    Raises:
        InvalidArgumentError: An invalid option, images that are not a uint8/float batch,
            MixUp/CutMix without labels or, for integer labels, without ``num_classes``.

    Example:
        >>> batch = tf.zeros([8, 256, 256, 3], tf.uint8)
        >>> out = augment_batch(batch, seed=0, output_size=224, random_crop=True)
        >>> out.shape, out.dtype
        (TensorShape([8, 224, 224, 3]), tf.float32)
    """
    config = _make_config(config, config_fields)
    dtype = _default_dtype(config, keras.mixed_precision.global_policy().compute_dtype)
    images, mixed_labels = _augment(images, labels, config, seed, training, dtype)
    return images if labels is None else (images, mixed_labels)


def augment_dataset(dataset, config: AugmentConfig | None = None, *, seed=0,
                    image_key: str | None = None,
                    num_parallel_calls=tf.data.AUTOTUNE, **config_fields):
    """Map :func:`augment_batch` over a batched dataset, reproducibly.

    Batch ``i`` is augmented with a seed folded from ``seed`` and ``i`` (``dataset.enumerate``),
    so a rerun with the same seed produces the same batches, whatever the map's parallelism.
    (If the upstream order is itself non-deterministic, which batch gets index ``i`` is too.)
    This runs on the host, inside ``tf.data``; for augmentation on the accelerator use the
    :class:`Augment` layer, which however cannot do MixUp/CutMix.

    Args:
        dataset: A batched ``tf.data.Dataset`` of images, ``(features, labels)`` or
            ``(features, labels, sample_weights)``, where ``features`` is the image batch or a
            dict holding it under ``image_key``.
        config: The ops. Defaults to None (``AugmentConfig()``).
        seed: An int. Defaults to 0.
        image_key: The image entry when ``features`` is a dict. Defaults to None.
        num_parallel_calls: Passed to ``dataset.map``. Defaults to ``tf.data.AUTOTUNE``.
        **config_fields: :class:`AugmentConfig` fields overriding those of ``config``.

    Returns:
        The mapped dataset, with images (and mixed labels) as :func:`augment_batch` returns.

    Raises:
        InvalidArgumentError: An invalid option, element structure or image batch (raised by
            this call, while the map function is traced).

    Example:
        >>> train = augment_dataset(train, mixup_alpha=0.2, num_classes=10, seed=1)
        >>> model.fit(train)  # with loss="categorical_crossentropy"
    """
    config = _make_config(config, config_fields)
    if not _is_int(seed):
        raise InvalidArgumentError(f"seed={seed!r}: expected an int")
    seed = operator.index(seed)
    spec = dataset.element_spec
    if isinstance(spec, tuple) and len(spec) not in (2, 3):
        raise InvalidArgumentError(
            f"dataset elements: expected images, (features, labels) or (features, labels, "
            f"sample_weights), got a tuple of {len(spec)}")
    features_spec = spec[0] if isinstance(spec, tuple) else spec
    if isinstance(features_spec, dict) and image_key not in features_spec:
        raise InvalidArgumentError(
            f"image_key={image_key!r}: the features are a dict with keys "
            f"{sorted(features_spec)}; name the image entry")
    base_seed = _as_seed(seed)
    dtype = _default_dtype(config, keras.mixed_precision.global_policy().compute_dtype)

    # plain TensorFlow ops, no Python control flow on tensors: without autograph our own
    # errors reach the caller as they are instead of wrapped in a StagingError
    @tf.autograph.experimental.do_not_convert
    def augment_element(index, element):
        batch_seed = _fold_in(base_seed, index)
        if isinstance(element, tuple):
            features, labels, rest = element[0], element[1], element[2:]
        else:
            features, labels, rest = element, None, ()
        images = features[image_key] if isinstance(features, dict) else features
        images, labels = _augment(images, labels, config, batch_seed, True, dtype)
        if isinstance(features, dict):
            features = {**features, image_key: images}
        else:
            features = images
        return features if labels is None else (features, labels, *rest)

    return dataset.enumerate().map(augment_element, num_parallel_calls=num_parallel_calls)


# The entry of the seed generator's state in a saved model or weights file.
_SEED_STATE_KEY = "seed_generator_state"

# Keyword arguments keras.layers.Layer itself takes (anything else is a config field or a typo).
_LAYER_KWARGS = frozenset({"name", "dtype", "trainable", "autocast", "activity_regularizer",
                           "input_shape", "batch_input_shape", "batch_size", "input_dim"})


@keras.saving.register_keras_serializable(package="tfopt")
class Augment(keras.layers.Layer):
    """Augmentation as the first layer of a model, so it runs on the accelerator.

    With ``training=True`` (``model.fit`` passes it) the layer runs every op of its
    :class:`AugmentConfig` with a fresh seed per call from a ``keras.random.SeedGenerator``
    started at ``seed`` (folded with the replica id under a distribution strategy, so replicas
    differ); two models built with the same seed augment identically. In inference it only
    resizes to ``output_size`` (largest central crop), normalises and casts. The output dtype
    is the layer's compute dtype (the mixed-precision policy's) unless ``output_dtype`` is set.
    Inputs are not autocast: uint8 and float32 batches arrive as they are, arithmetic is
    float32. All ops compile with XLA.

    MixUp and CutMix are refused: they change the labels, which a layer never sees. Apply them
    with :func:`augment_dataset` (or :func:`augment_batch` in ``dataset.map`` after batching).

    The layer saves with the model, and the position of its seed generator with it (in
    ``save_weights`` files and tfopt's backups too; Keras itself saves no generator state), so
    a model loaded or a training resumed continues the draws instead of repeating the first
    ones. Loading needs the class registered with Keras, which
    ``import tfopt`` alone does not do (it imports no TensorFlow): call
    ``tfopt.keras_objects()`` before ``keras.models.load_model`` (or pass it as
    ``custom_objects``).

    Args:
        config: The ops. Defaults to None (``AugmentConfig()`` updated by the keyword fields).
        seed: An int starting the seed generator. Defaults to None (a random start;
            reproducible only after ``keras.utils.set_random_seed``).
        **kwargs: :class:`AugmentConfig` fields, and ``keras.layers.Layer`` arguments
            (``name``, ``dtype``...).

    Raises:
        InvalidArgumentError: An invalid option, or MixUp/CutMix asked for.

    Example:
        >>> inputs = keras.Input((256, 256, 3), dtype="uint8")
        >>> x = Augment(output_size=224, random_crop=True, brightness=0.2, seed=0)(inputs)
        >>> x = keras.layers.Conv2D(32, 3)(x)
    """

    def __init__(self, config: AugmentConfig | None = None, *, seed: int | None = None,
                 **kwargs):
        fields = {key: kwargs.pop(key) for key in list(kwargs) if key in _FIELD_NAMES}
        unknown = sorted(set(kwargs) - _LAYER_KWARGS)
        if unknown:
            _check_fields(unknown)
        config = _make_config(config, fields)
        if config.mixes:
            raise InvalidArgumentError(
                f"mixup_alpha={config.mixup_alpha}, cutmix_alpha={config.cutmix_alpha}: a "
                "layer cannot mix labels it never sees; use augment_dataset(dataset, ...) or "
                "dataset.map(lambda x, y: augment_batch(x, y, ...)) after batching, with "
                "loss='categorical_crossentropy'")
        if seed is not None:
            if not _is_int(seed):
                raise InvalidArgumentError(f"seed={seed!r}: expected an int or None")
            seed = operator.index(seed)  # numpy integers too: Keras's SeedGenerator wants int
        # we cast ourselves (float32 arithmetic, then the compute dtype); Keras's autocast would
        # round float32 inputs to float16 before we see them
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.config = config
        self.seed = seed
        self._seed_generator = keras.random.SeedGenerator(seed)

    @property
    def output_dtype(self) -> str:
        return _default_dtype(self.config, self.compute_dtype)

    def call(self, inputs, training=False):
        seed = None
        if training and self.config.is_random:
            seed = self._seed_generator.next()
            replica = tf.distribute.get_replica_context()
            if replica is not None and replica.num_replicas_in_sync > 1:
                seed = _fold_in(
                    _as_seed(seed), replica.replica_id_in_sync_group)
        images, _ = _augment(inputs, None, self.config, seed, bool(training), self.output_dtype)
        return images

    def compute_output_shape(self, input_shape):
        if len(input_shape) != 4:
            raise InvalidArgumentError(
                f"Augment {self.name!r}: expected a batch [batch, height, width, channels], got "
                f"input shape {tuple(input_shape)}; give keras.Input the shape of one image, "
                "e.g. keras.Input((224, 224, 3)), and feed batched images")
        batch, height, width, channels = input_shape
        if self.config.output_size is not None:
            height, width = self.config.output_size
        return batch, height, width, channels

    def compute_output_spec(self, inputs, training=False):
        # declared, not traced: tracing would advance the seed generator on symbolic inputs
        return keras.KerasTensor(self.compute_output_shape(inputs.shape),
                                 dtype=self.output_dtype)

    # Keras saves no SeedGenerator state (layer.weights leaves it out): a model saved or backed
    # up mid-training would restart its augmentation at the first call's seed, so a resumed
    # run would repeat the crops and flips of the run's start instead of continuing them.
    def save_own_variables(self, store):
        super().save_own_variables(store)  # nothing: the layer has no weights
        store[_SEED_STATE_KEY] = self._seed_generator.state

    def load_own_variables(self, store):
        # a file saved before the state was kept has no entry: the generator keeps its start
        if _SEED_STATE_KEY in store:
            self._seed_generator.state.assign(store[_SEED_STATE_KEY])

    def get_config(self):
        base = super().get_config()
        return {**base, "config": dataclasses.asdict(self.config), "seed": self.seed}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        fields = config.pop("config", None) or {}
        # JSON turned the tuples into lists; __post_init__ turns them back
        return cls(AugmentConfig(**fields), **config)
