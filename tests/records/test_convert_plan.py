"""Shard planning (records/convert/plan.py): stratified validation splits, a seeded shuffle
that mixes classes in every shard, shard counts from shard_size, and what the split says when
it cannot reach every class or cannot split at all."""

from __future__ import annotations

import pytest
from conftest import feature_values, read_examples

import tfopt
from tfopt.errors import InvalidArgumentError
from tfopt.records.convert.options import ConvertOptions


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


# -- the split's messages, on hand-made scans (no files) ---------------------------------------


def _scanned(labels, class_names=None):
    from tfopt.records.sources import ScannedSource, SourceKind

    return ScannedSource(kind=SourceKind.IMAGES, path="/photos",
                         items=[(f"{i}.png", label) for i, label in enumerate(labels)],
                         labels=labels, item_bytes=[1000] * len(labels), features=[],
                         class_names=class_names, image_key=None, label_key=None, skipped=[],
                         reader_config={})


def _plan(scanned, **options):
    from tfopt.records.convert.plan import plan_shards

    return plan_shards(scanned, ConvertOptions(**options))


def _split_classes(tasks) -> dict[str, set]:
    return {split: {label for task in tasks if task.split == split for _, label in task.items}
            for split in ("train", "validation")}


def test_classes_too_small_to_split_are_named_in_a_warning(caplog):
    names = [f"c{i}" for i in range(10)]
    tasks = _plan(_scanned(list(range(10)), names), val_fraction=0.5)
    classes = _split_classes(tasks)
    assert len(classes["train"]) == len(classes["validation"]) == 5
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    only_validation = ", ".join(repr(names[i]) for i in sorted(classes["validation"]))
    only_train = ", ".join(repr(names[i]) for i in sorted(classes["train"]))
    assert warning.startswith("val_fraction=0.5 leaves 10 of the 10 classes in one split only: "
                              f"5 only in validation, so never trained on ({only_validation}); "
                              "5 only in training, so validation does not measure them "
                              f"({only_train}). Those classes hold too few records for this "
                              "fraction (the smallest: 1)")


def test_a_split_that_reaches_every_class_warns_nothing(caplog):
    _plan(_scanned([label for label in range(4) for _ in range(10)]), val_fraction=0.2)
    assert [r for r in caplog.records if r.levelname == "WARNING"] == []


def test_many_small_classes_are_counted_past_the_ones_named(caplog):
    # 12 classes without class names (integer labels), a few records each
    _plan(_scanned([label for label in range(12) for _ in range(3)]), val_fraction=0.1)
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "only in training" in warning and "label 0" in warning and " more)" in warning


@pytest.mark.parametrize("fraction", [0.99, 0.5, 0.01])
def test_one_record_cannot_be_split_whatever_the_fraction(fraction):
    with pytest.raises(InvalidArgumentError) as refused:
        _plan(_scanned([0]), val_fraction=fraction)
    assert str(refused.value) == (
        f"val_fraction={fraction}: the source holds 1 record, and a validation split needs at "
        "least 2 (one for training, one for validation); convert without val_fraction")


def test_a_fraction_too_small_for_any_validation_record_says_the_least_that_works():
    with pytest.raises(InvalidArgumentError) as refused:
        _plan(_scanned([0, 1] * 5), val_fraction=0.05)
    assert str(refused.value) == ("val_fraction=0.05 of 10 records leaves no validation "
                                  "records (10 x 0.05 < 1); use at least 0.1")
