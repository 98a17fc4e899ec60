"""MixUp and CutMix: images and labels mixed with the same weights, and what they need."""

from __future__ import annotations

import numpy as np
import pytest

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
from augment_helpers import PLAIN, uint8_batch  # noqa: E402

from tfopt.data.augment.functional import (  # noqa: E402
    augment_batch,
    augment_dataset,
)
from tfopt.errors import InvalidArgumentError  # noqa: E402


def constant_images(batch, height=16, width=20):
    """Image b is the constant 10 * b + 5 (so every pixel tells which image it came from)."""
    values = np.arange(batch, dtype=np.float32) * 10 + 5
    return tf.constant(np.broadcast_to(values[:, None, None, None], (batch, height, width, 3)))


def partners(labels, own):
    """The partner of each example: the class (= index) holding the rest of its label mass."""
    rest = labels.copy()
    rest[np.arange(len(own)), own] = -1
    return rest.argmax(axis=1)


def test_mixup_mixes_images_and_labels_with_the_same_lambda():
    batch = 8
    images, own = constant_images(batch), np.arange(batch)
    out, labels = augment_batch(images, tf.constant(own), seed=3, mixup_alpha=0.4,
                                num_classes=batch, **PLAIN)
    out, labels = out.numpy(), labels.numpy()
    assert labels.dtype == np.float32 and labels.shape == (batch, batch)
    np.testing.assert_allclose(labels.sum(axis=1), 1.0, atol=1e-6)
    assert ((labels > 0).sum(axis=1) <= 2).all()
    mix = labels[own, own]
    partner = partners(labels, own)
    assert (partner != own).all()
    pixel = images.numpy()[:, 0, 0, 0]
    np.testing.assert_allclose(out[:, 0, 0, 0], mix * pixel + (1 - mix) * pixel[partner],
                               atol=1e-3)
    assert np.ptp(out, axis=(1, 2, 3)).max() < 1e-3  # a blend of constants is a constant
    assert mix.std() > 0.05  # one lambda per example


def test_cutmix_pastes_a_box_of_the_partner_with_lambda_from_its_area():
    batch, height, width = 8, 16, 20
    images, own = constant_images(batch, height, width), np.arange(batch)
    one_hot = tf.one_hot(own, batch)  # soft/one-hot labels are taken as they are
    out, labels = augment_batch(images, one_hot, seed=4, cutmix_alpha=1.0, **PLAIN)
    out, labels = out.numpy()[..., 0], labels.numpy()
    np.testing.assert_allclose(labels.sum(axis=1), 1.0, atol=1e-6)
    pixel = images.numpy()[:, 0, 0, 0]
    pasted_somewhere = 0
    for b in range(batch):
        from_partner = out[b] != pixel[b]
        assert np.isin(out[b], pixel).all()  # pasted, not blended
        area = from_partner.mean()
        np.testing.assert_allclose(labels[b, b], 1.0 - area, atol=1e-6)
        if from_partner.any():
            pasted_somewhere += 1
            rows, cols = np.nonzero(from_partner)
            box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
            assert box == from_partner.sum()  # one rectangle
            source = out[b][from_partner][0]
            partner = int(np.argmin(np.abs(pixel - source)))
            assert (out[b][from_partner] == pixel[partner]).all()
            np.testing.assert_allclose(labels[b, partner], area, atol=1e-6)
    assert pasted_somewhere >= batch // 2


def test_mixup_and_cutmix_together():
    images = constant_images(16)
    out, labels = augment_batch(images, tf.range(16), seed=6, mixup_alpha=0.4,
                                cutmix_alpha=1.0, num_classes=16, **PLAIN)
    np.testing.assert_allclose(labels.numpy().sum(axis=1), 1.0, atol=1e-6)
    is_constant = np.ptp(out.numpy(), axis=(1, 2, 3)) < 1e-3
    is_pasted = [np.isin(o, images.numpy()[:, 0, 0, 0]).all() for o in out.numpy()]
    # both kinds occur (a cutmix box of zero area also looks constant: count strictly)
    assert (~is_constant).any() and any(not p for p in is_pasted)


def test_mix_errors_name_what_is_missing():
    images = uint8_batch(batch=4)
    with pytest.raises(InvalidArgumentError, match="num_classes"):
        augment_batch(images, tf.range(4), seed=0, mixup_alpha=0.2)
    with pytest.raises(InvalidArgumentError, match="labels"):
        augment_batch(images, seed=0, cutmix_alpha=1.0, num_classes=4)
    with pytest.raises(InvalidArgumentError, match="num_classes=3"):
        augment_batch(images, tf.one_hot(tf.range(4), 4), seed=0, mixup_alpha=0.2,
                      num_classes=3)
    # without mixing, labels come back untouched
    _, labels = augment_batch(images, tf.range(4), seed=0)
    np.testing.assert_array_equal(labels.numpy(), np.arange(4))


def test_class_indices_outside_num_classes_are_an_error_eager_and_in_a_graph():
    # tf.one_hot would make all-zero label rows of them: examples that teach nothing
    images = uint8_batch(batch=4)
    with pytest.raises(InvalidArgumentError, match=r"\[0, num_classes=10\); got \[20, 21"):
        augment_batch(images, tf.range(4) + 20, seed=0, mixup_alpha=0.2, num_classes=10)
    with pytest.raises(InvalidArgumentError, match=r"got \[-1\]"):
        augment_batch(images, tf.constant([0, 1, -1, 2]), seed=0, cutmix_alpha=1.0,
                      num_classes=10)
    dataset = tf.data.Dataset.from_tensor_slices((images, tf.range(4) + 9)).batch(4)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"\[0, num_classes=10\)"):
        list(augment_dataset(dataset, seed=0, mixup_alpha=0.2, num_classes=10))
    # the last class is in range
    ok = tf.data.Dataset.from_tensor_slices((images, tf.constant([9, 0, 9, 3]))).batch(4)
    _, labels = next(iter(augment_dataset(ok, seed=0, mixup_alpha=0.2, num_classes=10)))
    np.testing.assert_allclose(labels.numpy().sum(axis=1), 1.0, rtol=1e-6)
