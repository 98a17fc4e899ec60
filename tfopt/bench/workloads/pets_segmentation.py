"""Segmentation: keras.io's "Image segmentation with a U-Net-like architecture" (Oxford Pets).

Source: https://keras.io/examples/vision/oxford_pets_image_segmentation/
(https://github.com/keras-team/keras-io/blob/master/examples/vision/oxford_pets_image_segmentation.py).

As the example (its Keras 3 version): JPEGs in ``images/`` and trimaps (PNG, pixel values 1
foreground, 2 background, 3 boundary) in ``annotations/trimaps/``, the sorted path lists
shuffled with ``random.Random(1337)`` and the last ones set aside for validation; each split a
``Dataset.from_tensor_slices`` of path pairs mapped (``num_parallel_calls=AUTOTUNE``) through
the example's loader (``decode_png`` with 3 channels, resized, ``convert_image_dtype``; the mask
decoded with 1 channel, resized by nearest neighbour, minus one), batched by 32 (the training
split capped by ``max_dataset_len`` as the example caps it); the Xception-style U-Net (entry
Conv2D(32, stride 2), SeparableConv2D blocks of 64, 128, 256 with residuals, Conv2DTranspose
blocks of 256, 128, 64, 32 with upsampled residuals, a per-pixel softmax over 3 classes);
RMSprop, sparse categorical cross-entropy (no metric: the loss is what it reports);
``model.fit(train_dataset, epochs=15, validation_data=valid_dataset, callbacks=[ModelCheckpoint(
"oxford_segmentation.keras", save_best_only=True)])``, the checkpoint written to the data
folder.

Data: "pets" drawn locally: a furry blob with ears, its colour and stripes random, over a
smoother background of another colour; its trimap marks the blob (1), the background (2) and a
boundary band a few pixels wide (3), as the Oxford trimaps do.

Its validation loss trails: the model's batch normalisation layers evaluate with moving
averages of the batch statistics (momentum 0.99), which lag the weights by about a hundred
steps, and the images reach the first convolution unscaled (0-255: ``convert_image_dtype`` of a
float image does not rescale it), so the first statistics are far from the averages' start.
keras.io's own run shows it (a validation loss more than three times the training loss after
15 epochs), and in the few hundred steps this corpus can afford the validation loss stays near
the class-share baseline. The learned signal is therefore judged on the training loss
(``learned_from="loss"``); the validation loss is still the metric the two arms compare.

Scaled: images of 64x64 instead of 160x160 (the model's widths are the example's; at the
example's size one epoch would take minutes on a CPU), 320 training and 80 validation
images instead of 1,000 and 1,000 (``scale`` multiplies), 10 epochs instead of 15.
"""

from __future__ import annotations

import random

import keras
import numpy as np
import tensorflow as tf

from tfopt.bench.workloads._base import Data, Workload, fresh_folder, scaled_count

NAME = "pets_segmentation"
IMG_SIZE = (64, 64)
NUM_CLASSES = 3
BATCH = 32
SHUFFLE_SEED = 1337


