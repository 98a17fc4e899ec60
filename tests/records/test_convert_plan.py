"""Shard planning (records/convert/plan.py): stratified validation splits, a seeded shuffle
that mixes classes in every shard, shard counts from shard_size."""

from __future__ import annotations

from conftest import feature_values, read_examples

import tfopt


def test_validation_split_is_stratified_and_disjoint(tmp_path):
    from conftest import make_image_folder

    folder = make_image_folder(tmp_path / "images", per_class=19, classes=("a", "b", "c", "d"))
    out = tmp_path / "out"
    tfopt.convert(folder, out, workers=1, val_fraction=0.25)
    names = {split: [feature_values(e, "image/filename")[0].decode() for e in read_examples(out, split)]
             for split in ("train", "validation")}
    assert not set(names["train"]) & set(names["validation"])
    per_class = {c: sum(n.startswith(c + "/") for n in names["validation"]) for c in "abcd"}
    assert all(4 <= count <= 6 for count in per_class.values()), per_class


def test_shuffle_mixes_classes_in_every_shard_and_follows_the_seed(tmp_path):
    from conftest import make_image_folder

    folder = make_image_folder(tmp_path / "images", per_class=10)
    first = tfopt.convert(folder, tmp_path / "a", workers=1, shards=3, seed=1)
    again = tfopt.convert(folder, tmp_path / "b", workers=1, shards=3, seed=1)
    other = tfopt.convert(folder, tmp_path / "c", workers=1, shards=3, seed=2)
    assert [s.sha256 for s in first.manifest.shards] == [s.sha256 for s in again.manifest.shards]
    assert [s.sha256 for s in first.manifest.shards] != [s.sha256 for s in other.manifest.shards]
    for shard in first.manifest.shards:
        examples = read_examples_of_shard(tmp_path / "a" / shard.file)
        labels = {feature_values(e, "image/class/label")[0] for e in examples}
        assert len(labels) >= 2, f"{shard.file} holds a single class"


def read_examples_of_shard(path):
    from tfopt._tf import import_tensorflow

    tf = import_tensorflow()
    return [tf.train.Example.FromString(r) for r in tf.data.TFRecordDataset(str(path)).as_numpy_iterator()]


def test_gzip_and_shard_size(image_folder, tmp_path):
    out = tmp_path / "out"
    result = tfopt.convert(image_folder, out, workers=1, compression="gzip", shard_size=8000)
    files = [s.file for s in result.manifest.shards]
    assert all(name.endswith(".tfrecord.gz") for name in files)
    assert len(files) > 3  # ~5 KB per image, 8 KB shards
    assert (out / files[0]).read_bytes()[:2] == b"\x1f\x8b"
    assert len(read_examples(out)) == 21
