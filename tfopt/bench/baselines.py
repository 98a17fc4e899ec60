"""The plain pipelines the benchmarks put tfopt beside: naive, guide, keras-folder, limit.

- :func:`naive_dataset`: ``TFRecordDataset -> [shuffle] -> map(parse, decode, crop, resize) ->
  batch``, one thread, no prefetch: what a first attempt looks like.
- :func:`guide_dataset`: the tf.data performance guide's recipe: parallel interleave over the
  shards, ``map(..., num_parallel_calls=AUTOTUNE)``, batch, prefetch (and shuffles when
  cropping at random, i.e. training).
- :func:`keras_folder_dataset`: ``keras.utils.image_dataset_from_directory`` on the image
  folder itself, then prefetch: what a Keras user runs instead of converting to shards.
- :func:`limit_dataset`: decoding the same encoded images from memory on all cores, nothing
  else: the ceiling of any pipeline that decodes full images.

Each but the Keras one takes a tfopt source (``PipelineBuilder(...).source``): its files, compression and keys.

Example:
    >>> source = PipelineBuilder("shards/", batch_size=64).source
    >>> dataset = naive_dataset(source, image_size=224, batch_size=64, crop="random")
"""

from __future__ import annotations

import contextlib
import enum
import io
from pathlib import Path

import tensorflow as tf

from tfopt._validate import choice, fail, flag, whole_number
from tfopt.data.decode import CROP_AREA, CROP_ASPECT, central_crop_window, resize_uint8
from tfopt.records.format.tfrecord import tf_compression_type

__all__ = ["Crop", "Pixels", "example_fn", "guide_dataset", "keras_folder_dataset",
           "limit_dataset", "naive_dataset"]

LIMIT_SAMPLE = 512  # encoded images held in memory for the decode limit
SHUFFLE_BUFFER = 1000  # examples; what a user's first training pipeline typically uses


class Crop(str, enum.Enum):
    """Which square of each image the baselines keep."""

    CENTRAL = "central"  # the central 87.5 % square, as for evaluation
    RANDOM = "random"  # a random-resized crop (Inception-style), as for training


class Pixels(str, enum.Enum):
    """What the baselines resize to."""

    FLOAT32 = "float32"  # tf.image.resize, then / 255: what the guide's users write
    UINT8 = "uint8"  # tfopt's bilinear resize back to uint8: the bytes tfopt's pipeline ships


def _random_crop(image):
    begin, crop_size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(image), tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), min_object_covered=0.1,
        aspect_ratio_range=CROP_ASPECT, area_range=CROP_AREA, max_attempts=10,
        use_image_if_no_bounding_boxes=True)
    return tf.slice(image, begin, crop_size)


def _central_crop(image):
    window = central_crop_window(tf.shape(image))
    return tf.slice(image, [window[0], window[1], 0], [window[2], window[3], 3])


_CROPS = {Crop.CENTRAL: _central_crop, Crop.RANDOM: _random_crop}
_RESIZES = {
    Pixels.FLOAT32: lambda image, size: tf.image.resize(image, size) / 255.0,
    Pixels.UINT8: resize_uint8,
}


def example_fn(source, image_size: int, *, crop: str = "central", pixels: str = "float32"):
    """The per-example function a user writes: parse, decode the whole image, crop, resize.

    Args:
        source: A tfopt source (its ``image_key`` and ``label_key``).
        image_size: Side of the output square, px.
        crop: ``"central"`` or ``"random"`` (:class:`Crop`). Defaults to "central".
        pixels: ``"float32"`` or ``"uint8"`` (:class:`Pixels`). Defaults to "float32".

    Returns:
        ``serialized -> (image, label)``, or ``serialized -> image`` without labels.

    Raises:
        tfopt.errors.InvalidArgumentError: An unknown crop or pixel type, a size below 1.
    """
    crop_fn = _CROPS[choice(Crop, crop, "crop")]
    resize = _RESIZES[choice(Pixels, pixels, "pixels")]
    size = (whole_number(image_size, "image_size", 1),) * 2
    image_key, label_key = source.image_key, source.label_key
    spec = {image_key: tf.io.FixedLenFeature([], tf.string)}
    if label_key:
        spec[label_key] = tf.io.FixedLenFeature([], tf.int64)

    def parse(serialized):
        example = tf.io.parse_single_example(serialized, spec)
        image = tf.io.decode_image(example[image_key], channels=3, expand_animations=False)
        image.set_shape([None, None, 3])
        image = resize(crop_fn(image), size)
        return (image, example[label_key]) if label_key else image

    return parse


