"""PipelineBuilder's arguments: file caches keyed to what they hold, checked options, an
epoch with no batch refused, and corrupted records counted once per shard."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import tfopt
from tfopt.data.pipeline import PipelineBuilder
from tfopt.errors import InvalidArgumentError


def _labels(dataset) -> list[int]:
    return sorted(int(label) for _, labels in dataset for label in labels.numpy())


def test_a_cache_file_path_shared_by_two_pipelines_never_serves_the_other_ones_data(
        indexed_png_dataset, tmp_path):
    path = tmp_path / "cache" / "c"
    path.parent.mkdir()
    # one path for two image sizes: each gets its own file
    first = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, cache=str(path),
                            split="train")
    assert first.choices.cache_location.startswith(f"{path}-")
    train_labels = _labels(first.build())
    assert len(train_labels) == 40
    smaller = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=16, cache=str(path),
                              split="train")
    assert smaller.choices.cache_location != first.choices.cache_location
    shapes = {tuple(images.shape[1:]) for images, _ in smaller.build()}
    assert shapes == {(16, 16, 3)}  # was a shape error: the 24-px file was read back
    again = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, cache=str(path),
                            split="train")
    assert again.choices.cache_location == first.choices.cache_location  # reused as meant
    # the 16-px files are another set at the same path: named, never deleted
    assert any(note.startswith("1 other cache file set(s) at ") for note in again.choices.notes)
    assert _labels(again.build()) == train_labels
    # a rewritten shard changes the key: stale data is not served
    shard = sorted(indexed_png_dataset.glob("train-*"))[0]
    stat = shard.stat()
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    after = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, cache=str(path),
                            split="train")
    assert after.choices.cache_location != first.choices.cache_location


@pytest.mark.parametrize("cache", ["off", "none", "memory", "OFF", 0, 1, "", 2.5])
def test_cache_words_and_numbers_are_refused_not_taken_for_file_names(
        indexed_png_dataset, cache, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(InvalidArgumentError, match=r"cache=.*expected 'auto', True, False"):
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, cache=cache)
    assert list(work.iterdir()) == []


def test_a_split_smaller_than_one_batch_with_drop_remainder_is_refused(indexed_png_dataset):
    with pytest.raises(InvalidArgumentError,
                       match=r"batch_size=64 with drop_remainder=True: the source has only 40"):
        PipelineBuilder(indexed_png_dataset, batch_size=64, image_size=24, training=True,
                        drop_remainder=True)
    # without drop_remainder one short batch is an epoch
    assert PipelineBuilder(indexed_png_dataset, batch_size=64, image_size=24,
                           split="train").steps_per_epoch == 1


@pytest.mark.parametrize("options, named", [
    ({"batch_size": True}, "batch_size=True"),
    ({"batch_size": 8.0}, "batch_size=8.0"),
    ({"image_size": 24.7}, "image_size=24.7"),
    ({"image_size": (24.9, 30)}, "image_size=24.9"),
    ({"image_size": "24"}, "image_size='24'"),
    ({"training": "yes"}, "training='yes'"),
    ({"ram_budget": -1}, "ram_budget=-1"),
    ({"ram_budget": "2GB"}, "ram_budget='2GB'"),
    ({"shuffle_bytes": "32MB"}, "shuffle_bytes='32MB'"),
    ({"seed": "a"}, "seed='a'"),
    ({"repeat": "no"}, "repeat='no'"),
    ({"shuffle": True}, r"PipelineBuilder: unknown option\(s\) shuffle; expected one of: "),
])
def test_bad_options_are_named(indexed_png_dataset, options, named):
    settings = {"batch_size": 8, "image_size": 24, **options}
    with pytest.raises(InvalidArgumentError, match=named):
        PipelineBuilder(indexed_png_dataset, **settings)


def test_numpy_integers_and_a_positional_batch_size_are_taken(indexed_png_dataset):
    builder = PipelineBuilder(indexed_png_dataset, np.int64(8), image_size=np.int64(24),
                              seed=np.int32(3), split="train")
    assert builder.config.batch_size == 8 and builder.config.image_size == (24, 24)
    assert type(builder.config.batch_size) is int and builder.steps_per_epoch == 5


def test_lost_records_count_once_per_shard_however_many_epochs_read_it(indexed_png_dataset):
    shard = sorted(indexed_png_dataset.glob("train-*"))[1]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x55
    shard.write_bytes(bytes(data))
    builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24,
                              skip_corrupt=True, training=True, seed=1)
    once = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, skip_corrupt=True,
                           split="train")
    read_once = sum(int(images.shape[0]) for images, _ in once.build())
    lost = int(once.corrupt_records)
    assert lost > 0 and read_once + lost == 40
    for _ in builder.build().take(30):  # six passes over the 40 records, with read-ahead
        pass
    assert int(builder.corrupt_records) == lost  # counted 1x per pass (and then some) before


def test_describe_says_what_happens_to_corruption_without_a_manifest(
        indexed_png_dataset, tmp_path):
    # a glob of shards beside their manifest keeps its counts: copy them without it
    bare = tmp_path / "bare"
    shutil.copytree(indexed_png_dataset, bare, ignore=shutil.ignore_patterns("manifest.json"))
    described = PipelineBuilder(str(bare / "train-*"), batch_size=8,
                                image_size=24).choices.describe()
    # the header walk's counts size the epoch, but are not checked as the shards are read
    assert "40 records" in described
    assert ("TensorFlow's DataLossError (no manifest to name the shard; 'tfopt verify' names "
            "it)") in described
    described = PipelineBuilder(indexed_png_dataset, batch_size=8,
                                image_size=24, split="train").choices.describe()
    assert "error naming the shard" in described


def test_numbers_come_out_in_the_dtype_they_went_in(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {"i8": rng.integers(-128, 128, 20).astype(np.int8),
              "u16": rng.integers(0, 65536, (20, 2)).astype(np.uint16),
              "i32": rng.integers(-2**31, 2**31, (20, 3)).astype(np.int32),
              "f16": rng.standard_normal((20, 2)).astype(np.float16),
              "flag": rng.random(20) < 0.5,
              "row": np.arange(20), "label": np.arange(20) % 3}
    np.savez(tmp_path / "data.npz", **arrays)
    tfopt.convert(tmp_path / "data.npz", tmp_path / "out", workers=1)
    features, labels = next(iter(tfopt.build_pipeline(tmp_path / "out", 20, split="train")))
    order = features["row"].numpy()  # convert shuffled the rows
    for name, array in arrays.items():
        if name == "label":
            continue
        assert features[name].dtype.name == array.dtype.name, name  # was int64 / float32
        np.testing.assert_array_equal(features[name].numpy(), array[order])
    np.testing.assert_array_equal(labels.numpy(), arrays["label"][order])


def test_a_manifest_file_as_source_reads_one_split_with_its_counts(image_folder, tmp_path):
    out = tmp_path / "out"
    tfopt.convert(image_folder, out, workers=1, val_fraction=0.25)
    for training in (False, True):
        builder = PipelineBuilder(out / "manifest.json", batch_size=2, image_size=24,
                                  training=training)
        folder = PipelineBuilder(out, batch_size=2, image_size=24, training=training)
        assert builder.source.files == folder.source.files  # not every shard of both splits
        assert builder.steps_per_epoch == folder.steps_per_epoch is not None


def test_the_one_call_form_trains_for_whole_epochs_without_steps_per_epoch(
        indexed_png_dataset):
    import keras

    train = tfopt.build_pipeline(indexed_png_dataset, 8, training=True, image_size=16, seed=0)
    assert int(train.cardinality()) != -1  # not INFINITE: fit ends each epoch by itself
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Rescaling(1 / 255),
                              keras.layers.Flatten(), keras.layers.Dense(4)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(train, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2
    # the builder still repeats for training, with its steps_per_epoch
    # (the plan resolves repeat; the config keeps what was asked: None)
    assert PipelineBuilder(indexed_png_dataset, 8, training=True, image_size=16).plan.repeat
    with pytest.raises(InvalidArgumentError,
                       match=r"build_pipeline: unknown option\(s\) shuffle; expected one of: "):
        tfopt.build_pipeline(indexed_png_dataset, 8, image_size=16, shuffle=True)
