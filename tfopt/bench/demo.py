"""Demo data for the benchmarks: ``tfopt demo-data`` images converted with a 10 % validation
split (:func:`make_demo_shards`, so that ``tfopt bench train`` runs without a dataset of its
own), and the same kind of images written as another tool writes them
(:func:`write_foreign_shards`: Model Garden's keys, no manifest), the held-out data of
``scripts/bench_held_out.py``.

Example:
    >>> shards = make_demo_shards("/tmp/bench")  # /tmp/bench/images, /tmp/bench/shards
    >>> write_foreign_shards("/tmp/bench/images", "/tmp/bench/garden")
"""

from __future__ import annotations

import random
from pathlib import Path

from tfopt._validate import whole_number
from tfopt.errors import InvalidArgumentError, OutputExistsError
from tfopt.records.convert import convert
from tfopt.records.demo_data import make_demo_data

__all__ = ["FOREIGN_KEYS", "make_demo_shards", "write_foreign_shards"]

# Model Garden's image-classification keys (official/vision/dataloaders/tfexample_utils.py)
FOREIGN_KEYS = ("image/encoded", "image/class/label", "image/height", "image/width")


def make_demo_shards(folder, count: int = 600, min_size: int = 160, max_size: int = 240) -> Path:
    """Demo images converted to shards with a 10 % validation split, under ``folder``.

    Args:
        folder: Where ``images/`` and ``shards/`` are written (an empty or new folder).
        count: Images, over 10 classes. Defaults to 600 (a CPU epoch of seconds).
        min_size: Smallest image side, px. Defaults to 160.
        max_size: Largest image side, px. Defaults to 240.

    Returns:
        The shards folder.

    Raises:
        tfopt.errors.InvalidArgumentError: A count or size out of range (checked by
            :func:`tfopt.make_demo_data`).
        tfopt.errors.OutputExistsError: ``folder/images`` holds other files, or ``folder/shards``
            already holds a dataset.
    """
    folder = Path(folder)
    make_demo_data(folder / "images", count=count, min_size=min_size, max_size=max_size)
    convert(folder / "images", folder / "shards", val_fraction=0.1, seed=0)
    return folder / "shards"


def write_foreign_shards(images, dst, *, side: int = 320, shards: int = 8, split: str = "train",
                         seed: int = 0) -> list[Path]:
    """The JPEGs of a class-per-folder tree resized to ``side`` px on their longer side and
    written with ``tf.io.TFRecordWriter`` under Model Garden's keys (:data:`FOREIGN_KEYS`), as
    ``dst/<split>-00000-of-00008``..., in a shuffled order and without a tfopt manifest: data
    tfopt did not write, to benchmark and test what it plans for such shards.

    The folder appears under ``dst`` only once every shard is complete.

    Args:
        images: The image folder (``images/<class>/<name>.jpg``; classes numbered in name order).
        dst: The folder to create.
        side: The longer side of the stored images, px (aspect kept). Defaults to 320.
        shards: Files to spread the records over. Defaults to 8.
        split: The split the file names say. Defaults to "train".
        seed: The record order's seed. Defaults to 0.

    Returns:
        The shard paths, in name order.

    Raises:
        tfopt.errors.InvalidArgumentError: ``images`` holds no JPEG, or a bad value.
        tfopt.errors.OutputExistsError: ``dst`` exists.
    """
    import tensorflow as tf  # the benchmarks' callers have it loaded; imported here for speed

    side = whole_number(side, "side", 8)
    shards = whole_number(shards, "shards", 1)
    images, dst = Path(images), Path(dst)
    if dst.exists():
        raise OutputExistsError(f"{dst}: exists; foreign shards are written to a new folder")
    classes = sorted(path.name for path in images.iterdir() if path.is_dir()) \
        if images.is_dir() else []
    items = [(path, label) for label, name in enumerate(classes)
             for path in sorted((images / name).glob("*.jpg"))]
    if not items:
        raise InvalidArgumentError(f"images={images}: expected a folder of class folders "
                                   "holding .jpg files, found none")
    random.Random(seed).shuffle(items)
    partial = dst.with_name(dst.name + ".partial")
    partial.mkdir(parents=True, exist_ok=True)
    paths = []
    for shard in range(shards):
        path = partial / f"{split}-{shard:05d}-of-{shards:05d}"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for image_path, label in items[shard::shards]:
                writer.write(_foreign_example(tf, image_path, label, side))
        paths.append(dst / path.name)
    partial.rename(dst)
    return paths


def _foreign_example(tf, path: Path, label: int, side: int) -> bytes:
    image = tf.io.decode_jpeg(tf.io.read_file(str(path)), channels=3)
    height, width = int(image.shape[0]), int(image.shape[1])
    scale = side / max(height, width)
    size = (max(1, round(height * scale)), max(1, round(width * scale)))
    image = tf.cast(tf.round(tf.image.resize(image, size)), tf.uint8)

    def feature(value):
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    encoded, label_key, height_key, width_key = FOREIGN_KEYS
    values = {encoded: tf.io.encode_jpeg(image, quality=90).numpy(), label_key: label,
              height_key: size[0], width_key: size[1]}
    return tf.train.Example(features=tf.train.Features(
        feature={key: feature(value) for key, value in values.items()})).SerializeToString()
