"""Damaged shards through the pipeline (data/shard_check.py, data/source.py): a header whose
length runs past the end of its file (TensorFlow's reader would allocate it and crash) is named
with its shard and record before TensorFlow reads, or skipped with skip_corrupt; a shard with
more or fewer records than its manifest says is named; an empty split is named."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct

import pytest

import tfopt
from tfopt.data.pipeline import PipelineBuilder
from tfopt.errors import DatasetError
from tfopt.records.format.framing import masked_crc32c, read_records
from tfopt.records.manifest import MANIFEST_NAME

OVERLONG = 2**36  # 64 GiB: what TensorFlow's reader would allocate for the record


def _record_offsets(shard) -> list[int]:
    offsets, position, data = [], 0, shard.read_bytes()
    while position < len(data):
        offsets.append(position)
        position += 16 + struct.unpack_from("<Q", data, position)[0]
    return offsets


def _overlong_header_at(shard, record: int) -> None:
    """Overwrite record ``record``'s header with a valid one for a 64 GiB length: the file
    keeps its size, so only the walk through the headers finds it."""
    length = struct.pack("<Q", OVERLONG)
    data = bytearray(shard.read_bytes())
    offset = _record_offsets(shard)[record]
    data[offset:offset + 12] = length + struct.pack("<I", masked_crc32c(length))
    shard.write_bytes(bytes(data))


def _read_all(builder) -> int:
    return sum(int(images.shape[0]) for images, _ in builder.build())


def _shards(dataset) -> list:
    return sorted(dataset.glob("train-*"))


def test_an_overlong_length_is_named_with_its_shard_and_record_before_tensorflow_reads(
        indexed_png_dataset, tmp_path):
    first, second = _shards(indexed_png_dataset)[:2]
    elsewhere = tmp_path / "elsewhere.tfrecord"  # without a manifest's counts
    shutil.copy(second, elsewhere)
    _overlong_header_at(elsewhere, 1)
    _overlong_header_at(first, 0)
    with pytest.raises(DatasetError) as refused:
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, split="train")
    assert str(refused.value).startswith(
        f"shard {first}: record 0 at offset 0: truncated record: its length says "
        f"{OVERLONG:,} bytes")
    assert "skip_corrupt=True" in str(refused.value)
    with pytest.raises(DatasetError, match=rf"^shard {elsewhere}: record 1 at offset "
                       rf"{_record_offsets(second)[1]}: truncated record"):
        PipelineBuilder([str(elsewhere)], batch_size=8, image_size=24)


def test_skip_corrupt_reads_up_to_an_overlong_length_and_counts_the_rest(indexed_png_dataset,
                                                                         caplog):
    # These reads crashed the process (exit 139). Read here, not in a child process (8 s of
    # TensorFlow import on a busy machine): a regression kills the test run, and pytest's
    # faulthandler names this test as it dies.
    first, second = _shards(indexed_png_dataset)[:2]
    _overlong_header_at(first, 0)  # the whole first shard is lost
    _overlong_header_at(second, 3)  # the second keeps its first 3 records
    manifest = tfopt.read_manifest(indexed_png_dataset)
    lost = manifest.shards[0].num_records + manifest.shards[1].num_records - 3
    with caplog.at_level(logging.WARNING, "tfopt"):
        builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24,
                                  skip_corrupt=True, split="train")
        dataset = tfopt.build_pipeline(indexed_png_dataset, 8, image_size=24, skip_corrupt=True,
                                       split="train")
    assert _read_all(builder) == manifest.num_records - lost
    assert builder.corrupt_records == lost
    assert sum(int(images.shape[0]) for images, _ in dataset) == manifest.num_records - lost
    # each skipped remainder is named in a warning
    assert f"shard {first}: record 0: truncated record" in caplog.text
    assert f"shard {second}: record 3: truncated record" in caplog.text


def test_a_damaged_header_is_named_or_its_shard_skipped_from_there(indexed_png_dataset, caplog):
    shard = _shards(indexed_png_dataset)[1]
    data = bytearray(shard.read_bytes())
    data[_record_offsets(shard)[2] + 3] ^= 0x40  # record 2's length: its CRC fails
    shard.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match=rf"^shard {shard}: record 2 at offset \d+: "
                       "corrupted record: length CRC mismatch"):
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, split="train")
    with caplog.at_level(logging.WARNING, "tfopt"):
        builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24,
                                  skip_corrupt=True, split="train")
    assert f"shard {shard}: record 2: corrupted record" in caplog.text
    manifest = tfopt.read_manifest(indexed_png_dataset)
    lost = manifest.shards[1].num_records - 2
    assert _read_all(builder) == manifest.num_records - lost
    assert builder.corrupt_records == lost


def _say_records(dataset, shard_index: int, change: int) -> None:
    """Change one shard's record count in the manifest, its totals with it (consistent)."""
    path = dataset / MANIFEST_NAME
    data = json.loads(path.read_text())
    for entry in (data["splits"]["train"]["shards"][shard_index], data["splits"]["train"],
                  data["totals"]):
        entry["num_records"] += change
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("skip_corrupt", [False, True])
def test_a_shard_with_more_records_than_its_manifest_says_is_refused(indexed_png_dataset,
                                                                     skip_corrupt):
    shard = _shards(indexed_png_dataset)[0]
    holds = len(_record_offsets(shard))
    _say_records(indexed_png_dataset, 0, -1)
    with pytest.raises(DatasetError, match=rf"^shard {shard}: holds {holds} records, its "
                       rf"manifest says {holds - 1}: not the shard the manifest describes"):
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24,
                        skip_corrupt=skip_corrupt, split="train")


