"""One source resolution (tfopt/records/format/layout.py) for the pipeline, ``tfopt inspect`` and
``tfopt verify``: foreign TFRecord layouts written at test time by ``tf.io.TFRecordWriter`` (as
Model Garden, TFDS, a single GZIP file and split subfolders lay them out) are read as the same
files, the same splits and the same compression by the three, and a layout none can read is
the same one-line error from each. inspect and verify run as real ``tfopt`` processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import write_examples

from tfopt.data.pipeline import PipelineBuilder
from tfopt.errors import DatasetError, MissingSplitError

# split -> the first label of its records: the labels read back say which files were read
FIRST_LABEL = {"train": 0, "validation": 1000, "test": 2000, None: 0}


def _write(path, split, start, count, tf, compression=""):
    rows = [{"label": [FIRST_LABEL[split] + start + i], "x": [float(i)]} for i in range(count)]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_examples(path, rows, tf, compression)


def model_garden(folder, tf):
    """Model Garden's and ImageNet's names: train-00000-of-00002, no extension, no manifest."""
    _write(folder / "train-00000-of-00002", "train", 0, 6, tf)
    _write(folder / "train-00001-of-00002", "train", 6, 5, tf)
    _write(folder / "validation-00000-of-00001", "validation", 0, 4, tf)
    (folder / "README.md").write_text("ImageNet-style shards\n")
    return {"train": 11, "validation": 4}, None


def tfds(folder, tf):
    """TFDS's names (name-split.tfrecord-00000-of-00002) beside its JSON metadata; GZIP."""
    _write(folder / "mnist-train.tfrecord-00000-of-00002", "train", 0, 3, tf, "GZIP")
    _write(folder / "mnist-train.tfrecord-00001-of-00002", "train", 3, 3, tf, "GZIP")
    _write(folder / "mnist-test.tfrecord-00000-of-00001", "test", 0, 2, tf, "GZIP")
    (folder / "dataset_info.json").write_text('{"name": "mnist"}')
    (folder / "features.json").write_text("{}")
    return {"train": 6, "test": 2}, "gzip"


def one_gzip_file(folder, tf):
    """One ``data.tfrecord.gz``: no split in its name, read whole."""
    _write(folder / "data.tfrecord.gz", None, 0, 7, tf, "GZIP")
    return {None: 7}, "gzip"


def split_folders(folder, tf):
    """One subfolder per split (train/, validation/), files named without a split."""
    _write(folder / "train" / "part-0.tfrecord", "train", 0, 5, tf)
    _write(folder / "train" / "part-1.tfrecord", "train", 5, 5, tf)
    _write(folder / "validation" / "part-0.tfrecord", "validation", 0, 3, tf)
    (folder / "labels.txt").write_text("0\n1\n")
    return {"train": 10, "validation": 3}, None


def tfopt_names_without_manifest(folder, tf):
    """tfopt's own names with the manifest gone: the names still tell the splits."""
    _write(folder / "train-00000-of-00001.tfrecord", "train", 0, 4, tf)
    _write(folder / "validation-00000-of-00001.tfrecord", "validation", 0, 2, tf)
    return {"train": 4, "validation": 2}, None


LAYOUTS = [model_garden, tfds, one_gzip_file, split_folders, tfopt_names_without_manifest]


def tfopt_json(*args):
    """A real ``tfopt`` process's --json output (exit code 1 for a failed verify or an error)."""
    done = subprocess.run([sys.executable, "-m", "tfopt", *map(str, args), "--json", "-q"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout), done


def read(folder, split, training):
    """The pipeline's source and every label one pass reads."""
    builder = PipelineBuilder(str(folder), batch_size=4, split=split, training=training,
                              repeat=False, drop_remainder=False)
    labels = [int(label) for _, batch in builder.build() for label in batch.numpy()]
    return builder.source, labels


@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.__name__ for layout in LAYOUTS])
def test_the_pipeline_inspect_and_verify_read_a_foreign_layout_alike(layout, tmp_path, tf):
    folder = tmp_path / layout.__name__
    folder.mkdir()
    records, compression = layout(folder, tf)
    inspected, _ = tfopt_json("inspect", folder)
    verified, done = tfopt_json("verify", folder)
    assert verified["ok"] and done.returncode == 0, verified["problems"]
    assert inspected["compression"] == verified["compression"] == compression
    assert inspected["layout"] == verified["layout"]
    assert inspected["split_files"] == verified["split_files"]
    splits = inspected["split_files"]
    assert set(splits) == (set() if None in records else set(records))
    assert inspected["splits"] == (None if None in records else records)
    assert inspected["num_records"] == verified["records_checked"] == sum(records.values())
    for split, count in records.items():
        source, labels = read(folder, split, training=split == "train")
        files = splits[split] if split else [info["path"] for info in inspected["files"]]
        assert source.files == files and source.split == split
        assert source.compression == compression
        first = FIRST_LABEL[split]
        assert sorted(labels) == list(range(first, first + count))  # its records, each once


