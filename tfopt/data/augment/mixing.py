"""MixUp and CutMix: each example mixed with its neighbour, labels mixed the same way.

Not XLA-compatible (``StatelessRandomGammaV2`` has no XLA kernel), so they run in
``tf.data`` (:func:`~tfopt.data.augment.functional.augment_dataset`), never in the layer.

Raises:
    InvalidArgumentError: Labels that cannot be mixed (their shape, or ``num_classes``).

Example:
    >>> images, labels = mix(images, labels, AugmentConfig(mixup_alpha=0.2, num_classes=10), seed)
"""

from __future__ import annotations

import tensorflow as tf

from tfopt.data.augment.seeds import split_seed, uniform
from tfopt.errors import InvalidArgumentError


def _beta(seed, shape, alpha):
    """Beta(alpha, alpha) as G1 / (G1 + G2) with two stateless Gamma(alpha) draws."""
    first_seed, second_seed = split_seed(seed, 2)
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


def one_hot_labels(labels, num_classes):
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


def mix(images, labels, config, seed):
    """MixUp and/or CutMix of each example with its neighbour (the batch rolled by one).

    Rolling pairs every example with a different one when the batch has two or more (a random
    permutation would pair some with themselves); the pipeline shuffles, so neighbours are
    random pairs.
    """
    labels = one_hot_labels(labels, config.num_classes)
    partner_images = tf.roll(images, shift=1, axis=0)
    partner_labels = tf.roll(labels, shift=1, axis=0)
    batch = tf.shape(images)[:1]
    mixup_seed, cutmix_seed, choice_seed = split_seed(seed, 3)

    if config.mixup_alpha > 0:
        mixup_lambda = _beta(mixup_seed, batch, config.mixup_alpha)
        weight = mixup_lambda[:, tf.newaxis, tf.newaxis, tf.newaxis]
        mixup_images = images * weight + partner_images * (1 - weight)
    if config.cutmix_alpha > 0:
        cutmix_images, cutmix_lambda = _cutmix(images, partner_images, cutmix_seed,
                                               config.cutmix_alpha)

    if config.mixup_alpha > 0 and config.cutmix_alpha > 0:
        use_cutmix = uniform(batch, choice_seed) < 0.5
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
    lambda_seed, y_seed, x_seed = split_seed(seed, 3)
    shape = tf.shape(images)
    batch = shape[:1]
    height = tf.cast(shape[1], tf.float32)
    width = tf.cast(shape[2], tf.float32)
    cut = tf.sqrt(1.0 - _beta(lambda_seed, batch, alpha))
    center_y = uniform(batch, y_seed) * height
    center_x = uniform(batch, x_seed) * width
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