def naive_dataset(source, image_size: int, batch_size: int, *, crop: str = "central",
                  pixels: str = "float32", shuffle: bool = False,
                  repeat: bool = False) -> tf.data.Dataset:
    """The default way: one thread parses, decodes, crops and resizes each record, then batch.

    ``TFRecordDataset -> [shuffle(1000), reshuffled each epoch] -> map(example_fn) -> batch ->
    [repeat]``: no ``num_parallel_calls``, no prefetch. ``tfopt bench pipeline`` runs it
    repeated, without shuffle, in float32 (the guide's pixels); ``tfopt bench train`` runs it
    shuffled, one pass per epoch, in uint8 central crops (the pixels tfopt's pipeline gives
    its model).

    Args:
        source: A tfopt source (files, compression, keys).
        image_size: Side of the output square, px.
        batch_size: Examples per batch.
        crop: See :func:`example_fn`. Defaults to "central".
        pixels: See :func:`example_fn`. Defaults to "float32".
        shuffle: Shuffle the records (buffer of 1000) before the map. Defaults to False.
        repeat: Repeat forever after the batch. Defaults to False (one pass).

    Raises:
        tfopt.errors.InvalidArgumentError: A bad value.
    """
    batch_size = whole_number(batch_size, "batch_size", 1)
    parse = example_fn(source, image_size, crop=crop, pixels=pixels)
    dataset = tf.data.TFRecordDataset(source.files, tf_compression_type(source.compression))
    if flag(shuffle, "shuffle"):
        # a fresh order every epoch, as any training input needs (without it the training
        # benchmark's baseline read the same order each epoch and lost 6-7 points of validation
        # accuracy to tfopt, which reshuffles)
        dataset = dataset.shuffle(SHUFFLE_BUFFER, reshuffle_each_iteration=True)
    dataset = dataset.map(parse).batch(batch_size)
    return dataset.repeat() if flag(repeat, "repeat") else dataset


def guide_dataset(source, image_size: int, batch_size: int, *,
                  crop: str = "random") -> tf.data.Dataset:
    """The tf.data guide's recipe, repeated: parallel interleave and map, batch, prefetch.

    With ``crop="random"`` (training) the shard order and the records are shuffled too.

    Args:
        source: A tfopt source.
        image_size: Side of the output square, px.
        batch_size: Examples per batch.
        crop: See :func:`example_fn`. Defaults to "random".
    """
    batch_size = whole_number(batch_size, "batch_size", 1)
    training = choice(Crop, crop, "crop") is Crop.RANDOM
    compression = tf_compression_type(source.compression)
    files = tf.data.Dataset.from_tensor_slices(source.files)
    if training:
        files = files.shuffle(len(source.files))
    dataset = files.interleave(lambda path: tf.data.TFRecordDataset(path, compression),
                               num_parallel_calls=tf.data.AUTOTUNE)
    if training:
        dataset = dataset.shuffle(SHUFFLE_BUFFER)
    dataset = dataset.map(example_fn(source, image_size, crop=crop),
                          num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE).repeat()


def keras_folder_dataset(folder, image_size: int, batch_size: int, *, shuffle: bool = True,
                         seed: int = 0) -> tf.data.Dataset:
    """``keras.utils.image_dataset_from_directory`` on a class-per-folder tree, repeated.

    Written the way Keras's image-classification tutorial loads a folder: inferred integer
    labels, every image decoded whole and resized (bilinear, aspect ratio not kept) to
    ``image_size`` in float32 on AUTOTUNE threads, batched, then ``prefetch(AUTOTUNE)``. The
    tutorial also adds ``.cache()``: that replays the same resized images every epoch, which a
    random-crop training pipeline cannot do, so it is left out and the comparison that holds
    is the first epoch. Keras's "Found N files" line is kept off stdout.

    Args:
        folder: The image folder (one sub-folder per class), e.g. the one the shards were
            converted from.
        image_size: Side of the output square, px.
        batch_size: Examples per batch.
        shuffle: Shuffle the files each epoch (training). Defaults to True.
        seed: The shuffle seed. Defaults to 0.

    Raises:
        tfopt.errors.InvalidArgumentError: Not a folder, no images in it, or a bad value.
    """
    import keras

    size = whole_number(image_size, "image_size", 1)
    batch_size = whole_number(batch_size, "batch_size", 1)
    folder = Path(folder)
    if not folder.is_dir():
        raise fail("images", str(folder), "an image folder with one sub-folder per class")
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            dataset = keras.utils.image_dataset_from_directory(
                folder, label_mode="int", image_size=(size, size), batch_size=batch_size,
                shuffle=flag(shuffle, "shuffle"), seed=seed)
    except ValueError as error:  # Keras's words for an empty or unreadable tree
        raise fail("images", str(folder),
                   f"an image folder with one sub-folder per class ({error})") from None
    return dataset.prefetch(tf.data.AUTOTUNE).repeat()


def limit_dataset(source, batch_size: int) -> tf.data.Dataset:
    """Full decodes of in-memory images on all cores: the ceiling of a full-decode pipeline.

    Holds the first 512 encoded images in memory and decodes them again and again, in
    parallel; each element is the decoded image's shape (the pixels are dropped at once).

    Args:
        source: A tfopt source.
        batch_size: Examples per batch.
    """
    batch_size = whole_number(batch_size, "batch_size", 1)
    spec = {source.image_key: tf.io.FixedLenFeature([], tf.string)}
    reader = tf.data.TFRecordDataset(source.files, tf_compression_type(source.compression))
    encoded = [tf.io.parse_single_example(record, spec)[source.image_key]
               for record in reader.take(LIMIT_SAMPLE)]
    images = tf.data.Dataset.from_tensor_slices(tf.stack(encoded)).repeat()
    decoded = images.map(lambda data: tf.shape(tf.io.decode_image(data, channels=3,
                                                                   expand_animations=False)),
                         num_parallel_calls=tf.data.AUTOTUNE)
    return decoded.batch(batch_size).prefetch(tf.data.AUTOTUNE)
