"""On-device augmentation: seeded ops on whole batches, the Keras layer, the dataset helper."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tfopt._tf import import_tensorflow

tf = import_tensorflow()
import keras  # noqa: E402  (after TensorFlow, without its banners)

from tfopt.data.augment import (  # noqa: E402
    IMAGENET_MEAN,
    IMAGENET_STD,
    Augment,
    AugmentConfig,
    _brightness,
    _contrast,
    _crop_and_resize,
    _saturation,
    augment_batch,
    augment_dataset,
    sample_crop_boxes,
)
from tfopt.errors import InvalidArgumentError  # noqa: E402

# Only the op under test: no flip, 0-255 output, float32.
PLAIN = dict(horizontal_flip=0.0, normalization="none", output_dtype="float32")
ALL_OPS = dict(output_size=24, random_crop=True, horizontal_flip=0.5, vertical_flip=0.5,
               brightness=0.2, contrast=0.3, saturation=0.4)


def uint8_batch(seed=0, batch=8, height=32, width=40, channels=3):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.integers(0, 256, (batch, height, width, channels), dtype=np.uint8))


@pytest.fixture
def global_policy(request):
    keras.mixed_precision.set_global_policy(request.param)
    try:
        yield request.param
    finally:
        keras.mixed_precision.set_global_policy("float32")


# --- seeds -----------------------------------------------------------------------------------

def test_same_seed_same_batch_other_seed_other_batch():
    images = uint8_batch()
    first = augment_batch(images, seed=7, **ALL_OPS)
    again = augment_batch(images, seed=tf.constant([7, 0]), **ALL_OPS)
    other = augment_batch(images, seed=8, **ALL_OPS)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert not np.allclose(first.numpy(), other.numpy())
    assert first.shape == (8, 24, 24, 3)


def test_switching_one_op_on_keeps_the_other_ops_draws():
    images = uint8_batch(batch=16)
    horizontal = augment_batch(images, seed=3, horizontal_flip=0.5, normalization="none")
    both = augment_batch(images, seed=3, horizontal_flip=0.5, vertical_flip=1.0,
                         brightness=0.0, normalization="none")
    np.testing.assert_array_equal(tf.image.flip_up_down(both).numpy(), horizontal.numpy())


def test_layer_reproducible_across_fresh_models():
    images = uint8_batch(batch=4)

    def two_calls():
        inputs = keras.Input((32, 40, 3), dtype="uint8")
        layer = Augment(seed=11, **ALL_OPS)
        keras.Model(inputs, layer(inputs))
        return [layer(images, training=True).numpy() for _ in range(2)]

    first_model, second_model = two_calls(), two_calls()
    np.testing.assert_array_equal(first_model[0], second_model[0])
    np.testing.assert_array_equal(first_model[1], second_model[1])
    assert not np.allclose(first_model[0], first_model[1])  # successive calls differ


# --- flips -----------------------------------------------------------------------------------

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


# --- random resized crop ---------------------------------------------------------------------

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


def test_crop_boxes_exact_scale_and_ratio():
    boxes = sample_crop_boxes(tf.constant([1, 2]), 50, (80, 80), scale=(0.25, 0.25),
                              ratio=(1.0, 1.0)).numpy()
    np.testing.assert_allclose(boxes[:, 2] - boxes[:, 0], 0.5, atol=1e-5)
    np.testing.assert_allclose(boxes[:, 3] - boxes[:, 1], 0.5, atol=1e-5)
    with pytest.raises(InvalidArgumentError, match="scale"):
        sample_crop_boxes(0, 4, (8, 8), scale=(0.5, 0.2))


@pytest.mark.parametrize("dtype", [tf.uint8, tf.float32])
def test_crop_and_resize_matches_tensorflow(dtype):
    images = tf.cast(uint8_batch(batch=6, height=37, width=53), dtype)
    boxes = sample_crop_boxes(9, 6, (37, 53), scale=(0.05, 1.0), ratio=(0.3, 3.0))
    for size in [(24, 24), (1, 5), (60, 17)]:
        ours = _crop_and_resize(images, boxes, size)
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


# --- colour ----------------------------------------------------------------------------------

def test_zero_strength_colour_ops_are_identity():
    images = tf.cast(uint8_batch(), tf.float32)
    seed = tf.constant([4, 4])
    for op in (_brightness, _contrast, _saturation):
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


# --- normalisation ---------------------------------------------------------------------------

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


# --- MixUp / CutMix --------------------------------------------------------------------------

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


def test_numpy_integer_seeds_are_ints():
    layer = Augment(seed=np.int64(3), output_dtype="float32")
    assert layer.seed == 3 and type(layer.seed) is int
    same = Augment(seed=3, output_dtype="float32")
    images = uint8_batch(batch=2)
    np.testing.assert_array_equal(layer(images, training=True).numpy(),
                                  same(images, training=True).numpy())
    dataset = tf.data.Dataset.from_tensor_slices(images).batch(2)
    next(iter(augment_dataset(dataset, seed=np.int32(1))))


def test_layer_on_an_input_that_is_not_a_batch_of_images_says_so():
    with pytest.raises(InvalidArgumentError, match=r"expected a batch \[batch, height, width, "
                                                   r"channels\], got input shape \(None, 32, 3\)"):
        Augment(seed=0)(keras.Input((32, 3)))


# --- dtypes ----------------------------------------------------------------------------------

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


# --- the Keras layer -------------------------------------------------------------------------

def small_model(**augment_fields):
    inputs = keras.Input((32, 40, 3), dtype="uint8")
    x = Augment(seed=0, name="augment", **augment_fields)(inputs)
    x = keras.layers.Conv2D(4, 3, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(3, activation="softmax")(x)
    return keras.Model(inputs, outputs)


def test_layer_trains_with_fit_and_survives_save_and_load(tmp_path):
    model = small_model(**ALL_OPS)
    assert model.output_shape == (None, 3)
    assert model.get_layer("augment").output.shape == (None, 24, 24, 3)
    model.compile("adam", "sparse_categorical_crossentropy")
    images = uint8_batch(seed=1, batch=16).numpy()
    history = model.fit(images, np.arange(16) % 3, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    state = model.get_layer("augment")._seed_generator.state.numpy()
    assert state[1] == 2  # one fresh seed per training step

    before = model.predict(images, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded.predict(images, verbose=0), before, rtol=1e-5, atol=1e-6)
    assert loaded.get_layer("augment").config == model.get_layer("augment").config


def test_the_seed_generator_state_is_saved_and_loaded(tmp_path):
    images = uint8_batch(seed=2, batch=4)

    def model():
        inputs = keras.Input((32, 40, 3), dtype="uint8")
        return keras.Model(inputs, Augment(output_size=24, random_crop=True, seed=0,
                                           output_dtype="float32")(inputs))

    original = model()
    original(images, training=True)
    original(images, training=True)  # two draws made: the generator has moved on
    original.save_weights(tmp_path / "w.weights.h5")
    original.save(tmp_path / "m.keras")
    third = original(images, training=True).numpy()
    for loaded in (model(), None):
        if loaded is None:
            loaded = keras.models.load_model(tmp_path / "m.keras")
        else:
            loaded.load_weights(tmp_path / "w.weights.h5")
        # continues where the saved layer was, not at its first draw
        np.testing.assert_array_equal(loaded(images, training=True).numpy(), third)


def test_a_resumed_fit_continues_the_augmentation_and_ends_with_the_same_weights(tmp_path):
    from tfopt.train.backup import backup_callbacks

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (32, 16, 16, 3), dtype=np.uint8)
    labels = np.arange(32) % 3

    def fit(epochs, callbacks=()):
        keras.utils.set_random_seed(5)  # the same initial weights every time
        inputs = keras.Input((16, 16, 3), dtype="uint8")
        x = Augment(output_size=12, random_crop=True, seed=0, output_dtype="float32")(inputs)
        x = keras.layers.Flatten()(x)
        model = keras.Model(inputs, keras.layers.Dense(3)(x))
        model.compile(keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
        data = tf.data.Dataset.from_tensor_slices((images, labels)).batch(8)  # fixed order
        model.fit(data, epochs=epochs, verbose=0, callbacks=list(callbacks))
        return model.get_weights()

    straight = fit(4)
    fit(2, backup_callbacks(tmp_path, monitor="loss", delete_backup=False))  # "crashed" after 2
    resumed = fit(4, backup_callbacks(tmp_path, monitor="loss"))  # a new model, from the backup
    for a, b in zip(straight, resumed, strict=True):
        np.testing.assert_array_equal(a, b)


def test_layer_inference_is_deterministic_and_matches_the_function():
    layer = Augment(seed=3, **ALL_OPS)
    images = uint8_batch(batch=4)
    first, second = layer(images).numpy(), layer(images, training=False).numpy()
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(first, augment_batch(images, training=False, **ALL_OPS))
    clone = Augment.from_config(layer.get_config())
    assert clone.config == layer.config and clone.seed == 3


def test_layer_compiles_with_xla_and_draws_as_without_it():
    # Keras compiles model.fit with XLA by default on GPUs; the same seed must give the same
    # batch either way (tf.random.stateless_uniform floats alone would not)
    images = uint8_batch(batch=4)
    eager, compiled = Augment(seed=5, **ALL_OPS), Augment(seed=5, **ALL_OPS)
    xla = tf.function(lambda x: compiled(x, training=True), jit_compile=True)
    np.testing.assert_allclose(xla(images).numpy(), eager(images, training=True).numpy(),
                               atol=1e-3)
    assert compiled.supports_jit


def test_layer_refuses_mixup_and_cutmix():
    with pytest.raises(InvalidArgumentError, match="augment_dataset"):
        Augment(mixup_alpha=0.2)
    with pytest.raises(InvalidArgumentError, match="cutmix_alpha=1.0"):
        Augment(AugmentConfig(cutmix_alpha=1.0, num_classes=3))


def test_layer_under_mirrored_strategy_gives_replicas_different_draws():
    # logical devices must be set before TensorFlow starts: a fresh process
    script = textwrap.dedent("""
        from tfopt._tf import import_tensorflow
        tf = import_tensorflow()
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        import numpy as np
        from tfopt.data.augment import Augment
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            layer = Augment(seed=5, brightness=0.3, horizontal_flip=0.5)
        images = tf.constant(np.full((4, 8, 8, 3), 100, np.uint8))
        step = tf.function(lambda x: layer(x, training=True))
        for _ in range(2):
            results = strategy.experimental_local_results(strategy.run(step, args=(images,)))
        print(not np.allclose(results[0].numpy(), results[1].numpy()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"


# --- the dataset helper ----------------------------------------------------------------------

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


# --- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [
    ("output_size", 0),
    ("output_size", (224, 224, 3)),
    ("random_crop", "yes"),
    ("crop_scale", (0.5, 0.1)),
    ("crop_scale", (0.0, 1.0)),
    ("crop_ratio", (0, 1)),
    ("horizontal_flip", 1.5),
    ("vertical_flip", -0.1),
    ("brightness", -0.1),
    ("contrast", 2.0),
    ("saturation", "a lot"),
    ("normalization", "imagenet21k"),
    ("input_max", 0),
    ("mixup_alpha", -1.0),
    ("cutmix_alpha", float("nan")),
    ("num_classes", 1),
    ("output_dtype", "int32"),
])
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(InvalidArgumentError, match=f"{field}=") as error:
        AugmentConfig(**{field: value})
    assert repr(value)[:6] in str(error.value) or str(value)[:6] in str(error.value)
    with pytest.raises(InvalidArgumentError, match=field):
        AugmentConfig().replace(**{field: value})


