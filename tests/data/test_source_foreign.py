"""Pipeline sources from TFRecord files not written by tfopt, and from tfopt's own shards by glob."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
from conftest import feature_of, write_examples

import tfopt
from tfopt.data.pipeline import PipelineBuilder
from tfopt.data.plan import CacheMode
from tfopt.data.source import resolve_source
from tfopt.errors import DatasetError, InvalidArgumentError, MissingSplitError


def read_all(source, **options):
    """Every batch of one pass, as (features, labels) lists; fails as iteration fails."""
    builder = PipelineBuilder(source, batch_size=16, **options)
    return builder, list(builder.build())


def test_a_feature_only_in_the_second_file_is_read(tmp_path, tf):
    first = write_examples(tmp_path / "part-0.tfrecord",
                  [{"label": [i % 2], "x": [float(i)]} for i in range(100)], tf)
    second = write_examples(tmp_path / "part-1.tfrecord",
                   [{"label": [i % 2], "x": [1.0], "extra": [2.0]} for i in range(100)], tf)
    builder, batches = read_all([str(first), str(second)])
    assert "extra" in {f.name for f in builder.source.features}  # was dropped: first file only
    extras = [value for features, _ in batches for value in features["extra"].to_list()]
    assert extras.count([2.0]) == 100 and extras.count([]) == 100


def test_a_feature_that_goes_missing_past_record_64_is_ragged_not_an_error(tmp_path, tf):
    rows = [{"label": [i % 2], "w": [float(i)] * (1 if i < 90 else 2),
             **({"v": [float(i)]} if i < 80 else {})} for i in range(100)]
    path = write_examples(tmp_path / "late.tfrecord", rows, tf)
    _, batches = read_all(str(path))  # was InvalidArgumentError mid-epoch
    assert sum(len(labels) for _, labels in batches) == 100
    v = [value for features, _ in batches for value in features["v"].to_list()]
    w = [value for features, _ in batches for value in features["w"].to_list()]
    assert v.count([]) == 20 and sum(len(values) == 2 for values in w) == 10


def test_the_sample_is_the_first_records_of_every_file_within_a_budget(tmp_path, tf):
    files = [write_examples(tmp_path / f"p-{k:02d}.tfrecord",
                   [{"label": [1], "x": [1.0]}] * 50, tf) for k in range(12)]
    from tfopt.data import source as source_module

    sample = source_module.sample_schema(files, None, records=source_module.SAMPLE_RECORDS,
                                         max_bytes=source_module.SAMPLE_BYTES,
                                         max_files=source_module.SAMPLE_FILES)
    assert (sample.files, sample.per_file, sample.records) == (12, 1024 // 12, 600)  # all 50 each
    resolved = resolve_source([str(f) for f in files])
    framing = 16  # length, its CRC and the data's CRC around each record
    assert resolved.sampled_record_bytes == files[0].stat().st_size / 50 - framing


def test_a_feature_with_two_types_is_left_out_with_a_warning(tmp_path, tf, caplog):
    path = write_examples(tmp_path / "conflict.tfrecord",
                 [{"label": [i % 2], "x": [1.0], "v": [1.0] if i < 10 else [1]}
                  for i in range(20)], tf)
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        builder, batches = read_all(str(path))
    warning = next(r.getMessage() for r in caplog.records if "'v'" in r.getMessage())
    assert "left out" in warning and "float" in warning and "int64" in warning
    assert "\n" not in warning
    assert set(batches[0][0]) == {"x"} and sum(len(y) for _, y in batches) == 20
    with pytest.raises(InvalidArgumentError, match="feature 'v' cannot be the .* key"):
        PipelineBuilder(str(path), batch_size=4, label_key="v")


def test_a_sequence_example_file_is_refused_naming_it(tmp_path, tf):
    path = tmp_path / "seq.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(3):
            writer.write(tf.train.SequenceExample(
                context=tf.train.Features(feature={"label": feature_of(tf, [i])}),
                feature_lists=tf.train.FeatureLists(feature_list={"frames": tf.train.FeatureList(
                    feature=[feature_of(tf, [1.0])] * (i + 1))}),
            ).SerializeToString())
    with pytest.raises(DatasetError, match=r"seq.tfrecord: record 0 is not a "
                                                  r"tf.train.Example.*SequenceExample"):
        PipelineBuilder(str(path), batch_size=4)


@pytest.fixture()
def array_dataset(tmp_path):
    rng = np.random.default_rng(0)
    src = tmp_path / "arrays.npz"
    np.savez(src, x=rng.normal(size=(30, 2, 3)).astype(np.float32),
             mask=rng.integers(0, 2, (30, 4)).astype(bool), y=np.arange(30) % 3)
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1, shards=3)
    return out


def test_a_glob_of_tfopt_shards_keeps_the_manifest_schema(array_dataset):
    glob = str(array_dataset / "train-*")
    source = resolve_source(glob)
    assert source.expected_counts is not None and source.num_records == 30
    features, labels = next(iter(PipelineBuilder(glob, batch_size=8).build()))
    # as from the folder: raw arrays decoded to their dtype and shape (were tf.string, flat)
    assert features["x"].dtype.name == "float32" and features["x"].shape[1:] == (2, 3)
    assert features["mask"].dtype.name == "bool" and features["mask"].shape[1:] == (4,)
    # a subset, in another spelling: only those shards, counted against the manifest
    one = sorted(array_dataset.glob("train-*"))[1]
    subset = resolve_source([f"{array_dataset}/./{one.name}"])
    assert subset.files == [f"{array_dataset}/./{one.name}"]
    assert subset.num_records == tfopt.read_manifest(array_dataset).shards[1].num_records


def test_shards_not_all_listed_in_the_manifest_are_inferred(array_dataset, tmp_path):
    stray = array_dataset / "more-0.tfrecord"
    shutil.copy(sorted(array_dataset.glob("train-*"))[0], stray)
    source = resolve_source(str(array_dataset / "*.tfrecord"))
    assert source.expected_counts is None  # the schema is inferred: bytes, not decoded
    assert {f.name: f.raw_dtype for f in source.features}["x"] is None


def test_a_folder_without_manifest_is_read_as_inspect_reads_it(tmp_path, tf):
    folder = tmp_path / "fdir"
    folder.mkdir()
    for k in range(2):
        write_examples(folder / f"plain-{k}.tfrecord", [{"label": [i % 2]} for i in range(5)], tf)
    (folder / "README.txt").write_text("hello\n")
    # no split in the names: one unsplit dataset, for training and evaluation alike
    builder, batches = read_all(str(folder))
    inspected = tfopt.inspect(folder)
    assert builder.source.files == [info.path for info in inspected.files]
    assert builder.source.split is None and inspected.split_files == {}
    assert sum(len(y) for _, y in batches) == inspected.num_records == 10
    with pytest.raises(MissingSplitError, match="no file name says a split"):
        PipelineBuilder(str(folder), batch_size=4, split="validation")


def model_garden_shards(folder, tf, files=4, per_file=25, side=64, compression=""):
    """TFRecords as Model Garden writes them: image/encoded, image/class/label, height, width;
    no manifest."""
    from conftest import encode_jpeg, random_pixels

    folder.mkdir()
    for index in range(files):
        rows = [{"image/encoded": encode_jpeg(random_pixels(index * per_file + row, side, side)),
                 "image/class/label": [(index * per_file + row) % 5], "image/height": [side],
                 "image/width": [side]} for row in range(per_file)]
        write_examples(folder / f"train-{index:05d}-of-{files:05d}", rows, tf, compression)
    return str(folder / "train-*")


def test_foreign_shards_are_counted_by_the_header_walk_and_get_the_decoded_cache(tmp_path, tf):
    # no manifest, plain shards: the walk that checks every header before TensorFlow reads a
    # shard counts the records too, so the epoch's length is exact, not estimated
    pattern = model_garden_shards(tmp_path / "garden", tf)
    builder = PipelineBuilder(pattern, batch_size=10, image_size=32, training=True)
    assert builder.facts.records == 100 and builder.facts.estimated_records is None
    assert builder.source.counts_walked and sum(builder.source.expected_counts.values()) == 100
    assert builder.plan.cache is CacheMode.DECODED  # the plan tfopt's own shards get
    assert not any("estimated" in note for note in builder.choices.notes)
    assert builder.steps_per_epoch == 10
    assert (builder.plan.files, builder.plan.records) == (4, 100)
    labels = [int(label) for _, batch in builder.build().take(20) for label in batch.numpy()]
    assert sorted(labels[:100]) == sorted(row % 5 for row in range(100))  # one epoch, cached
    evaluation = PipelineBuilder(pattern, batch_size=30, image_size=32)
    assert evaluation.plan.known_length  # Keras is told the pass's 4 steps
    assert int(evaluation.build().cardinality()) == 4


def test_a_foreign_shard_damaged_inside_a_record_stops_the_read(tmp_path, tf):
    # the header walk reads no data: a record whose data fails its CRC is TensorFlow's
    # reader's to find (its DataLossError); the walk's count does not hide it
    pattern = model_garden_shards(tmp_path / "garden", tf)
    shard = sorted((tmp_path / "garden").iterdir())[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    builder = PipelineBuilder(pattern, batch_size=10, image_size=32)
    assert builder.steps_per_epoch == 10
    with pytest.raises(tf.errors.DataLossError, match="corrupted record"):
        for _ in builder.build():
            pass


def test_gzip_foreign_shards_are_estimated_from_their_measured_expansion(tmp_path, tf):
    # TFX writes GZIP TFRecords: their file sizes alone say nothing of the record count, so
    # the decoded cache was refused; the expansion of the first file's start tells it
    pattern = model_garden_shards(tmp_path / "garden", tf, files=4, per_file=25,
                                  compression="GZIP")
    builder = PipelineBuilder(pattern, batch_size=10, image_size=32, training=True)
    assert builder.facts.gzip_expansion > 1.0  # the framing and the small features compress
    assert abs(builder.facts.estimated_records - 100) <= 10
    assert builder.plan.cache is CacheMode.DECODED
    (note,) = [n for n in builder.choices.notes if "estimated from the file sizes" in n]
    assert "GZIP expanding them" in note
    labels = [int(label) for _, batch in builder.build().take(20) for label in batch.numpy()]
    assert sorted(labels[:100]) == sorted(row % 5 for row in range(100))  # one epoch, cached


def test_one_damaged_image_among_the_sampled_keeps_the_image_feature_and_is_named(
        tmp_path, tf, caplog):
    # one value of image/encoded that is not an image used to turn the dataset into one of
    # raw bytes: the pipeline yielded dicts of strings and ignored image_size without a word
    from conftest import encode_jpeg, random_pixels

    folder = tmp_path / "damaged"
    folder.mkdir()
    for index in range(2):
        rows = [{"image/encoded": (b"not an image" if (index, row) == (0, 5)
                                   else encode_jpeg(random_pixels(index * 20 + row, 48, 48))),
                 "image/class/label": [row % 3]} for row in range(20)]
        write_examples(folder / f"train-{index:05d}-of-00002", rows, tf)
    pattern = str(folder / "train-*")
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        builder = PipelineBuilder(pattern, batch_size=8, image_size=32)
    assert builder.source.image_key == "image/encoded"
    where = f"{folder / 'train-00000-of-00002'}, record 5"
    (note,) = [n for n in builder.choices.notes if "not an image" in n]
    assert note.startswith(f"image/encoded: 1 of 40 sampled values is not an image (first: {where})")
    assert "skip_corrupt=True" in note and "tfopt verify" in note
    assert any(note in record.getMessage() for record in caplog.records)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        list(builder.build())
    # tfopt's check before the decode, where TensorFlow said only "Invalid JPEG data"
    message = caught.value.message
    # (TensorFlow's assertion message escapes the quotes)
    assert "encoded image is not a JPEG image; its first bytes:] [not an image" in message
    assert f"tfopt verify {pattern}" in message and "skip_corrupt=True" in message
    skipping = PipelineBuilder(pattern, batch_size=8, image_size=32, skip_corrupt=True)
    images = [image for batch, _ in skipping.build() for image in batch.numpy()]
    assert len(images) == 39 and images[0].shape == (32, 32, 3)
    assert "image does not decode is skipped" in skipping.choices.describe()
    assert f"1 not an image (first: {where})" in tfopt.inspect(pattern).describe()


def test_a_bytes_feature_of_mostly_other_values_is_not_taken_for_images(tmp_path, tf):
    from conftest import encode_jpeg, random_pixels

    rows = [{"blob": encode_jpeg(random_pixels(row, 16, 16)) if row < 3 else b"text",
             "label": [row % 2]} for row in range(10)]
    path = write_examples(tmp_path / "blobs.tfrecord", rows, tf)
    builder, batches = read_all(str(path))
    assert builder.source.image_key is None  # 7 of 10 are not images: raw bytes, as before
    assert sum(len(labels) for _, labels in batches) == 10
    with pytest.raises(InvalidArgumentError, match="image_key='blob': its values are not"):
        PipelineBuilder(str(path), batch_size=4, image_key="blob", image_size=16)
    # image_size for data without images was ignored without a word
    with pytest.raises(InvalidArgumentError) as caught:
        PipelineBuilder(str(path), batch_size=4, image_size=16)
    assert str(caught.value).startswith(
        f"image_size=16x16: {path} holds no image feature (its bytes features (blob) hold no "
        "JPEG, PNG, GIF or BMP images in the sampled records); leave image_size out")
    numbers = write_examples(tmp_path / "numbers.tfrecord", [{"x": [1.0], "label": [1]}], tf)
    with pytest.raises(InvalidArgumentError, match=r"no image feature \(it has no bytes"):
        PipelineBuilder(str(numbers), batch_size=4, image_size=16)
