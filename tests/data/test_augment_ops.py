"""The batch ops: flips where drawn, crop-and-resize against TensorFlow, central crops, colour."""

from __future__ import annotations

import numpy as np
import pytest

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
from augment_helpers import ALL_OPS, PLAIN, uint8_batch  # noqa: E402

from tfopt.data.augment.functional import (  # noqa: E402
    augment_batch,
    sample_crop_boxes,
)
from tfopt.data.augment.ops import (  # noqa: E402
    adjust_brightness,
    adjust_contrast,
    adjust_saturation,
    crop_and_resize,
)
from tfopt.errors import InvalidArgumentError  # noqa: E402


def test_flip_flips_exactly_where_drawn():
    images = uint8_batch(batch=16)
    as_float = tf.cast(images, tf.float32).numpy()
    flipped = tf.image.flip_left_right(as_float).numpy()
    out = augment_batch(images, seed=1, horizontal_flip=0.5, normalization="none").numpy()
    is_flipped = []
    for example, original, mirror in zip(out, as_float, flipped, strict=True):
        assert np.array_equal(example, original) or np.array_equal(example, mirror)
        is_flipped.append(np.array_equal(example, mirror))
    assert 0 < sum(is_flipped) < 16

    always = augment_batch(images, seed=1, horizontal_flip=1.0, normalization="none")
    np.testing.assert_array_equal(always.numpy(), flipped)
    never = augment_batch(images, seed=1, horizontal_flip=False, normalization="none")
    np.testing.assert_array_equal(never.numpy(), as_float)
    upside_down = augment_batch(images, seed=1, horizontal_flip=0.0, vertical_flip=1.0,
                                normalization="none")
    np.testing.assert_array_equal(upside_down.numpy(), tf.image.flip_up_down(as_float).numpy())


@pytest.mark.parametrize("dtype", [tf.uint8, tf.float32])
def test_crop_and_resize_matches_tensorflow(dtype):
    images = tf.cast(uint8_batch(batch=6, height=37, width=53), dtype)
    boxes = sample_crop_boxes(9, 6, (37, 53), scale=(0.05, 1.0), ratio=(0.3, 3.0))
    for size in [(24, 24), (1, 5), (60, 17)]:
        ours = crop_and_resize(images, boxes, size)
        theirs = tf.image.crop_and_resize(images, boxes, tf.range(6), size)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), atol=2e-3)


def test_random_crop_output_shape_and_content():
    images = uint8_batch(batch=4, height=48, width=64)
    out = augment_batch(images, seed=0, output_size=(20, 30), random_crop=True, **PLAIN)
    assert out.shape == (4, 20, 30, 3)
    same_size = augment_batch(images, seed=0, random_crop=True, **PLAIN)
    assert same_size.shape == (4, 48, 64, 3)
    assert not np.array_equal(same_size.numpy(), tf.cast(images, tf.float32).numpy())
    # a crop of a constant image is that constant
    gray = tf.fill([4, 48, 64, 3], tf.constant(77, tf.uint8))
    np.testing.assert_allclose(
        augment_batch(gray, seed=0, output_size=16, random_crop=True, **PLAIN).numpy(), 77.0)


def test_inference_resizes_the_central_crop():
    images = uint8_batch(batch=3, height=40, width=80)
    out = augment_batch(images, training=False, output_size=20, **PLAIN)
    central = tf.image.crop_and_resize(images, [[0.0, 0.25, 1.0, 0.75]] * 3, tf.range(3), (20, 20))
    np.testing.assert_allclose(out.numpy(), central.numpy(), atol=2e-3)
    unchanged = augment_batch(images, training=False, **{**ALL_OPS, **PLAIN,
                                                         "output_size": (40, 80)})
    np.testing.assert_array_equal(unchanged.numpy(), tf.cast(images, tf.float32).numpy())


def test_zero_strength_colour_ops_are_identity():
    images = tf.cast(uint8_batch(), tf.float32)
    seed = tf.constant([4, 4])
    for op in (adjust_brightness, adjust_contrast, adjust_saturation):
        np.testing.assert_allclose(op(images, seed, 0.0).numpy(), images.numpy(), atol=1e-3)
    off = augment_batch(images, seed=4, brightness=0.0, contrast=0.0, saturation=0.0, **PLAIN)
    np.testing.assert_array_equal(off.numpy(), images.numpy())


def test_brightness_shifts_each_image_within_range():
    gray = tf.fill([32, 8, 8, 3], 128.0)
    out = augment_batch(gray, seed=2, brightness=0.2, **PLAIN).numpy()
    shift = out.reshape(32, -1) - 128.0
    assert np.allclose(shift, shift[:, :1], atol=1e-4)  # one shift per image
    assert np.abs(shift).max() <= 0.2 * 255 + 1e-3
    assert shift.min() < -10 and shift.max() > 10  # both directions, not tiny


def test_contrast_scales_deviation_around_the_channel_mean():
    rng = np.random.default_rng(3)
    images = tf.constant(rng.uniform(100, 150, (16, 10, 10, 3)), tf.float32)  # never clipped
    out = augment_batch(images, seed=5, contrast=0.5, **PLAIN).numpy()
    before, after = images.numpy(), out
    np.testing.assert_allclose(after.mean(axis=(1, 2)), before.mean(axis=(1, 2)), atol=1e-3)
    centred = lambda x: x - x.mean(axis=(1, 2), keepdims=True)  # noqa: E731
    factors = centred(after).std(axis=(1, 2, 3)) / centred(before).std(axis=(1, 2, 3))
    assert factors.min() >= 0.5 - 1e-3 and factors.max() <= 1.5 + 1e-3
    assert factors.min() < 0.9 and factors.max() > 1.1
    for example, factor, original in zip(after, factors, before, strict=True):
        reference = tf.image.adjust_contrast(original, factor).numpy()
        np.testing.assert_allclose(example, reference, atol=1e-2)


def test_saturation_keeps_gray_and_scales_colour():
    gray = tf.tile(tf.random.stateless_uniform([8, 6, 6, 1], [1, 1], 0, 255), [1, 1, 1, 3])
    np.testing.assert_allclose(
        augment_batch(gray, seed=1, saturation=0.8, **PLAIN).numpy(), gray.numpy(), atol=1e-3)
    rng = np.random.default_rng(4)
    colour = tf.constant(rng.uniform(90, 160, (16, 6, 6, 3)), tf.float32)
    out = augment_batch(colour, seed=1, saturation=0.5, **PLAIN).numpy()
    luma = np.array([0.299, 0.587, 0.114])
    np.testing.assert_allclose(out @ luma, colour.numpy() @ luma, atol=1e-2)
    spread = lambda x: (x.max(-1) - x.min(-1)).mean(axis=(1, 2))  # noqa: E731
    factors = spread(out) / spread(colour.numpy())
    assert factors.min() >= 0.5 - 1e-3 and factors.max() <= 1.5 + 1e-3
    assert factors.min() < 0.9 and factors.max() > 1.1


def test_saturation_needs_rgb():
    with pytest.raises(InvalidArgumentError, match="saturation"):
        augment_batch(uint8_batch(channels=1), seed=0, saturation=0.5)
