"""Image decoding in graph mode: the strategies a :class:`~tfopt.data.plan_types.DecodePlan` names.

The planner chooses the strategy from the target size (:func:`tfopt.data.plan.choose_decode`);
this module carries it out. Three ways to turn encoded bytes into a fixed-size uint8 image:

- ``decode_and_crop``: a JPEG decodes only its crop window (``tf.io.decode_and_crop_jpeg``):
  rows below the window are never read and pixels outside it skip the inverse DCT. Used for
  random-resized-crop training and for evaluation's central crop.
- ``reduced``: a JPEG decodes at 1/2, 1/4 or 1/8 scale when even the reduced image keeps the
  side the plan needs, each at its own ratio (:func:`decode_jpeg_scaled`): the pixel work
  shrinks with the square of the ratio. Entropy decoding does not shrink, so on noisy photos
  the gain is modest: never slower, not the lever.
- ``plain``: a full decode (PNG, GIF, BMP, mixed formats); JPEGs going whole into the decoded
  cache also take their own reduced scale there.

All functions here run inside tf.data maps (graph mode) on one example.

Example:
    >>> image = decode_to_target(encoded, choose_decode(encoding="jpeg", random_crop=False,
    ...     target=(224, 224), min_side=375, cache_decoded=False))
"""

from __future__ import annotations

import tensorflow as tf

from tfopt.data.plan_types import DecodePlan, DecodeStrategy
from tfopt.data.sizes import EVAL_CROP_FRACTION, JPEG_RATIOS
from tfopt.records.image_header import SIGNATURES, ImageFormat

# Random-resized crop as in Inception/ResNet training: 8-100 % of the area, aspect 3/4-4/3.
CROP_AREA = (0.08, 1.0)
CROP_ASPECT = (3 / 4, 4 / 3)


def random_crop_window(shape, seed) -> tf.Tensor:
    """A random-resized-crop window ``[y, x, height, width]`` for an image of ``shape``.

    Args:
        shape: ``[height, width, channels]`` (int32).
        seed: Shape-[2] seed for the stateless sampler.
    """
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.cast(shape, tf.int32),
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=seed,
        min_object_covered=0.1,
        aspect_ratio_range=CROP_ASPECT,
        area_range=CROP_AREA,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    return tf.stack([begin[0], begin[1], size[0], size[1]])


# The widest block column (iMCU) of common JPEGs: 16 px for 4:2:0 and 4:2:2 chroma, 8 for
# 4:4:4 and greyscale, which divides it.
JPEG_BLOCK_COLUMN = 16


