"""The baseline pipelines: what each ships (shapes, dtypes, order), from the same shards."""

from __future__ import annotations

import numpy as np
import pytest

import tfopt
from tfopt.bench.baselines import guide_dataset, keras_folder_dataset, limit_dataset, naive_dataset
from tfopt.data.pipeline import PipelineBuilder
from tfopt.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    root = tmp_path_factory.mktemp("baselines")
    tfopt.make_demo_data(root / "images", count=24, classes=3, min_size=40, max_size=56,
                         workers=1)
    tfopt.convert(root / "images", root / "shards", workers=1, shards=2)
    return PipelineBuilder(root / "shards", batch_size=4, image_size=16, split="train").source


def labels_of(dataset):
    return np.concatenate([labels.numpy() for _, labels in dataset])


def test_naive_for_the_pipeline_bench_is_float_and_repeats(source):
    dataset = naive_dataset(source, 16, 4, crop="random", repeat=True)
    images, labels = next(iter(dataset))
    assert images.shape == (4, 16, 16, 3) and images.dtype.name == "float32"
    assert 0.0 <= float(images.numpy().min()) and float(images.numpy().max()) <= 1.0
    assert labels.dtype.name == "int64"
    assert len(list(dataset.take(20))) == 20  # 24 examples are 6 batches: it repeats


def test_naive_for_the_train_bench_is_uint8_one_shuffled_pass(source):
    plain = naive_dataset(source, 16, 4, pixels="uint8")
    shuffled = naive_dataset(source, 16, 4, pixels="uint8", shuffle=True)
    images, _ = next(iter(shuffled))
    assert images.shape == (4, 16, 16, 3) and images.dtype.name == "uint8"
    in_order = labels_of(plain)
    assert len(in_order) == 24  # one pass, then the epoch ends
    orders = [labels_of(shuffled) for _ in range(3)]
    assert all(sorted(order) == sorted(in_order) for order in orders)
    assert any(list(order) != list(in_order) for order in orders)  # reshuffled per epoch


def test_guide_and_limit(source):
    images, labels = next(iter(guide_dataset(source, 16, 4, crop="central")))
    assert images.shape == (4, 16, 16, 3) and images.dtype.name == "float32"
    shapes = next(iter(limit_dataset(source, 4)))
    assert shapes.shape == (4, 3) and all(int(side) == 3 for side in shapes[:, 2])


def test_keras_folder_reads_the_image_folder_resized_whole_in_float(tmp_path, capsys):
    tfopt.make_demo_data(tmp_path / "images", count=12, classes=3, min_size=40, max_size=56,
                         workers=1)
    dataset = keras_folder_dataset(tmp_path / "images", 16, 5, shuffle=False)
    assert capsys.readouterr().out == ""  # Keras's "Found 12 files" stays off stdout (--json)
    batches = list(dataset.take(3))  # 12 images in batches of 5, repeated: 5, 5, 2
    assert [int(images.shape[0]) for images, _ in batches] == [5, 5, 2]
    images, labels = batches[0]
    assert images.shape[1:] == (16, 16, 3) and images.dtype.name == "float32"
    assert float(np.max(images)) > 1.0  # pixels 0-255, as Keras gives them
    assert sorted(np.concatenate([batch[1].numpy() for batch in batches])) == [0] * 4 + [1] * 4 + [2] * 4


def test_keras_folder_refuses_what_is_not_a_class_folder(tmp_path):
    with pytest.raises(InvalidArgumentError, match="images=.*missing.*sub-folder per class"):
        keras_folder_dataset(tmp_path / "missing", 16, 4)
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    with pytest.raises(InvalidArgumentError, match="images=.*empty"):
        keras_folder_dataset(tmp_path / "empty", 16, 4)


def test_bad_values_name_the_argument(source):
    with pytest.raises(InvalidArgumentError, match="crop='middle'"):
        naive_dataset(source, 16, 4, crop="middle")
    with pytest.raises(InvalidArgumentError, match="pixels='float16'"):
        naive_dataset(source, 16, 4, pixels="float16")
    with pytest.raises(InvalidArgumentError, match="shuffle=1"):
        naive_dataset(source, 16, 4, shuffle=1)
