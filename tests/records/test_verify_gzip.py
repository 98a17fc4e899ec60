"""verify of GZIP shards: a decompressed stream cut inside a record header is found.

TensorFlow's reader ends a stream without an error where fewer than a record header's 12 bytes
are left, so such a cut reads as a whole, shorter shard; verify must still call it corrupt.
"""

from __future__ import annotations

import gzip

import pytest
from click.testing import CliRunner
from conftest import small_image_dataset

import tfopt
from tfopt.cli import cli
from tfopt.records.manifest import MANIFEST_NAME

SHARD = "train-00001-of-00002.tfrecord.gz"


@pytest.fixture
def dataset(tmp_path):
    return small_image_dataset(tmp_path, per_class=4, shards=2, compression="gzip")


def _cut_inside_last_header(shard, keep: int = 5):
    """Rewrite ``shard`` as a valid GZIP of its stream cut ``keep`` bytes into the last record's
    header; return the index of that record."""
    data = gzip.decompress(shard.read_bytes())
    starts, offset = [], 0
    while offset < len(data):
        starts.append(offset)
        offset += int.from_bytes(data[offset : offset + 8], "little") + 16
    shard.write_bytes(gzip.compress(data[: starts[-1] + keep]))
    return len(starts) - 1


def _corrupt(result):
    return [(p.file.rsplit("/", 1)[-1], p.record, p.detail) for p in result.problems
            if p.kind.value == "corrupt"]


def test_whole_gzip_dataset_passes(dataset):
    assert tfopt.verify(dataset).ok


def test_cut_inside_a_header_is_corrupt_with_and_without_manifest(dataset):
    last = _cut_inside_last_header(dataset / SHARD)
    run = CliRunner().invoke(cli, ["verify", str(dataset), "-q"], catch_exceptions=False)
    assert run.exit_code == 1
    assert f"{SHARD} record {last}: corrupt: 5 byte(s) after the last whole record" in run.output
    (dataset / MANIFEST_NAME).unlink()  # bare shards: no size or checksum to catch it
    [(name, record, detail)] = _corrupt(tfopt.verify(dataset))
    assert (name, record) == (SHARD, last) and "5 byte(s)" in detail


def test_gzip_stream_cut_short_is_corrupt(dataset):
    shard = dataset / SHARD
    shard.write_bytes(shard.read_bytes()[:-4])  # its length trailer gone: TensorFlow reads it all
    (dataset / MANIFEST_NAME).unlink()
    [(name, _, detail)] = _corrupt(tfopt.verify(dataset))
    assert name == SHARD and "GZIP stream" in detail
