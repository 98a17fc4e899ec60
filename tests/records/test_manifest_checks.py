"""The manifest checked against itself and its shards (records/manifest.py, verify): split and
dataset totals add up, no shard listed twice, counts are ints >= 0, keys name features and class
names fit the labels. Readers refuse such a manifest naming the key and shard; verify lists each
problem and exits 1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import small_image_dataset

import tfopt
from tfopt.errors import DatasetError
from tfopt.records.format.example_pb import example_classes
from tfopt.records.format.framing import read_records
from tfopt.records.manifest import MANIFEST_NAME, load_manifest

TRAIN_0 = "train-00000-of-00003.tfrecord"


@pytest.fixture
def dataset(tmp_path):
    return small_image_dataset(tmp_path, per_class=8, shards=3)  # 27 records, 3 classes


def _edit(dataset, edit) -> dict:
    path = dataset / MANIFEST_NAME
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return data


def _verify_cli(dataset):
    return subprocess.run([sys.executable, "-m", "tfopt", "verify", str(dataset)],
                          capture_output=True, text=True, timeout=120)


def _problems(result) -> list[tuple[str, str]]:
    return [(problem.kind.value, problem.detail) for problem in result.problems]


def test_a_split_total_that_its_shards_do_not_add_up_to_is_named_by_its_key(dataset):
    def edit(data):
        data["splits"]["train"]["num_records"] += 5
        data["totals"]["num_shards"] = 2

    _edit(dataset, edit)
    result = tfopt.verify(dataset)
    assert _problems(result) == [
        ("manifest", "splits.train.num_records: 32, but its 3 shard(s) add up to 27"),
        ("manifest", "totals.num_shards: 2, but the splits' shards add up to 3")]
    assert result.problems[0].file == str(dataset / MANIFEST_NAME)
    with pytest.raises(DatasetError, match=r"inconsistent manifest: splits\.train\."
                       r"num_records: 32, but its 3 shard\(s\) add up to 27; totals\.num_shards"):
        tfopt.read_manifest(dataset)  # as every pipeline reads it
    with pytest.raises(DatasetError, match="inconsistent manifest"):
        tfopt.inspect(dataset)
    checked = _verify_cli(dataset)
    assert checked.returncode == 1 and "FAILED: 2 problem(s)" in checked.stdout


@pytest.mark.parametrize("field, value", [("num_records", -3), ("num_bytes", -1),
                                          ("num_records", True), ("num_bytes", 1.5)])
def test_a_negative_or_non_integer_shard_count_is_refused_naming_the_shard(dataset, field, value):
    _edit(dataset, lambda data: data["splits"]["train"]["shards"][0].update({field: value}))
    message = (rf"unreadable manifest: splits\.train\.shards\[0\]\.{field}={value!r} "
               rf"\(shard {TRAIN_0}\), expected an int >= 0")
    for command in (tfopt.read_manifest, tfopt.verify, tfopt.inspect):
        with pytest.raises(DatasetError, match=message):
            command(dataset)
    checked = _verify_cli(dataset)
    assert checked.returncode == 1 and checked.stdout == ""
    assert checked.stderr.startswith("tfopt: error: ") and "Traceback" not in checked.stderr


def test_a_shard_listed_in_two_splits_is_named_with_both_places(dataset):
    def edit(data):
        shard = data["splits"]["train"]["shards"][0]
        data["splits"]["validation"] = {"num_records": shard["num_records"],
                                        "num_bytes": shard["num_bytes"], "shards": [dict(shard)]}
        data["totals"]["num_records"] += shard["num_records"]
        data["totals"]["num_bytes"] += shard["num_bytes"]
        data["totals"]["num_shards"] += 1

    _edit(dataset, edit)
    result = tfopt.verify(dataset)
    assert [(problem.kind.value, problem.file) for problem in result.problems] == [
        ("duplicate", str(dataset / TRAIN_0))]
    assert ("splits.validation.shards[0]: train-00000-of-00003.tfrecord is listed again (first "
            "at splits.train.shards[0])") in result.problems[0].detail
    assert len(result.checked) == 3  # each file read once
    # a pipeline reading the validation split would read a training shard: refused by name
    with pytest.raises(DatasetError, match=rf"splits\.validation\.shards\[0\]: {TRAIN_0} "
                       "is listed again"):
        tfopt.read_manifest(dataset)


def test_a_shard_with_more_records_than_the_manifest_says_is_named_the_right_way_round(dataset):
    def edit(data):
        for entry in (data["splits"]["train"]["shards"][0], data["splits"]["train"],
                      data["totals"]):
            entry["num_records"] -= 1  # consistent totals: only the shard contradicts them

    data = _edit(dataset, edit)
    said = data["splits"]["train"]["shards"][0]["num_records"]
    result = tfopt.verify(dataset)
    assert _problems(result) == [("count", f"{said + 1} records, the manifest says {said}")]


@pytest.mark.parametrize("edit, key, detail", [
    (lambda data: data.update(class_names=["cat", "dog", "cat"]), "class_names[2]",
     "'cat' names class 0 too"),
    (lambda data: data.update(class_names=[]), "class_names", "[]: expected a name per class"),
    (lambda data: data.update(class_names="cat,dog,emu"), "class_names",
     "expected a JSON array of class names"),
    (lambda data: data.update(label_key=None), "class_names", "3 class names but no label_key"),
    (lambda data: data.update(label_key="image/label"), "label_key",
     "'image/label' is not a feature"),
    (lambda data: data.update(label_key="image/encoded"), "label_key",
     "'image/encoded' is a bytes feature of variable-length; class_names needs one int64"),
    (lambda data: data.update(image_key="pixels"), "image_key", "'pixels' is not a feature"),
])
def test_keys_and_class_names_that_do_not_fit_the_schema_are_named(dataset, edit, key, detail):
    _edit(dataset, edit)
    _, issues = load_manifest(dataset)
    assert [issue.key for issue in issues] == [key]
    assert detail in issues[0].detail
    with pytest.raises(DatasetError, match="inconsistent manifest"):
        tfopt.read_manifest(dataset)
    result = tfopt.verify(dataset)
    assert not result.ok and result.problems[0].kind.value == "manifest"
    assert result.problems[0].detail.startswith(f"{key}: ")


def _labels(shard) -> list[int]:
    example = example_classes().Example
    return [example.FromString(data).features.feature["image/class/label"].int64_list.value[0]
            for data in read_records(shard)]


def test_labels_outside_the_class_names_are_found_in_the_records(dataset):
    # one class name fewer: the records labelled 2 (emu) have no name
    _edit(dataset, lambda data: data.update(class_names=["cat", "dog"]))
    tfopt.read_manifest(dataset)  # consistent in itself: only the records show it
    expected = []
    for shard in sorted(dataset.glob("*.tfrecord")):
        unnamed = [index for index, label in enumerate(_labels(shard)) if label == 2]
        if unnamed:
            more = f"; {len(unnamed) - 1} more record(s) of this shard too" if len(unnamed) > 1 else ""
            expected.append((str(shard), unnamed[0], "label 2: expected one class index 0..1 "
                             f"(class_names has 2){more}"))
    assert expected  # every shard of 27 shuffled records holds some of the 9 emus
    result = tfopt.verify(dataset)
    assert [(p.file, p.record, p.detail) for p in result.problems] == expected
    assert {problem.kind.value for problem in result.problems} == {"label"}
    checked = _verify_cli(dataset)
    file, record, _ = expected[0]
    assert checked.returncode == 1
    assert f"PROBLEM {file} record {record}: label: label 2: expected" in checked.stdout


def test_a_whole_dataset_has_no_issues(dataset):
    manifest, issues = load_manifest(dataset)
    assert issues == [] and manifest.class_names == ["cat", "dog", "emu"]
    assert _verify_cli(dataset).returncode == 0
