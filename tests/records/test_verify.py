"""verify: every kind of damage is found and named with its shard and record index."""

from __future__ import annotations

import pytest
from conftest import small_image_dataset

import tfopt
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
    import json

    path = dataset / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["splits"]["train"]["shards"][0]["num_records"] += 1
    path.write_text(json.dumps(data))
    result = tfopt.verify(dataset)
    assert [p.kind.value for p in result.problems] == ["count"]


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


def test_nothing_to_verify_is_an_error(tmp_path):
    with pytest.raises(tfopt.DatasetError, match="does not exist"):
        tfopt.verify(tmp_path / "nope")
    with pytest.raises(tfopt.DatasetError, match="no files match"):
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
    with pytest.raises(tfopt.InvalidArgumentError,
                       match=r"^workers=.*: expected an int >= 1, or None for all usable cores"):
        tfopt.verify(tmp_path / "nothing-here", workers=workers)
