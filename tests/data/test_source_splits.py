"""Which split a pipeline reads (tfopt/data/source.py): "train" for training, "validation" for
evaluation, and never the training split in place of a missing validation split unless asked
(``split="train"``): a dataset converted without ``--val-fraction`` is refused for evaluation,
with what to do, as a ``MissingSplitError`` (a DatasetError) a caller can fall back on."""

from __future__ import annotations

import pytest

import tfopt
from tfopt.data.pipeline import PipelineBuilder
from tfopt.errors import DatasetError, MissingSplitError


@pytest.fixture
def train_only(tmp_path):
    from conftest import small_image_dataset

    return small_image_dataset(tmp_path)  # 21 images, no validation split


def _count(dataset) -> int:
    return sum(int(labels.shape[0]) for _, labels in dataset)


def test_evaluation_without_a_validation_split_is_refused_saying_what_to_do(train_only):
    with pytest.raises(MissingSplitError) as raised:
        tfopt.build_pipeline(train_only, 64, image_size=16)
    error = raised.value
    assert isinstance(error, DatasetError)
    assert (error.split, error.available, error.path) == ("validation", ["train"], str(train_only))
    message = str(error)
    assert "\n" not in message and message.startswith(f"{train_only}: has no 'validation' split")
    assert "split='train'" in message and "--val-fraction" in message
    # the builder too, before anything is read
    with pytest.raises(MissingSplitError):
        PipelineBuilder(train_only, batch_size=8, image_size=16, training=False)


def test_asking_for_the_training_split_evaluates_on_it(train_only):
    builder = PipelineBuilder(train_only, batch_size=8, image_size=16, split="train")
    assert not builder.plan.training and not builder.plan.repeat  # still an evaluation
    assert _count(builder.build()) == 21
    assert _count(tfopt.build_pipeline(train_only, 64, image_size=16, split="train")) == 21


def test_training_reads_the_training_split_without_being_told(train_only):
    builder = PipelineBuilder(train_only, batch_size=8, image_size=16, training=True)
    assert builder.source.num_records == 21


def test_evaluation_reads_the_validation_split_where_there_is_one(tmp_path):
    from conftest import small_image_dataset

    dataset = small_image_dataset(tmp_path, val_fraction=0.3)  # 6 of the 21 records
    assert PipelineBuilder(dataset, batch_size=8, image_size=16).source.num_records == 6
    assert _count(tfopt.build_pipeline(dataset, 64, image_size=16)) == 6
    assert PipelineBuilder(dataset, batch_size=8, image_size=16,
                           training=True).source.num_records == 15


def test_a_split_the_dataset_lacks_is_the_same_error_naming_the_ones_it_has(train_only):
    with pytest.raises(MissingSplitError, match=r"no split 'test'; it has: train") as raised:
        PipelineBuilder(train_only, batch_size=8, image_size=16, split="test")
    assert raised.value.split == "test"


def test_shard_files_have_no_splits_to_refuse(train_only):
    # a glob or a list of files is read whole: there is no manifest split to choose
    builder = PipelineBuilder(str(train_only / "train-*.tfrecord"), batch_size=8, image_size=16)
    assert builder.source.num_records == 21


def test_the_error_survives_the_trip_from_a_worker_process(train_only):
    import pickle

    with pytest.raises(MissingSplitError) as raised:
        PipelineBuilder(train_only, batch_size=8, image_size=16)
    again = pickle.loads(pickle.dumps(raised.value))
    assert type(again) is MissingSplitError and str(again) == str(raised.value)
    assert (again.split, again.available) == ("validation", ["train"])
