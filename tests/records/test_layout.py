"""Which split a foreign TFRecord file's name or folder says (records/format/layout.py); the
pipeline, inspect and verify agreeing on it is tests/data/test_source_layouts.py."""

from __future__ import annotations

import pytest
from conftest import write_examples

from tfopt.records.format.layout import Layout, resolve_dataset, split_in_name


@pytest.mark.parametrize("name, split", [
    ("train-00000-of-01024", "train"),  # Model Garden, ImageNet
    ("validation-00127-of-00128", "validation"),
    ("mnist-train.tfrecord-00000-of-00001", "train"),  # TFDS
    ("cifar10-test.tfrecord-00003-of-00004", "test"),
    ("train-00000-of-00004.tfrecord", "train"),  # tfopt's own names
    ("validation.tfrecord.gz", "validation"),
    ("eval.tfrecords", "eval"),  # kept as written: not renamed "validation"
    ("cifar10_val.tfrecords", "val"),
    ("Train_3.tfrec", "train"),
    ("data.tfrecord.gz", None),
    ("part-00000-of-00010", None),
    ("trainer.tfrecord", None),  # a word that starts with a split is no split
    ("shards-7.tfrecord", None),
])
def test_the_split_a_file_name_says(name, split):
    assert split_in_name(name) == split


def test_split_subfolders_are_read_only_where_the_folder_holds_no_tfrecord_files(tmp_path, tf):
    rows = [{"x": [1]}] * 2
    for split in ("train", "validation"):
        (tmp_path / split).mkdir()
        write_examples(tmp_path / split / "part-0.tfrecord", rows, tf)
    (tmp_path / "validation" / "deeper").mkdir()  # one level only: not a split's file
    write_examples(tmp_path / "validation" / "deeper" / "x.tfrecord", rows, tf)
    (tmp_path / "empty").mkdir()
    dataset = resolve_dataset(tmp_path)
    assert dataset.layout is Layout.SPLIT_FOLDERS
    assert {name: [f.relative_to(tmp_path).as_posix() for f in files]
            for name, files in dataset.splits.items()} == {
        "train": ["train/part-0.tfrecord"], "validation": ["validation/part-0.tfrecord"]}
    assert any("empty/" in note for note in dataset.notes)
    # TFRecord files of the folder's own: they are the dataset, the subfolders a note
    write_examples(tmp_path / "all.tfrecord", rows, tf)
    dataset = resolve_dataset(tmp_path)
    assert (dataset.layout, [f.name for f in dataset.files]) == (Layout.UNSPLIT, ["all.tfrecord"])
    assert any(note.startswith("not read: 3 subfolder(s)") for note in dataset.notes)