def snap_to_block_column(window, width) -> tf.Tensor:
    """Move a crop window's left edge to the nearest JPEG block column that keeps it inside.

    TensorFlow's cropped decode starts every row at a block column; when the window does not,
    it decodes each row into a scratch line and copies it across, a copy of every row that a
    window on a block column does without. Snapping moves a window by at most 8 px (15 where the
    nearest column would push it past the right edge) and keeps its size, so the crops' scale
    and aspect are unchanged.

    Args:
        window: ``[y, x, height, width]`` (int32), inside an image ``width`` pixels wide.
        width: The image's width (int32 scalar).
    """
    y, x, height, crop_width = tf.unstack(window)
    block = JPEG_BLOCK_COLUMN
    nearest = (x + block // 2) // block * block
    snapped = tf.where(nearest + crop_width <= width, nearest, x // block * block)
    return tf.stack([y, snapped, height, crop_width])


def central_crop_window(shape, fraction: float = EVAL_CROP_FRACTION) -> tf.Tensor:
    """The central ``fraction`` of the shorter side, as a square window ``[y, x, h, w]``."""
    height, width = tf.cast(shape[0], tf.float32), tf.cast(shape[1], tf.float32)
    side = tf.cast(tf.minimum(height, width) * fraction, tf.int32)
    side = tf.maximum(side, 1)
    y = (tf.cast(shape[0], tf.int32) - side) // 2
    x = (tf.cast(shape[1], tf.int32) - side) // 2
    return tf.stack([y, x, side, side])


def resize_uint8(image, target: tuple[int, int]) -> tf.Tensor:
    """Bilinear resize to ``target``, back to uint8 (what the pipeline ships: 4x fewer bytes)."""
    # TensorFlow's bilinear kernel is faster on float32 than on uint8 input, cast included,
    # with the same output pixels (uint8 values are exact in float32)
    resized = tf.image.resize(tf.cast(image, tf.float32), target, method="bilinear")
    # bilinear weights are convex, so values stay in [0, 255]: +0.5 and a truncating cast
    # round in one pass over the image, where round + saturate_cast take three
    return tf.cast(resized + 0.5, tf.uint8)


_SCALED_RATIOS = (*JPEG_RATIOS, 1)  # the branches of decode_jpeg_scaled, in this order


def jpeg_ratio_index(height, width, min_side: int) -> tf.Tensor:
    """Index into ``(8, 4, 2, 1)`` of the largest JPEG scale-down that keeps the shorter side
    >= min_side: :func:`tfopt.data.sizes.jpeg_image_ratio` in the graph.

    libjpeg rounds a scaled side up (``ceil(side / ratio)``), and so does this.
    """
    shorter = tf.minimum(height, width)
    keeps = [(shorter + ratio - 1) // ratio >= min_side for ratio in JPEG_RATIOS]
    return tf.argmax(tf.cast(tf.stack([*keeps, tf.constant(True)]), tf.int32),
                     output_type=tf.int32)


def decode_jpeg_scaled(encoded, min_side: int) -> tf.Tensor:
    """Decode one JPEG at the largest scale-down that keeps its shorter side >= ``min_side``.

    Each image gets its own ratio from its header (``extract_jpeg_shape``, microseconds), not
    the one the smallest sampled image allows: in a folder of 1,300-3,000 px photos for a
    224-px model, the larger half decode at 1/8 instead of 1/4, and an unsampled smaller one
    still keeps ``min_side``. The ratio is an attribute of the decode op, so one decode per
    ratio sits behind a ``switch_case``.
    """
    shape = tf.io.extract_jpeg_shape(encoded)
    branches = [lambda r=r: tf.io.decode_jpeg(encoded, channels=3, ratio=r)
                for r in _SCALED_RATIOS]
    image = tf.switch_case(jpeg_ratio_index(shape[0], shape[1], min_side), branches)
    image.set_shape([None, None, 3])
    return image


def checked_image(encoded, plan: DecodePlan, hint: str) -> tf.Tensor:
    """``encoded``, once an in-graph check has found it starts as an image the plan's decoder
    takes (a JPEG's signature for a JPEG plan, any known image's otherwise).

    A value that is not one (a damaged record whose CRC is intact, in shards another tool
    wrote) then fails with tfopt's message and ``hint`` (what to run to find such records),
    where TensorFlow's decoder says "Invalid JPEG data" and nothing of where or what next. The
    check reads a few bytes: microseconds beside the decode.
    """
    signatures = [signature for signature, image_format in SIGNATURES
                  if not plan.jpeg or image_format is ImageFormat.JPEG]
    starts = tf.stack([tf.equal(tf.strings.substr(encoded, 0, len(signature)), signature)
                       for signature in signatures])
    what = "a JPEG image" if plan.jpeg else "a JPEG, PNG, GIF or BMP image"
    check = tf.debugging.Assert(tf.reduce_any(starts), [
        f"tfopt: a record's encoded image is not {what}; its first bytes:",
        tf.strings.substr(encoded, 0, 16), hint])
    with tf.control_dependencies([check]):
        return tf.identity(encoded)


def decode_full(encoded, plan: DecodePlan) -> tf.Tensor:
    """Decode a whole image to uint8 ``[h, w, 3]``: a JPEG at its own reduced scale where the
    plan keeps a side (``plan.min_decoded_side``), else at ``plan.ratio``."""
    if plan.jpeg and plan.min_decoded_side:
        return decode_jpeg_scaled(encoded, plan.min_decoded_side)
    if plan.jpeg:
        return tf.io.decode_jpeg(encoded, channels=3, ratio=plan.ratio)
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def crop_and_resize(image, plan: DecodePlan, seed=None) -> tf.Tensor:
    """Crop a decoded image (random or central, per ``plan``) and resize it to the target."""
    shape = tf.shape(image)
    window = (random_crop_window(shape, seed) if plan.random_crop
              else central_crop_window(shape, plan.crop_fraction))
    crop = tf.slice(image, [window[0], window[1], 0], [window[2], window[3], 3])
    return resize_uint8(crop, plan.target)


def decode_to_target(encoded, plan: DecodePlan, seed=None) -> tf.Tensor:
    """Decode one encoded image straight to a ``plan.target`` uint8 array."""
    if plan.strategy is DecodeStrategy.CROP:
        shape = tf.io.extract_jpeg_shape(encoded)  # reads the header only
        if plan.random_crop:
            window = snap_to_block_column(random_crop_window(shape, seed), shape[1])
        else:
            window = central_crop_window(shape, plan.crop_fraction)
        crop = tf.io.decode_and_crop_jpeg(encoded, window, channels=3)
        return resize_uint8(crop, plan.target)
    return crop_and_resize(decode_full(encoded, plan), plan, seed)
