"""The functions: crop boxes, normalisation, output dtypes, and augment_dataset."""

from __future__ import annotations

import numpy as np
import pytest

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
import keras  # noqa: E402  (after TensorFlow, without its banners)
from augment_helpers import ALL_OPS, uint8_batch  # noqa: E402

from tfopt.data.augment.config import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402
from tfopt.data.augment.functional import (  # noqa: E402
    augment_batch,
    augment_dataset,
    sample_crop_boxes,
)
from tfopt.data.augment.layer import Augment  # noqa: E402
from tfopt.errors import InvalidArgumentError  # noqa: E402


@pytest.mark.parametrize("image_size", [(64, 64), (100, 300), (300, 100)])
def test_crop_boxes_stay_in_bounds_and_ranges(image_size):
    height, width = image_size
    boxes = sample_crop_boxes(5, 4000, image_size).numpy()
    assert boxes.shape == (4000, 4)
    assert boxes.min() >= 0.0 and boxes.max() <= 1.0
    box_h, box_w = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    area = box_h * box_w
    ratio = box_w * width / (box_h * height)
    assert area.min() >= 0.08 - 1e-5 and area.max() <= 1.0 + 1e-5
    assert ratio.min() >= 3 / 4 - 1e-4 and ratio.max() <= 4 / 3 + 1e-4
    # the whole ranges are used, and positions vary
    assert area.min() < 0.1 and area.max() > (0.9 if height == width else 0.4)
    assert boxes[:, 0].std() > 0.01 and boxes[:, 1].std() > 0.01


@pytest.fixture
def global_policy(request):
    keras.mixed_precision.set_global_policy(request.param)
    try:
        yield request.param
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_crop_boxes_exact_scale_and_ratio():
    boxes = sample_crop_boxes(tf.constant([1, 2]), 50, (80, 80), scale=(0.25, 0.25),
                              ratio=(1.0, 1.0)).numpy()
    np.testing.assert_allclose(boxes[:, 2] - boxes[:, 0], 0.5, atol=1e-5)
    np.testing.assert_allclose(boxes[:, 3] - boxes[:, 1], 0.5, atol=1e-5)
    with pytest.raises(InvalidArgumentError, match="scale"):
        sample_crop_boxes(0, 4, (8, 8), scale=(0.5, 0.2))


def test_normalisation_presets_and_custom():
    white = tf.fill([2, 4, 4, 3], tf.constant(255, tf.uint8))
    black = tf.zeros([2, 4, 4, 3], tf.uint8)
    plain = dict(horizontal_flip=0.0, output_dtype="float32")
    expected = (255.0 - np.array(IMAGENET_MEAN)) / np.array(IMAGENET_STD)
    out = augment_batch(white, seed=0, **plain).numpy()
    np.testing.assert_allclose(out, np.broadcast_to(expected, out.shape), rtol=1e-5)
    assert augment_batch(white, seed=0, normalization="unit", **plain).numpy().min() == 1.0
    assert augment_batch(black, seed=0, normalization="symmetric", **plain).numpy().max() == -1.0
    custom = augment_batch(white, seed=0, mean=(5.0, 55.0, 255.0), std=(10.0, 100.0, 1.0),
                           **plain).numpy()
    np.testing.assert_allclose(custom[0, 0, 0], [25.0, 2.0, 0.0], rtol=1e-6)
    # float input in [0, 1] means the same as uint8 in 0-255
    unit_float = augment_batch(tf.ones([2, 4, 4, 3]), seed=0, input_max=1.0, **plain).numpy()
    np.testing.assert_allclose(unit_float, out, rtol=1e-6)


@pytest.mark.parametrize("global_policy", ["mixed_float16", "mixed_bfloat16"], indirect=True)
def test_output_is_the_policy_compute_dtype_and_close_to_float32(global_policy):
    images = uint8_batch(batch=4)
    compute_dtype = keras.mixed_precision.global_policy().compute_dtype
    out = augment_batch(images, seed=1, **ALL_OPS)
    assert out.dtype.name == compute_dtype
    reference = augment_batch(images, seed=1, output_dtype="float32", **ALL_OPS)
    tolerance = 2e-3 if compute_dtype == "float16" else 2e-2  # 10 vs 7 mantissa bits, |x| < 3
    np.testing.assert_allclose(tf.cast(out, tf.float32).numpy(), reference.numpy(),
                               atol=tolerance)
    layer = Augment(seed=1, **ALL_OPS)
    assert layer(images, training=True).dtype.name == compute_dtype
    assert layer(tf.cast(images, tf.float32)).dtype.name == compute_dtype


def test_explicit_output_dtype_and_float_inputs():
    images = uint8_batch(batch=2)
    assert augment_batch(images, seed=0, output_dtype="bfloat16").dtype == tf.bfloat16
    halves = tf.cast(images, tf.float16)
    from_half = augment_batch(halves, seed=0, **ALL_OPS)
    from_uint8 = augment_batch(images, seed=0, **ALL_OPS)
    assert from_half.dtype == tf.float32
    np.testing.assert_allclose(from_half.numpy(), from_uint8.numpy(), atol=1e-4)


def test_augment_dataset_is_reproducible_and_varies_per_batch():
    images = np.repeat(uint8_batch(batch=1).numpy(), 8, axis=0)  # identical batches
    dataset = tf.data.Dataset.from_tensor_slices((images, np.arange(8))).batch(4)

    def run(seed):
        mapped = augment_dataset(dataset, seed=seed, brightness=0.3, mixup_alpha=0.2,
                                 num_classes=8)
        return [(x.numpy(), y.numpy()) for x, y in mapped]

    first, again, other = run(1), run(1), run(2)
    for (x1, y1), (x2, y2) in zip(first, again, strict=True):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    assert not np.allclose(first[0][0], first[1][0])  # batch 0 and 1 differ
    assert not np.allclose(first[0][0], other[0][0])
    assert first[0][1].shape == (4, 8)


def test_augment_dataset_dict_features_and_sample_weights():
    images = uint8_batch(batch=4).numpy()
    dataset = tf.data.Dataset.from_tensor_slices(
        ({"image": images, "id": np.arange(4)}, np.arange(4), np.ones(4))).batch(2)
    features, labels, weights = next(iter(augment_dataset(dataset, image_key="image",
                                                          output_size=16)))
    assert features["image"].shape == (2, 16, 16, 3)
    np.testing.assert_array_equal(features["id"].numpy(), [0, 1])
    np.testing.assert_array_equal(labels.numpy(), [0, 1])
    np.testing.assert_array_equal(weights.numpy(), [1.0, 1.0])
    with pytest.raises(InvalidArgumentError, match="image_key"):
        augment_dataset(dataset)
    with pytest.raises(InvalidArgumentError, match="num_classes"):
        augment_dataset(dataset, image_key="image", mixup_alpha=0.2)