def draw_pet(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(image RGB uint8, trimap uint8 of 1, 2, 3) of one pet on a background."""
    height, width = (int(side) for side in rng.integers(180, 281, size=2))
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    ground = rng.uniform(40, 220, 3)
    image = (ground + 40 * (y / height - 0.5)[..., None] * rng.uniform(-1, 1, 3)
             + rng.normal(0, 6, (height, width, 3)))
    ry, rx = rng.uniform(0.2, 0.35) * height, rng.uniform(0.2, 0.35) * width
    cy, cx = rng.uniform(ry + 0.1 * height, height - ry), rng.uniform(rx, width - rx)
    angle = np.arctan2(y - cy, x - cx)
    wobble = 1 + 0.12 * np.sin(3 * angle + rng.uniform(0, 6)) + 0.06 * np.sin(7 * angle)
    inside = ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 < wobble ** 2
    for side in (-1, 1):  # two ears on top of the head
        ey, ex = cy - 0.95 * ry, cx + side * 0.5 * rx
        inside |= (np.abs(x - ex) < 0.25 * rx * (1 - (ey - y) / (0.6 * ry))) & (y < ey + 0.1 * ry) \
            & (y > ey - 0.6 * ry)
    fur = rng.uniform(30, 230, 3)
    stripes = np.sin((x * np.cos(angle.mean()) + y) / rng.uniform(3, 8))[..., None]
    pet = fur + 35 * stripes * rng.uniform(0.3, 1.0) + rng.normal(0, 22, (height, width, 3))
    image = np.where(inside[..., None], pet, image)
    trimap = np.where(inside, 1, 2).astype(np.uint8)
    edge = inside ^ _eroded(inside, 3) | (_dilated(inside, 3) & ~inside)
    trimap[edge] = 3
    return np.clip(image, 0, 255).astype(np.uint8), trimap


def _shifted_any(mask: np.ndarray, radius: int) -> np.ndarray:
    out = mask.copy()
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            out |= np.roll(np.roll(mask, dy, axis=0), dx, axis=1)
    return out


def _dilated(mask, radius):
    return _shifted_any(mask, radius)


def _eroded(mask, radius):
    return ~_shifted_any(~mask, radius)


def make_data(folder, seed: int, scale: float = 1.0) -> Data:
    """``folder/images/<n>.jpg`` and ``folder/annotations/trimaps/<n>.png``."""
    rng = np.random.default_rng(seed)
    count = scaled_count(400, scale, 80)
    folder = fresh_folder(folder, NAME, seed, scale)
    (folder / "images").mkdir()
    (folder / "annotations" / "trimaps").mkdir(parents=True)
    files = []
    for index in range(count):
        image, trimap = draw_pet(rng)
        jpeg = folder / "images" / f"pet_{index:05d}.jpg"
        png = folder / "annotations" / "trimaps" / f"pet_{index:05d}.png"
        jpeg.write_bytes(tf.io.encode_jpeg(image, quality=90).numpy())
        png.write_bytes(tf.io.encode_png(trimap[..., None]).numpy())
        files += [jpeg, png]
    val_samples = count // 5
    return Data(NAME, folder, seed, scale, count - val_samples, val_samples, files=files,
                info={"input_dir": folder / "images",
                      "target_dir": folder / "annotations" / "trimaps",
                      "val_samples": val_samples, "max_dataset_len": count - val_samples,
                      "checkpoint": folder / "oxford_segmentation.keras"})


def split_paths(data: Data) -> tuple[list[str], list[str], list[str], list[str]]:
    """(train inputs, train targets, val inputs, val targets) as the example splits them."""
    input_img_paths = sorted(str(path) for path in data.info["input_dir"].iterdir()
                             if path.name.endswith(".jpg"))
    target_img_paths = sorted(str(path) for path in data.info["target_dir"].iterdir()
                              if path.name.endswith(".png") and not path.name.startswith("."))
    random.Random(SHUFFLE_SEED).shuffle(input_img_paths)
    random.Random(SHUFFLE_SEED).shuffle(target_img_paths)
    val = data.info["val_samples"]
    return (input_img_paths[:-val], target_img_paths[:-val], input_img_paths[-val:],
            target_img_paths[-val:])


def get_dataset(batch_size, img_size, input_img_paths, target_img_paths, max_dataset_len=None):
    """The example's loader: path pairs to (image, mask) batches."""

    def load_img_masks(input_img_path, target_img_path):
        input_img = tf.io.read_file(input_img_path)
        input_img = tf.io.decode_png(input_img, channels=3)
        input_img = tf.image.resize(input_img, img_size)
        input_img = tf.image.convert_image_dtype(input_img, "float32")
        target_img = tf.io.read_file(target_img_path)
        target_img = tf.io.decode_png(target_img, channels=1)
        target_img = tf.image.resize(target_img, img_size, method="nearest")
        target_img = tf.image.convert_image_dtype(target_img, "uint8")
        return input_img, target_img - 1  # trimaps count from 1

    if max_dataset_len:
        input_img_paths = input_img_paths[:max_dataset_len]
        target_img_paths = target_img_paths[:max_dataset_len]
    dataset = tf.data.Dataset.from_tensor_slices((input_img_paths, target_img_paths))
    dataset = dataset.map(load_img_masks, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size)


def inputs(data: Data) -> dict:
    train_inputs, train_targets, val_inputs, val_targets = split_paths(data)
    train_dataset = get_dataset(BATCH, IMG_SIZE, train_inputs, train_targets,
                                max_dataset_len=data.info["max_dataset_len"])
    valid_dataset = get_dataset(BATCH, IMG_SIZE, val_inputs, val_targets)
    return {"train": train_dataset, "validation": valid_dataset,
            "checkpoint": data.info["checkpoint"]}


def build_model(_inputs) -> keras.Model:
    """The example's ``get_model(img_size, num_classes)``."""
    layers = keras.layers
    image = keras.Input(shape=IMG_SIZE + (3,))
    x = layers.Conv2D(32, 3, strides=2, padding="same")(image)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    previous_block_activation = x
    for filters in (64, 128, 256):
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
        residual = layers.Conv2D(filters, 1, strides=2, padding="same")(previous_block_activation)
        x = layers.add([x, residual])
        previous_block_activation = x
    for filters in (256, 128, 64, 32):
        x = layers.Activation("relu")(x)
        x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.Activation("relu")(x)
        x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)
        x = layers.UpSampling2D(2)(x)
        residual = layers.UpSampling2D(2)(previous_block_activation)
        residual = layers.Conv2D(filters, 1, padding="same")(residual)
        x = layers.add([x, residual])
        previous_block_activation = x
    outputs = layers.Conv2D(NUM_CLASSES, 3, activation="softmax", padding="same")(x)
    return keras.Model(image, outputs)