def test_the_default_split_is_read_from_names_as_from_a_manifest(tmp_path, tf):
    model_garden(tmp_path / "garden", tf)
    assert read(tmp_path / "garden", None, training=True)[0].split == "train"
    assert read(tmp_path / "garden", None, training=False)[0].split == "validation"
    # TFDS's mnist has train and test: evaluation is never handed the training split unasked
    tfds(tmp_path / "mnist", tf)
    with pytest.raises(MissingSplitError) as raised:
        read(tmp_path / "mnist", None, training=False)
    assert raised.value.available == ["train", "test"]
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'mnist'}: has no 'validation' split (it has: "
                              "train, test) (no manifest.json: splits told from the file names)")
    assert "split='train'" in message and "'test'" in message
    assert sorted(read(tmp_path / "mnist", "test", training=False)[1]) == [2000, 2001]


def mixed_names(folder, tf):
    _write(folder / "train-00000-of-00001", "train", 0, 3, tf)
    _write(folder / "extra.tfrecord", None, 0, 2, tf)
    return "no manifest.json, and 1 TFRecord file(s) name a split (train) while 1 name none " \
           "(extra.tfrecord): expected every file's name to start with its split"


def mixed_compression(folder, tf):
    _write(folder / "a.tfrecord", None, 0, 2, tf)
    _write(folder / "b.tfrecord.gz", None, 0, 2, tf, "GZIP")
    return "mixed compression: some files are GZIP"


def no_tfrecords(folder, tf):
    (folder / "README.txt").write_text("where the data would be\n")
    (folder / "train").mkdir()
    return "no TFRecord files in this folder (1 other file(s): README.txt; nor in its " \
           "subfolders train/): expected a tfopt dataset (manifest.json), TFRecord files, or " \
           "one subfolder of TFRecord files per split"


UNREADABLE = [mixed_names, mixed_compression, no_tfrecords]


@pytest.mark.parametrize("layout", UNREADABLE, ids=[layout.__name__ for layout in UNREADABLE])
def test_a_layout_none_can_read_is_the_same_error_from_all_three(layout, tmp_path, tf):
    folder = tmp_path / layout.__name__
    folder.mkdir()
    expected = layout(folder, tf)
    with pytest.raises(DatasetError) as raised:
        PipelineBuilder(str(folder), batch_size=4, training=True)
    message = str(raised.value)
    assert message.startswith(f"{folder}: ") and expected in message and "\n" not in message
    for command in ("inspect", "verify"):
        data, done = tfopt_json(command, folder)
        assert (data, done.returncode) == ({"error": message, "exit_code": 1}, 1)
        assert done.stderr.strip().splitlines()[-1] == f"tfopt: error: {message}"


def test_no_manifest_is_an_error_type_that_says_whether_a_conversion_was_interrupted(
        tmp_path, tf):
    import pickle

    from tfopt.errors import NoManifestError
    from tfopt.records.manifest import JOURNAL_NAME, read_manifest

    folder = tmp_path / "garden"
    model_garden(folder, tf)
    with pytest.raises(NoManifestError) as raised:
        read_manifest(folder)
    assert isinstance(raised.value, DatasetError) and not raised.value.interrupted
    again = pickle.loads(pickle.dumps(raised.value))  # as from a worker process
    assert (type(again), again.folder, str(again)) == (NoManifestError, str(folder),
                                                       str(raised.value))
    # a convert journal: an interrupted conversion, not a foreign dataset
    (folder / JOURNAL_NAME).write_text("{}\n")
    with pytest.raises(NoManifestError) as raised:
        read_manifest(folder)
    assert raised.value.interrupted
    with pytest.raises(DatasetError, match="incomplete dataset: a conversion was interrupted"):
        PipelineBuilder(str(folder), batch_size=4, training=True)
    inspected, _ = tfopt_json("inspect", folder)
    assert inspected["layout"] == "incomplete" and inspected["num_records"] == 15
    assert any(note.startswith("incomplete dataset") for note in inspected["notes"])
    verified, done = tfopt_json("verify", folder)
    assert done.returncode == 1 and [p["kind"] for p in verified["problems"]] == ["incomplete"]
