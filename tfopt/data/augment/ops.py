"""The per-batch image ops: central boxes, crop-and-resize by gathers, flips, colour.

All take batches ``[batch, height, width, channels]`` (float32 in 0-255 units; uint8 too for
the crop) with one vector of random draws per op, and all compile with XLA.

Example:
    >>> images = adjust_brightness(images, seed, 0.2)
"""

from __future__ import annotations

import tensorflow as tf

from tfopt.data.augment.seeds import uniform

# ITU-R BT.601 luma weights; they sum to 1 so that a gray image stays exactly gray
# (tf.image.rgb_to_grayscale's 0.2989, 0.5870, 0.1140 sum to 0.9999).
LUMA = (0.299, 0.587, 0.114)


def central_boxes(batch_size, image_size, output_size) -> tf.Tensor:
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


def crop_and_resize(images, boxes, output_size) -> tf.Tensor:
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
    return uniform(tf.stack([batch_size, 1, 1, 1]), seed, low, high)


def flip(images, seed, probability, axis):
    flip = uniform(tf.shape(images)[:1], seed) < probability
    return tf.where(flip[:, tf.newaxis, tf.newaxis, tf.newaxis],
                    tf.reverse(images, [axis]), images)


def adjust_brightness(images, seed, strength):
    delta = _per_example(seed, tf.shape(images)[0], -strength, strength) * 255.0
    return tf.clip_by_value(images + delta, 0.0, 255.0)


def adjust_contrast(images, seed, strength):
    factor = _per_example(seed, tf.shape(images)[0], 1 - strength, 1 + strength)
    mean = tf.reduce_mean(images, axis=[1, 2], keepdims=True)
    return tf.clip_by_value((images - mean) * factor + mean, 0.0, 255.0)


def adjust_saturation(images, seed, strength):
    factor = _per_example(seed, tf.shape(images)[0], 1 - strength, 1 + strength)
    gray = tf.reduce_sum(images * tf.constant(LUMA), axis=-1, keepdims=True)
    return tf.clip_by_value(gray + (images - gray) * factor, 0.0, 255.0)
