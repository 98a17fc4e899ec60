"""inspect on tfopt datasets and on hand-written shards with foreign keys."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import encode_jpeg, encode_png, random_pixels, small_image_dataset
from records_helpers import kill_overwrite_during_swap

import tfopt
from tfopt.errors import DatasetError, InvalidArgumentError, OutputExistsError


def _write(path, examples, tf, compression=""):
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression_type=compression)) as w:
        for example in examples:
            w.write(example.SerializeToString())


def _example(tf, **features):
    def feature(value):
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        if isinstance(value, list) and value and isinstance(value[0], float):
            return tf.train.Feature(float_list=tf.train.FloatList(value=value))
        if isinstance(value, list):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=value))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    return tf.train.Example(features=tf.train.Features(
        feature={name: feature(value) for name, value in features.items()}))


def test_model_garden_layout_is_recognised(tmp_path, tf):
    examples = [
        _example(tf, **{"image/encoded": encode_jpeg(random_pixels(i, 30 + i, 20)),
                        "image/class/label": i % 3, "image/format": b"jpeg"})
        for i in range(10)
    ]
    for shard in range(2):
        _write(tmp_path / f"train-0000{shard}-of-00002", examples[shard * 5 : shard * 5 + 5], tf)
    result = tfopt.inspect(str(tmp_path / "train-*"))
    assert result.image_key == "image/encoded" and result.label_key == "image/class/label"
    assert result.num_records == 10 and len(result.files) == 2
    image = next(f for f in result.features if f.name == "image/encoded")
    assert image.image_format == "jpeg"
    assert image.min_size == (30, 20) and image.max_size == (39, 20)
    assert result.compression is None


def test_foreign_keys_var_length_and_gzip_are_detected(tmp_path, tf):
    examples = [
        _example(tf, img=encode_png(random_pixels(i, 8, 8)), y=i, scores=[0.5] * (i + 1),
                 tokens=list(range(4)))
        for i in range(6)
    ]
    path = tmp_path / "data.tfrecord.gz"
    _write(path, examples, tf, "GZIP")
    result = tfopt.inspect(path)
    assert result.compression == "gzip"
    assert (result.image_key, result.label_key) == ("img", "y")
    by_name = {f.name: f for f in result.features}
    assert by_name["scores"].kind == "float" and not by_name["scores"].fixed_length
    assert (by_name["scores"].min_length, by_name["scores"].max_length) == (1, 6)
    assert by_name["tokens"].fixed_length and by_name["tokens"].max_length == 4
    assert by_name["img"].image_format == "png"
    assert result.num_records == 6
    text = result.describe()
    assert "compression gzip" in text and "1-6 (varies)" in text


def test_tfopt_dataset_fast_count_comes_from_the_manifest(tmp_path):
    out = small_image_dataset(tmp_path, shards=2, val_fraction=0.2)
    exact = tfopt.inspect(out)
    fast = tfopt.inspect(out, fast=True)
    assert exact.num_records == fast.num_records == 21
    assert (exact.counted_from, fast.counted_from) == ("records", "manifest")
    assert fast.manifest.class_names == ["cat", "dog", "emu"]
    assert fast.to_json()["splits"] == {"train": 17, "validation": 4}


def test_records_that_are_not_examples_are_refused(tmp_path, tf):
    path = tmp_path / "junk.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(b"\xff\xff\xff not a protobuf")
    with pytest.raises(DatasetError, match="not a tf.train.Example"):
        tfopt.inspect(path)
    text_file = tmp_path / "notes.txt"
    text_file.write_text("hello, not a TFRecord file at all")
    with pytest.raises(DatasetError, match="not a TFRecord file"):
        tfopt.inspect(text_file)


@pytest.mark.parametrize("arguments, message", [
    ({"sample": 2.5}, r"^sample=2\.5: expected an int >= 1 \(records\)"),
    ({"sample": True}, r"^sample=True: expected an int >= 1"),
    ({"sample": 0}, r"^sample=0: expected an int >= 1"),
    ({"fast": 1}, r"^fast=1: expected True or False"),
])
def test_bad_arguments_are_named_before_anything_is_read(tmp_path, arguments, message):
    with pytest.raises(InvalidArgumentError, match=message):
        tfopt.inspect(tmp_path / "nothing-here", **arguments)


def test_a_dataset_half_swapped_by_a_kill_9_is_refused_until_a_convert_puts_it_back(tmp_path):
    src = tmp_path / "images"
    tfopt.make_demo_data(src, count=30, classes=3, min_size=32, max_size=40, workers=1)
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1, shards=4, seed=1)
    # killed once the old manifest and one old shard have left the folder: 3 shards are left
    kill_overwrite_during_swap(src, out, "old-out", 2, "--shards", "2", "--seed", "2")
    assert sorted(path.name for path in out.iterdir()) == [
        f"train-0000{index}-of-00004.tfrecord" for index in (1, 2, 3)]

    def inspect_cli():
        return subprocess.run([sys.executable, "-m", "tfopt", "inspect", str(out)],
                              capture_output=True, text=True, timeout=120)

    refused = inspect_cli()
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith(
        f"tfopt: error: {out}: incomplete dataset: a 'tfopt convert --overwrite' was killed "
        "while it replaced the dataset here: 2 of the old dataset's files")
    assert "3 still here" in refused.stderr and "--resume" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    # any convert into the folder, one refused for its options included, puts the old one back
    with pytest.raises(OutputExistsError, match="interrupted --overwrite"):
        tfopt.convert(src, out, workers=1, shards=2, seed=2)
    shown = inspect_cli()
    assert shown.returncode == 0, shown.stderr
    assert "records: 30" in shown.stdout and "train 30 in 4 shards" in shown.stdout