def compile_args() -> dict:
    return {"optimizer": "rmsprop", "loss": "sparse_categorical_crossentropy"}


def callbacks(inputs: dict) -> list:
    return [keras.callbacks.ModelCheckpoint(str(inputs["checkpoint"]), save_best_only=True)]


def plain_fit(model, inputs: dict, epochs: int, verbose=0):
    return model.fit(inputs["train"], epochs=epochs, validation_data=inputs["validation"],
                     callbacks=callbacks(inputs), verbose=verbose)


def run_inputs(inputs: dict) -> dict:
    return {"source": inputs["train"], "validation": inputs["validation"]}


def baseline(data: Data) -> float:
    """The validation loss of predicting, for every pixel, the class shares of the training
    masks."""
    train_inputs, train_targets, val_inputs, val_targets = split_paths(data)

    def shares(inputs_, targets):
        counts = np.zeros(NUM_CLASSES)
        for _, mask in get_dataset(BATCH, IMG_SIZE, inputs_, targets):
            counts += np.bincount(mask.numpy().ravel(), minlength=NUM_CLASSES)
        return counts / counts.sum()

    train = shares(train_inputs, train_targets)
    validation = shares(val_inputs, val_targets)
    return float(-(validation * np.log(train)).sum())


WORKLOAD = Workload(
    name=NAME, kind="segmentation",
    source=("https://keras.io/examples/vision/oxford_pets_image_segmentation/",
            "https://github.com/keras-team/keras-io/blob/master/examples/vision/"
            "oxford_pets_image_segmentation.py"),
    scaled="64x64 instead of 160x160; 320 + 80 synthetic pets instead of 1,000 + 1,000; "
           "10 epochs instead of 15",
    epochs=10, metric="val_loss", higher_is_better=False, make_data=make_data,
    inputs=inputs, build_model=build_model, compile_args=compile_args, plain_fit=plain_fit,
    run_inputs=run_inputs, baseline=baseline, callbacks=callbacks, learned_from="loss")
