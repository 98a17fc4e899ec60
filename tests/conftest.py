"""Shared fixtures: small real datasets written to tmp_path."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import struct
from pathlib import Path

import numpy as np
import pytest

# Tests send Ctrl-C (SIGINT) to real tfopt processes. A test run started in the background of a
# non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and so would every process it
# starts: an ignored signal stays ignored across exec, and Python then installs no
# KeyboardInterrupt handler. A handler here (not SIG_IGN) gives the children the default again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser):
    parser.addoption(
        "--alone", choices=("with", "without", "only"), default="with",
        help="tests marked 'alone' (they assert what measured rates show or catch a real "
             "process at a moment): run them with the rest (default), leave them out, or run "
             "only them. scripts/test.sh runs the rest on every core, then these in one "
             "process, so that no other test shares the CPU with them.")


def pytest_collection_modifyitems(config, items):
    choice = config.getoption("--alone")
    if choice == "with":
        return
    kept, deselected = [], []
    for item in items:
        alone = item.get_closest_marker("alone") is not None
        (kept if alone == (choice == "only") else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def made_once(tmp_path_factory, name: str, make) -> Path:
    """The folder ``make(folder)`` fills, made once in a test run: the pytest processes of
    pytest-xdist share it (the first to ask makes it under a lock, the others wait and read
    it). A module-scoped fixture is made again by every process that runs a test of its
    module, which for a job of real TensorFlow processes is seconds of CPU each time. A
    ``make`` that fails leaves nothing: the next to ask makes it again."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, made = root / f"once-{name}", root / f"once-{name}.made"
    with open(root / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            made.touch()
    return folder


@pytest.fixture(scope="session")
def tf():
    from tfopt._tf import import_tensorflow

    return import_tensorflow()


@pytest.fixture
def float32_policy():
    """Keras's global precision policy at float32 for the test, and back to it after."""
    import keras

    keras.mixed_precision.set_global_policy("float32")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


def encode_jpeg(pixels: np.ndarray, quality: int = 90) -> bytes:
    from tfopt._tf import import_tensorflow

    return import_tensorflow().io.encode_jpeg(pixels, quality=quality).numpy()


def encode_png(pixels: np.ndarray) -> bytes:
    from tfopt._tf import import_tensorflow

    return import_tensorflow().io.encode_png(pixels).numpy()


def encode_bmp(pixels: np.ndarray) -> bytes:
    """A 24-bit bottom-up BMP (TensorFlow decodes BMP but cannot encode it)."""
    height, width, _ = pixels.shape
    row_bytes = (width * 3 + 3) // 4 * 4
    rows = b"".join(
        pixels[y, :, ::-1].tobytes().ljust(row_bytes, b"\0") for y in range(height - 1, -1, -1)
    )
    header = struct.pack("<2sIHHI", b"BM", 54 + len(rows), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    return header + info + rows


# A valid 1x1 GIF89a (TensorFlow cannot encode GIF either).
GIF_1X1 = (b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00"
           b"\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")


def random_pixels(seed: int, height: int = 40, width: int = 56) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def make_image_folder(root: Path, per_class: int = 6, classes=("cat", "dog", "emu")) -> Path:
    """``root/<class>/<i>.jpg`` plus one PNG per class, with distinct content per file."""
    for class_index, name in enumerate(classes):
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(per_class):
            pixels = random_pixels(class_index * 100 + i)
            (folder / f"{i:03d}.jpg").write_bytes(encode_jpeg(pixels))
        (folder / "extra.PNG").write_bytes(encode_png(random_pixels(class_index * 100 + 99)))
    return root


@pytest.fixture
def image_folder(tmp_path) -> Path:
    return make_image_folder(tmp_path / "images")


def small_image_dataset(root: Path, *, images: Path | None = None, per_class: int = 6,
                        out: str = "out", **options) -> Path:
    """A small tfopt dataset: an image folder converted into ``root / out``.

    Args:
        root: The folder to write in (a test's ``tmp_path``).
        images: The image folder to convert. Defaults to a new
            ``make_image_folder(root / "images", per_class)``.
        per_class: JPEGs per class of the new image folder (each class has one PNG more).
        out: The dataset folder's name under ``root``.
        **options: ``convert``'s options; ``workers`` defaults to 1 (tests run on 2 cores).
    """
    import tfopt

    if images is None:
        images = make_image_folder(root / "images", per_class=per_class)
    options.setdefault("workers", 1)
    tfopt.convert(images, root / out, **options)
    return root / out


def make_demo_shards(root: Path, *, count: int, classes: int, min_size: int, max_size: int,
                **options) -> Path:
    """Demo images (``tfopt demo-data``) converted into ``root / "shards"``.

    Args:
        root: The folder to write in.
        count, classes, min_size, max_size: As for ``make_demo_data``.
        **options: ``convert``'s options; ``workers`` defaults to 1 (tests run on 2 cores).
    """
    import tfopt

    tfopt.make_demo_data(root / "images", count=count, classes=classes, min_size=min_size,
                         max_size=max_size, workers=1)
    options.setdefault("workers", 1)
    tfopt.convert(root / "images", root / "shards", **options)
    return root / "shards"


def read_examples(dataset: Path, split: str = "train", compression: str | None = None) -> list:
    """Every record of a split of a tfopt dataset, as ``tf.train.Example``, in shard order."""
    from tfopt._tf import import_tensorflow
    from tfopt.records.manifest import read_manifest

    tf = import_tensorflow()
    manifest = read_manifest(dataset)
    files = [str(dataset / shard.file) for shard in manifest.splits[split].shards]
    reader = tf.data.TFRecordDataset(files, "GZIP" if manifest.compression == "gzip" else "")
    return [tf.train.Example.FromString(raw) for raw in reader.as_numpy_iterator()]


def manifest_specs(dataset: Path) -> dict:
    """The manifest's feature specs of a tfopt dataset, by feature name."""
    from tfopt.records.manifest import read_manifest

    return {spec.name: spec for spec in read_manifest(dataset).features}


def pipeline_columns(dataset: Path, split="train", **kwargs) -> tuple[dict, np.ndarray | None]:
    """Every feature and the label of a split, read through tfopt's own pipeline."""
    import tfopt

    features: dict[str, list] = {}
    labels = []
    for element in tfopt.build_pipeline(dataset, 64, split=split, **kwargs):
        batch, label = element if isinstance(element, tuple) else (element, None)
        for name, value in batch.items():
            features.setdefault(name, []).append(value.numpy())
        if label is not None:
            labels.append(label.numpy())
    joined = {name: np.concatenate(values) for name, values in features.items()}
    return joined, (np.concatenate(labels) if labels else None)


def feature_values(example, name: str) -> list:
    feature = example.features.feature[name]
    return list(getattr(feature, feature.WhichOneof("kind")).value)


def one_error_line(result) -> str:
    """The single ``tfopt: error: ...`` line of a failed run, prefix included: exit code 1 and
    nothing else on stderr (no traceback, no second line). ``result`` is a click ``CliRunner``
    result or a finished ``subprocess`` run."""
    code = result.exit_code if hasattr(result, "exit_code") else result.returncode
    assert code == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfopt: error: "), result.stderr
    return lines[0]


def spawned_children(pid: int) -> list[int]:
    """Worker processes of ``pid`` (multiprocessing's spawn children, not its resource tracker)."""
    children = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if parent == pid and b"spawn_main" in command:
            children.append(int(proc.name))
    return children


def interrupt_convert_after(monkeypatch, shards: int) -> None:
    """Make the next one-process ``convert`` stop like Ctrl-C once ``shards`` shards are done."""
    from tfopt.records.convert import pool

    real = pool.write_shard
    written = []

    def write_then_interrupt(task, folder, **kwargs):
        if len(written) == shards:
            raise KeyboardInterrupt
        written.append(task.file)
        return real(task, folder, **kwargs)

    monkeypatch.setattr(pool, "write_shard", write_then_interrupt)


def folder_of(tmp_path, images: dict, name="images"):
    """Write {relative path: encoded bytes} and return the folder."""
    root = tmp_path / name
    for relative, data in images.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


@pytest.fixture
def indexed_png_dataset(tmp_path):
    """40 PNGs whose constant colour is their index, in 4 classes; converted to 3 shards."""
    import tfopt

    images = {}
    for index in range(40):
        pixels = np.full((40, 52, 3), index * 5, dtype=np.uint8)
        images[f"c{index % 4}/{index:03d}.png"] = encode_png(pixels)
    out = tmp_path / "shards"
    tfopt.convert(folder_of(tmp_path, images), out, workers=1, shards=3)
    return out


def feature_of(tf, value):
    if isinstance(value, list) and value and isinstance(value[0], float):
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))
    if isinstance(value, list):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=value))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def example_of(tf, **features):
    return tf.train.Example(features=tf.train.Features(
        feature={name: feature_of(tf, value) for name, value in features.items()}))


def write_examples(path, rows, tf, compression=""):
    """One TFRecord file of ``tf.train.Example`` records, one per dict of features."""
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type=compression)) as w:
        for row in rows:
            w.write(example_of(tf, **row).SerializeToString())
    return path


# The start of a script run in a fresh process with two logical CPU devices (for
# MirroredStrategy tests): possible only before TensorFlow initialises its devices.
TWO_LOGICAL_CPUS = """
import json
from tfopt._tf import import_tensorflow
tf = import_tensorflow()
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
import numpy as np
"""