def test_invalid_mean_std_and_options():
    with pytest.raises(InvalidArgumentError, match="std"):
        AugmentConfig(mean=(1.0, 2.0, 3.0), std=(1.0, 0.0, 1.0))
    with pytest.raises(InvalidArgumentError, match="give both"):
        AugmentConfig(mean=(1.0, 2.0, 3.0))
    with pytest.raises(InvalidArgumentError, match="normalization='unit'"):
        AugmentConfig(normalization="unit", mean=0.0, std=1.0)
    with pytest.raises(InvalidArgumentError, match="2 values for 3-channel"):
        augment_batch(uint8_batch(), mean=(1.0, 2.0), std=(1.0, 1.0))
    with pytest.raises(InvalidArgumentError, match="brightnes:"):
        augment_batch(uint8_batch(), brightnes=0.2)
    with pytest.raises(InvalidArgumentError, match="brightnes"):
        Augment(brightnes=0.2)
    with pytest.raises(InvalidArgumentError, match="seed="):
        augment_batch(uint8_batch(), seed=[1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="images"):
        augment_batch(tf.zeros([8, 8, 3], tf.uint8))
    with pytest.raises(InvalidArgumentError, match="int32"):
        augment_batch(tf.zeros([2, 8, 8, 3], tf.int32))


def test_config_defaults_and_replace():
    config = AugmentConfig(output_size=224, horizontal_flip=True, crop_scale=[0.2, 1])
    assert config.output_size == (224, 224)
    assert config.horizontal_flip == 0.5 and config.vertical_flip == 0.0
    assert config.crop_scale == (0.2, 1.0)
    assert config.mean_std == (IMAGENET_MEAN, IMAGENET_STD)
    assert config.replace(normalization="unit").mean_std == ((0.0,), (255.0,))
    assert config.replace(output_dtype=tf.float16).output_dtype == "float16"
    assert not config.mixes and config.replace(cutmix_alpha=1.0).mixes
    assert config.is_random and not AugmentConfig(horizontal_flip=0.0).is_random
