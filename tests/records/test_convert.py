"""convert (records/convert/): shards named, counted and checksummed, the manifest last, and
the same dataset from one process as from several."""

from __future__ import annotations

import json

import numpy as np

import tfopt
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME, read_manifest


def test_shards_are_named_counted_and_checksummed_and_the_manifest_comes_last(image_folder, tmp_path):
    out = tmp_path / "out"
    tfopt.convert(image_folder, out, workers=1, shards=4, val_fraction=0.3, seed=3)
    manifest = read_manifest(out)
    train, validation = manifest.splits["train"], manifest.splits["validation"]
    assert [s.file for s in train.shards] == [f"train-{i:05d}-of-00004.tfrecord" for i in range(4)]
    assert len(validation.shards) >= 1
    assert train.num_records + validation.num_records == 21
    assert validation.num_records == 6  # floor(21 * 0.3)
    for shard in manifest.shards:
        assert (out / shard.file).stat().st_size == shard.num_bytes
    assert not (out / JOURNAL_NAME).exists()
    on_disk = json.loads((out / MANIFEST_NAME).read_text())
    assert on_disk["totals"]["num_records"] == 21
    assert on_disk["options"]["seed"] == 3


def test_parallel_workers_write_the_same_dataset_as_one_process(image_folder, tmp_path):
    one = tfopt.convert(image_folder, tmp_path / "one", workers=1, shards=4, seed=5)
    two = tfopt.convert(image_folder, tmp_path / "two", workers=2, shards=4, seed=5)
    assert [s.sha256 for s in one.manifest.shards] == [s.sha256 for s in two.manifest.shards]


def test_camera_sized_images_stored_as_they_are_get_the_max_size_advice(tmp_path, caplog):
    from conftest import encode_jpeg

    ramp = np.linspace(0, 255, 2048, dtype=np.float32)[None, :, None]
    pixels = np.broadcast_to(ramp, (1536, 2048, 3)).astype(np.uint8)
    for name in ("a", "b"):
        (tmp_path / "photos" / name).mkdir(parents=True)
        (tmp_path / "photos" / name / "1.jpg").write_bytes(encode_jpeg(pixels, quality=70))
    with caplog.at_level("WARNING", logger="tfopt"):
        tfopt.convert(tmp_path / "photos", tmp_path / "out", workers=1)
    advice = [r.getMessage() for r in caplog.records if "--max-size 512" in r.getMessage()]
    assert len(advice) == 1 and "2048 x 1536 px (median of 2 sampled)" in advice[0]
    assert "about 16x fewer pixels" in advice[0]  # (2048 / 512) ** 2
    caplog.clear()
    with caplog.at_level("WARNING", logger="tfopt"):
        tfopt.convert(tmp_path / "photos", tmp_path / "small", workers=1, max_size=512)
    assert not any("--max-size" in r.getMessage() for r in caplog.records)


def test_images_near_training_size_get_no_advice(image_folder, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="tfopt"):
        tfopt.convert(image_folder, tmp_path / "out", workers=1)
    assert not any("--max-size" in r.getMessage() for r in caplog.records)
