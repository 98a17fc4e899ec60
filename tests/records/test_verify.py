"""verify: every kind of damage is found and named with its shard and record index."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
from conftest import small_image_dataset
from records_helpers import kill_overwrite_during_swap

import tfopt
from tfopt.errors import DatasetError, InvalidArgumentError
from tfopt.records.format.example_pb import example_classes
from tfopt.records.format.framing import frame, masked_crc32c, read_records
from tfopt.records.manifest import MANIFEST_NAME


@pytest.fixture
def dataset(tmp_path):
    return small_image_dataset(tmp_path, per_class=8, shards=3)


def _kinds(result):
    return sorted((p.kind.value, p.file.rsplit("/", 1)[-1], p.record) for p in result.problems)


def test_a_whole_dataset_passes(dataset):
    result = tfopt.verify(dataset)
    assert result.ok and result.has_manifest
    assert result.num_records == 27
    assert len(result.checked) == 3


def test_flipped_byte_is_a_checksum_mismatch_and_a_corrupt_record_with_its_index(dataset):
    shard = dataset / "train-00001-of-00003.tfrecord"
    records = _record_offsets(shard)
    data = bytearray(shard.read_bytes())
    data[records[4] + 100] ^= 0x01  # inside record 4's payload
    shard.write_bytes(bytes(data))
    result = tfopt.verify(dataset)
    assert not result.ok
    assert _kinds(result) == [("checksum", shard.name, None), ("corrupt", shard.name, 4)]
    assert "corrupted record" in next(p.detail for p in result.problems if p.record == 4)


def test_truncated_shard_reports_size_and_the_cut_record(dataset):
    shard = dataset / "train-00002-of-00003.tfrecord"
    records = _record_offsets(shard)
    shard.write_bytes(shard.read_bytes()[: records[-1] + 50])  # cut inside the last record
    result = tfopt.verify(dataset)
    assert _kinds(result) == [("checksum", shard.name, None), ("corrupt", shard.name, len(records) - 1),
                              ("size", shard.name, None)]
    assert "truncated" in next(p.detail for p in result.problems if p.kind.value == "corrupt")


def test_missing_shard_and_unknown_files(dataset):
    (dataset / "train-00000-of-00003.tfrecord").unlink()
    (dataset / "notes.txt").write_text("hello")
    (dataset / ".train-00001-of-00003.tfrecord.tmp-123").write_bytes(b"partial")
    result = tfopt.verify(dataset)
    assert _kinds(result) == [
        ("extra", ".train-00001-of-00003.tfrecord.tmp-123", None),
        ("extra", "notes.txt", None),
        ("missing", "train-00000-of-00003.tfrecord", None),
    ]


def test_wrong_count_in_manifest_is_reported(dataset):
    path = dataset / MANIFEST_NAME
    data = json.loads(path.read_text())
    # one more record than the shard holds, the totals edited to match: only the shard shows it
    data["splits"]["train"]["shards"][0]["num_records"] += 1
    data["splits"]["train"]["num_records"] += 1
    data["totals"]["num_records"] += 1
    path.write_text(json.dumps(data))
    result = tfopt.verify(dataset)
    assert [p.kind.value for p in result.problems] == ["count"]
    assert result.problems[0].detail.endswith(
        f"records, the manifest says {data['splits']['train']['shards'][0]['num_records']}")


def test_bare_shards_without_manifest_get_crc_and_count_checks_and_say_so(dataset):
    (dataset / MANIFEST_NAME).unlink()
    result = tfopt.verify(dataset)
    assert result.ok and not result.has_manifest
    assert result.num_records == 27
    assert "no manifest" in result.notes[0]
    shard = dataset / "train-00000-of-00003.tfrecord"
    shard.write_bytes(shard.read_bytes()[:-10])
    glob_result = tfopt.verify(str(dataset / "train-*.tfrecord"))
    assert [p.kind.value for p in glob_result.problems] == ["corrupt"]


def test_bare_shards_have_the_image_of_each_record_judged_by_its_header(dataset):
    # a record with an intact CRC whose image is not one passed a verify without a manifest,
    # then stopped a pipeline's epoch with TensorFlow's decode error
    (dataset / MANIFEST_NAME).unlink()
    clean = tfopt.verify(dataset)
    assert clean.ok and any("and each record's 'image/encoded' by its image header" in note
                            for note in clean.notes)
    shard = dataset / "train-00001-of-00003.tfrecord"
    example_type = example_classes().Example
    records = []
    for index, raw in enumerate(read_records(shard)):
        if index == 2:
            example = example_type.FromString(raw)
            example.features.feature["image/encoded"].bytes_list.value[0] = b"no image in here"
            raw = example.SerializeToString()
        records.append(frame(raw))
    shard.write_bytes(b"".join(records))
    result = tfopt.verify(dataset)
    assert _kinds(result) == [("image", shard.name, 2)]
    assert "not a JPEG, PNG, GIF or BMP image" in result.problems[0].detail


def test_nothing_to_verify_is_an_error(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        tfopt.verify(tmp_path / "nope")
    with pytest.raises(DatasetError, match="no files match"):
        tfopt.verify(str(tmp_path / "*.tfrecord"))


def _record_offsets(path):
    """Byte offset of each record in an uncompressed TFRecord file (length-prefixed frames)."""
    import struct

    data = path.read_bytes()
    offsets, position = [], 0
    while position < len(data):
        offsets.append(position)
        (length,) = struct.unpack("<Q", data[position : position + 8])
        position += 8 + 4 + length + 4
    return offsets


@pytest.mark.parametrize("workers", [0, 1.5, True, "2"])
def test_bad_workers_are_named_before_anything_is_read(tmp_path, workers):
    with pytest.raises(InvalidArgumentError,
                       match=r"^workers=.*: expected an int >= 1, or None for all usable cores"):
        tfopt.verify(tmp_path / "nothing-here", workers=workers)


def _tfopt(*arguments):
    return subprocess.run([sys.executable, "-m", "tfopt", *map(str, arguments)],
                          capture_output=True, text=True, timeout=120)


def test_a_dataset_half_swapped_by_a_kill_9_fails_verify_until_a_convert_finishes_it(tmp_path):
    src = tmp_path / "images"
    tfopt.make_demo_data(src, count=40, classes=4, min_size=32, max_size=40, workers=1)
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1, shards=3, seed=1)
    # the new dataset: 6 shards, killed once 4 of them are in the dataset folder
    kill_overwrite_during_swap(src, out, "new-in", 4, "--shards", "6", "--seed", "2")
    assert not (out / MANIFEST_NAME).exists() and len(list(out.glob("*.tfrecord"))) == 4
    checked = _tfopt("verify", out)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    problem = next(line for line in checked.stdout.splitlines() if line.startswith("PROBLEM"))
    assert problem.startswith(f"PROBLEM {out}: incomplete: a 'tfopt convert --overwrite' was "
                              "killed while it replaced the dataset here")
    assert "4 of the new dataset's shard(s) are here and 2 still in" in problem
    assert f"'tfopt convert SOURCE {out} --resume'" in problem
    assert "OK" not in checked.stdout and "Traceback" not in checked.stderr
    as_json = json.loads(_tfopt("verify", out, "--json").stdout)
    assert not as_json["ok"] and as_json["problems"][0]["kind"] == "incomplete"
    finished = _tfopt("convert", src, out, "--resume", "--workers", "1", "-q", "--shards", "6",
                      "--seed", "2")
    assert finished.returncode == 0, finished.stderr
    assert _tfopt("verify", out).returncode == 0
    assert tfopt.read_manifest(out).options["seed"] == 2


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root reads a file whatever its permissions")
def test_an_unreadable_shard_is_a_problem_line_naming_it(dataset):
    shard = dataset / "train-00001-of-00003.tfrecord"
    shard.chmod(0)
    try:
        result = tfopt.verify(dataset)
        checked = _tfopt("verify", dataset)
        inspected = _tfopt("inspect", dataset)
    finally:
        shard.chmod(0o644)
    assert _kinds(result) == [("unreadable", shard.name, None)]
    assert "Permission denied" in result.problems[0].detail
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    assert f"PROBLEM {shard}: unreadable: cannot be read (Permission denied)" in checked.stdout
    assert inspected.returncode == 1
    assert inspected.stderr.startswith(f"tfopt: error: {shard}: cannot be read (Permission denied)")


def test_a_first_header_with_an_overlong_length_is_a_corrupt_record_not_a_crash(dataset):
    shard = dataset / "train-00000-of-00003.tfrecord"
    length = struct.pack("<Q", 2**36)
    data = bytearray(shard.read_bytes())
    data[:12] = length + struct.pack("<I", masked_crc32c(length))  # the size stays
    shard.write_bytes(bytes(data))
    checked = _tfopt("verify", dataset)
    assert checked.returncode == 1, checked.stderr  # was 139, a segmentation fault
    assert (f"PROBLEM {shard} record 0: corrupt: truncated record: its length says "
            f"{2**36:,} bytes") in checked.stdout


def _rewrite(dataset, shard_name: str, index: int, record: bytes) -> None:
    """Record ``index`` of a shard replaced, the manifest's sizes and checksums made to match:
    only the record itself tells."""
    from tfopt._files import sha256_file
    from tfopt.records.format.framing import RecordWriter

    shard = dataset / shard_name
    records = list(read_records(shard))
    records[index] = record
    with RecordWriter(shard) as writer:
        for data in records:
            writer.write(data)
    path = dataset / MANIFEST_NAME
    data = json.loads(path.read_text())
    for split in data["splits"].values():
        for entry in split["shards"]:
            if entry["file"] == shard_name:
                entry["num_bytes"], entry["sha256"] = shard.stat().st_size, sha256_file(shard)
        split["num_bytes"] = sum(entry["num_bytes"] for entry in split["shards"])
    data["totals"]["num_bytes"] = sum(split["num_bytes"] for split in data["splits"].values())
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(("tail", "expected"), [
    (b"\x2b\x08\x01\x2c", "field 5 of the Example is a group (wire type 3), which "
                          "TensorFlow's parser refuses"),
    (b"\x2f", "the Example: field 5 has wire type 7, which protobuf has not"),
    (b"\x28\xff\xff", "the Example: a varint cut short at byte"),
    (b"\x2a" + b"\xff" * 9 + b"\x01", "(a negative length?)"),
])
def test_a_record_tensorflow_cannot_parse_fails_with_shard_and_index(dataset, tail, expected):
    shard = "train-00001-of-00003.tfrecord"
    good = list(read_records(dataset / shard))
    for index in (2, 4):
        _rewrite(dataset, shard, index, good[index] + tail)
    result = tfopt.verify(dataset)
    assert not result.ok
    assert _kinds(result) == [("example", shard, 2)]  # the first, and how many more
    (problem,) = result.problems
    assert problem.detail.startswith("not a tf.train.Example TensorFlow can parse: ")
    assert expected in problem.detail and problem.detail.endswith(
        "; 1 more record(s) of this shard too")


def test_a_field_an_example_lacks_fails_as_inspect_refuses_it(dataset):
    # TensorFlow's parser skips a top-level field 5 (and its data); inspect and the schema
    # sample refuse the record, and verify, with the same decoder, fails it
    shard = "train-00000-of-00003.tfrecord"
    _rewrite(dataset, shard, 0, list(read_records(dataset / shard))[0] + b"\x28\x05")
    result = tfopt.verify(dataset)
    assert _kinds(result) == [("example", shard, 0)]
    assert result.problems[0].detail.startswith("not a tf.train.Example tfopt reads: field 5 "
                                                "(varint) at byte ")
    with pytest.raises(tfopt.errors.DatasetError, match=r"record 0 is not a tf.train.Example "
                       r"tfopt reads: field 5 \(varint\)"):
        tfopt.inspect(dataset)


def test_bare_shards_get_their_examples_parsed_too(tmp_path, dataset):
    bare = tmp_path / "bare.tfrecord"
    records = list(read_records(dataset / "train-00000-of-00003.tfrecord"))
    bare.write_bytes(b"".join(frame(r) for r in records[:2]) + frame(records[2] + b"\x2b\x2c"))
    result = tfopt.verify(bare)
    assert _kinds(result) == [("example", "bare.tfrecord", 2)]


@pytest.mark.parametrize(("shape", "expected"), [
    ([10**6, 10**6], "features[2].shape: [1000000, 1000000] (feature 'image/height'): "
                     "1,000,000,000,000 values of at least 1 byte(s) each, more than one record "
                     "can hold"),
    ([-1], "features[2].shape: [-1] (feature 'image/height'): expected dimensions >= 0"),
    ([2.5], "features[2].shape: [2.5] (feature 'image/height'): expected a list of whole "
            "dimensions"),
])
def test_manifest_shapes_no_record_can_hold_fail_naming_the_key(dataset, shape, expected):
    path = dataset / MANIFEST_NAME
    data = json.loads(path.read_text())
    assert data["features"][2]["name"] == "image/height"
    data["features"][2]["shape"] = shape
    path.write_text(json.dumps(data))
    result = tfopt.verify(dataset)
    assert [(p.kind.value, p.detail) for p in result.problems if p.kind.value == "manifest"] \
        and any(p.detail.startswith(expected) for p in result.problems), result.problems
    with pytest.raises(DatasetError, match="inconsistent manifest: features"):
        tfopt.read_manifest(dataset)


def test_a_run_of_records_without_features_is_given_up(tmp_path, monkeypatch):
    from tfopt.records import verify as verify_module
    from tfopt.records.format import schema_sample

    # the cap's own size (1e5) is met by the hostile corpus's GZIP bomb; here a small one
    monkeypatch.setattr(verify_module, "FEATURELESS_RECORDS_CAP", 50)
    monkeypatch.setattr(schema_sample, "FEATURELESS_RECORDS_CAP", 50)
    example = example_classes().Example()
    example.features.feature["y"].int64_list.value.append(1)
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(frame(example.SerializeToString()) * 3 + frame(b"") * 80)
    result = tfopt.verify(path)
    assert _kinds(result) == [("example", "empty.tfrecord", 3)]
    assert result.num_records == 53  # read up to the end of the run
    assert "50 records in a row from here hold no features" in result.problems[0].detail
    with pytest.raises(DatasetError, match=r"50 records in a row from record 3 hold no "
                       "features: not tf.train.Example data, or a decompression bomb"):
        tfopt.inspect(path)
    # records without features between ones with features end no run
    path.write_bytes((frame(example.SerializeToString()) + frame(b"") * 30) * 4)
    assert tfopt.verify(path).ok