def test_a_shard_cut_at_a_record_boundary_is_named_or_counted_as_lost(indexed_png_dataset):
    shard = _shards(indexed_png_dataset)[2]
    offsets = _record_offsets(shard)
    shard.write_bytes(shard.read_bytes()[:offsets[-2]])  # its last two records gone
    with pytest.raises(DatasetError, match=rf"^shard {shard}: holds {len(offsets) - 2} "
                       rf"records, its manifest says {len(offsets)}: the shard was cut short"):
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, split="train")
    builder = PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, skip_corrupt=True,
                              split="train")
    assert _read_all(builder) == 38 and builder.corrupt_records == 2


@pytest.fixture
def gzip_dataset(tmp_path):
    images = tmp_path / "images"
    tfopt.make_demo_data(images, count=24, classes=2, min_size=24, max_size=32, workers=1)
    out = tmp_path / "gzip"
    tfopt.convert(images, out, workers=1, shards=2, compression="gzip")
    return out


def test_a_gzip_shard_with_more_records_than_its_manifest_says_is_named_the_right_way_round(
        gzip_dataset, tf):
    # GZIP shards are not walked (TensorFlow inflates a record piece by piece): the count at
    # the end of the shard names it
    shard = _shards(gzip_dataset)[0]
    holds = sum(1 for _ in read_records(shard, "gzip"))
    _say_records(gzip_dataset, 0, -1)
    builder = PipelineBuilder(gzip_dataset, batch_size=4, image_size=16, split="train")
    with pytest.raises(tf.errors.InvalidArgumentError) as refused:
        _read_all(builder)
    assert (f"tfopt: shard {shard} should hold {holds - 1} records (its manifest says), "
            f"{holds} could be read: more records than that: not the shard the manifest "
            "lists; run 'tfopt verify' on the dataset") in str(refused.value)


def test_a_split_without_shards_or_records_is_named(indexed_png_dataset):
    path = indexed_png_dataset / MANIFEST_NAME
    data = json.loads(path.read_text())
    data["splits"]["validation"] = {"num_records": 0, "num_bytes": 0, "shards": []}
    path.write_text(json.dumps(data))
    with pytest.raises(DatasetError, match=rf"^{indexed_png_dataset}: split 'validation' "
                       r"has no shards in its manifest\.json: nothing to read; choose another "
                       r"split: 'train' \(40 records\)$"):
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24, split="validation")
    with pytest.raises(DatasetError, match="split 'validation' has no shards"):
        PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24)  # its default split


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root reads a file whatever its permissions")
def test_an_unreadable_shard_is_named(indexed_png_dataset):
    shard = _shards(indexed_png_dataset)[1]
    shard.chmod(0)
    try:
        with pytest.raises(DatasetError,
                           match=rf"^{shard}: cannot be read \(Permission denied\)"):
            PipelineBuilder(indexed_png_dataset, batch_size=8, image_size=24)
    finally:
        shard.chmod(0o644)
