"""Augmentation as functions: a batch (:func:`augment_batch`), a dataset
(:func:`augment_dataset`), and the random-resized-crop sampler (:func:`sample_crop_boxes`).

The chain (:func:`augment_images`) is the one the :class:`~tfopt.data.augment.layer.Augment`
layer runs; see :class:`~tfopt.data.augment.config.AugmentConfig` for the order of the ops.

Raises:
    InvalidArgumentError: An invalid option, or images the ops cannot take.

Example:
    >>> batch = tf.zeros([8, 256, 256, 3], tf.uint8)
    >>> augment_batch(batch, seed=0, output_size=224, random_crop=True).shape
    TensorShape([8, 224, 224, 3])
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from tfopt._validate import number_pair, whole_number
from tfopt.data.augment.config import (
    CROP_RATIO_EXPECTED,
    CROP_SCALE_EXPECTED,
    AugmentConfig,
    make_config,
)
from tfopt.data.augment.mixing import mix
from tfopt.data.augment.ops import (
    adjust_brightness,
    adjust_contrast,
    adjust_saturation,
    central_boxes,
    crop_and_resize,
    flip,
)
from tfopt.data.augment.seeds import Stream, as_seed, fold_in, split_seed, uniform
from tfopt.errors import InvalidArgumentError


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
    scale = number_pair(scale, "scale", 0.0, 1.0, CROP_SCALE_EXPECTED)
    ratio = number_pair(ratio, "ratio", 0.0, math.inf, CROP_RATIO_EXPECTED)
    area_seed, ratio_seed, y_seed, x_seed = split_seed(as_seed(seed), 4)
    height = tf.cast(image_size[0], tf.float32)
    width = tf.cast(image_size[1], tf.float32)
    shape = tf.stack([tf.cast(batch_size, tf.int32), attempts])

    area = uniform(shape, area_seed, scale[0], scale[1]) * height * width
    aspect = tf.exp(uniform(
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

    top = uniform(shape[:1], y_seed) * (height - crop_h)
    left = uniform(shape[:1], x_seed) * (width - crop_w)
    boxes = tf.stack([top / height, left / width, (top + crop_h) / height,
                      (left + crop_w) / width], axis=1)
    return tf.clip_by_value(boxes, 0.0, 1.0)  # float rounding only


def augment_images(images, labels, config: AugmentConfig, seed, training: bool,
                   output_dtype: str):
    """The whole chain of ``config``'s ops on one batch; returns ``(images, labels)``.

    What :func:`augment_batch`, :func:`augment_dataset` and the layer run, with the output
    dtype already chosen.

    Raises:
        InvalidArgumentError: A batch the ops cannot take, or MixUp/CutMix without labels.
    """
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
        streams = split_seed(as_seed(seed), len(Stream))
    shape = tf.shape(images)
    static_size = tuple(images.shape[1:3])

    # Geometry first: every op after it works on the output size, usually the smaller one.
    if training and config.random_crop:
        size = config.output_size or static_size
        if None in size:
            raise InvalidArgumentError(
                "output_size=None with images of unknown height or width: give output_size")
        boxes = sample_crop_boxes(streams[Stream.CROP], shape[0], (shape[1], shape[2]),
                                  scale=config.crop_scale, ratio=config.crop_ratio)
        images = crop_and_resize(images, boxes, size)
    elif config.output_size is not None and config.output_size != static_size:
        boxes = central_boxes(shape[0], (shape[1], shape[2]), config.output_size)
        images = crop_and_resize(images, boxes, config.output_size)
    # Arithmetic in float32 whatever the output dtype: float16 has 10 mantissa bits, so between
    # 128 and 255 it moves in steps of 1/8 pixel level and bfloat16 (7 bits) in whole levels;
    # interpolation, jitter and mean subtraction done in them would round at every op and band
    # smooth gradients. Only the final, normalised values (about -2..3) are cast.
    images = tf.cast(images, tf.float32)
    if input_scale != 1.0:
        images = images * input_scale

    if training:
        if config.horizontal_flip > 0:
            images = flip(images, streams[Stream.FLIP_H], config.horizontal_flip, axis=2)
        if config.vertical_flip > 0:
            images = flip(images, streams[Stream.FLIP_V], config.vertical_flip, axis=1)
        if config.brightness > 0:
            images = adjust_brightness(images, streams[Stream.BRIGHTNESS], config.brightness)
        if config.contrast > 0:
            images = adjust_contrast(images, streams[Stream.CONTRAST], config.contrast)
        if config.saturation > 0:
            images = adjust_saturation(images, streams[Stream.SATURATION], config.saturation)
        if config.mixes:
            images, labels = mix(images, labels, config, streams[Stream.MIX])

    if mean != (0.0,) or std != (1.0,):
        images = (images - tf.constant(mean)) * tf.constant([1.0 / s for s in std])
    return tf.cast(images, output_dtype), labels


def default_dtype(config: AugmentConfig, policy_dtype: str) -> str:
    """``config.output_dtype``, or the dtype policy's compute dtype when it is unset."""
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
    config = make_config(config, config_fields, "augment_batch")
    dtype = default_dtype(config, keras.mixed_precision.global_policy().compute_dtype)
    images, mixed_labels = augment_images(images, labels, config, seed, training, dtype)
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
    config = make_config(config, config_fields, "augment_dataset")
    seed = whole_number(seed, "seed")
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
    base_seed = as_seed(seed)
    dtype = default_dtype(config, keras.mixed_precision.global_policy().compute_dtype)

    # plain TensorFlow ops, no Python control flow on tensors: without autograph our own
    # errors reach the caller as they are instead of wrapped in a StagingError
    @tf.autograph.experimental.do_not_convert
    def augment_element(index, element):
        batch_seed = fold_in(base_seed, index)
        if isinstance(element, tuple):
            features, labels, rest = element[0], element[1], element[2:]
        else:
            features, labels, rest = element, None, ()
        images = features[image_key] if isinstance(features, dict) else features
        images, labels = augment_images(images, labels, config, batch_seed, True, dtype)
        if isinstance(features, dict):
            features = {**features, image_key: images}
        else:
            features = images
        return features if labels is None else (features, labels, *rest)

    return dataset.enumerate().map(augment_element, num_parallel_calls=num_parallel_calls)
