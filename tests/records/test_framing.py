"""TFRecord framing without TensorFlow: the bytes of tf.io.TFRecordWriter, read back by
TensorFlow's reader, and every damage a clean error naming file, record and offset."""

from __future__ import annotations

import gzip
import struct
import sys
import tracemalloc

import numpy as np
import pytest

import tfopt.records.format.framing as framing
from tfopt.errors import TfoptError
from tfopt.records.format.framing import (
    RecordError,
    RecordWriter,
    count_framed_records,
    count_records,
    read_records,
)


def _records():
    rng = np.random.default_rng(3)
    records = [rng.integers(0, 256, int(size), dtype=np.uint8).tobytes()
               for size in rng.integers(0, 70_000, 40)]
    return records + [b"", b"x" * 3_000_000]  # an empty one, one larger than the buffers


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_bytes_are_those_of_tensorflows_writer_and_its_reader_reads_them(tf, tmp_path,
                                                                          compression):
    records = _records()
    mine, theirs = tmp_path / "mine.tfrecord", tmp_path / "theirs.tfrecord"
    with RecordWriter(mine, compression) as writer:
        for record in records:
            writer.write(record)
    kind = "GZIP" if compression else ""
    with tf.io.TFRecordWriter(str(theirs), tf.io.TFRecordOptions(compression_type=kind)) as w:
        for record in records:
            w.write(record)
    assert mine.read_bytes() == theirs.read_bytes()
    assert list(tf.data.TFRecordDataset(str(mine), kind).as_numpy_iterator()) == records
    assert list(read_records(theirs, compression)) == records
    assert count_records(mine, compression) == (len(records), sum(map(len, records)))


def _write(path, records, compression=None):
    with RecordWriter(path, compression) as writer:
        for record in records:
            writer.write(record)
    return path


def _error(path, compression=None) -> RecordError:
    with pytest.raises(RecordError) as caught:
        list(read_records(path, compression))
    return caught.value


def test_a_huge_length_in_a_small_file_is_an_error_not_an_allocation(tmp_path):
    path = tmp_path / "small.tfrecord"
    length = struct.pack("<Q", 1 << 36)
    header = length + struct.pack("<I", framing.masked_crc32c(length))
    path.write_bytes(_write(tmp_path / "a", [b"abc"]).read_bytes() + header + b"\0" * 1000)
    tracemalloc.start()
    try:
        error = _error(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    assert (error.index, error.offset, error.kind) == (1, 19, "truncated")
    assert str(path) in str(error) and "offset 19" in str(error)
    assert f"{1 << 36:,} bytes" in error.reason


def _gzip_claiming(path, length: int, held: int):
    header = struct.pack("<Q", length)
    path.write_bytes(gzip.compress(header + struct.pack("<I", framing.masked_crc32c(header))
                                   + b"\0" * held))
    return path


def test_a_long_length_in_a_gzip_file_reads_only_what_the_stream_holds(tmp_path):
    # the longest length read: its data is read in pieces, as far as the stream goes
    path = _gzip_claiming(tmp_path / "small.tfrecord.gz", framing.MAX_READ_RECORD_BYTES, 5000)
    tracemalloc.start()
    try:
        error = _error(path, "gzip")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    assert (error.index, error.offset, error.kind) == (0, 0, "truncated")


def test_a_length_past_the_limit_is_refused_before_its_data_is_read(tmp_path):
    limit = framing.MAX_READ_RECORD_BYTES
    # GZIP: from the header alone, whatever the stream holds
    error = _error(_gzip_claiming(tmp_path / "a.tfrecord.gz", 1 << 36, 5000), "gzip")
    assert (error.index, error.kind) == (0, "too_long")
    assert error.reason == (f"its length says {1 << 36:,} bytes, more than the {limit:,} tfopt "
                            "reads as one record (MAX_READ_RECORD_BYTES): a decompression bomb "
                            "or a damaged header")
    # plain: a file that holds it (sparse: its data is never written), after one good record
    path = _write(tmp_path / "b.tfrecord", [b"abc"])
    length = struct.pack("<Q", limit + 1)
    with open(path, "ab") as handle:
        handle.write(length + struct.pack("<I", framing.masked_crc32c(length)))
        handle.truncate(handle.tell() + limit + 1 + 4)
    error = _error(path)
    assert (error.index, error.offset, error.kind) == (1, 19, "too_long")
    with pytest.raises(RecordError, match="MAX_READ_RECORD_BYTES"):
        count_framed_records(path)  # the pipelines' header walk: the same limit


def test_damage_is_named_with_its_record(tmp_path):
    path = _write(tmp_path / "a.tfrecord", [b"a" * 100, b"b" * 100, b"c" * 100])
    whole = path.read_bytes()
    flipped = bytearray(whole)
    flipped[116 + 12 + 50] ^= 1  # inside record 1's data
    path.write_bytes(bytes(flipped))
    error = _error(path)
    assert (error.index, error.offset, error.kind) == (1, 116, "crc")
    assert "corrupted record" in error.reason
    path.write_bytes(whole[:-10])  # cut inside the last record
    assert (_error(path).index, _error(path).kind) == (2, "truncated")
    path.write_bytes(whole + b"12345")  # fewer bytes than a header after the last record
    error = _error(path)
    assert (error.index, error.kind) == (3, "trailing") and "5 byte(s)" in error.reason
    header = bytearray(whole)
    header[0] ^= 1  # the first length
    path.write_bytes(bytes(header))
    assert (_error(path).index, _error(path).kind) == (0, "crc")


def test_counting_from_the_headers_finds_what_a_full_read_finds_but_data_damage(tmp_path):
    records = _records()
    path = _write(tmp_path / "a.tfrecord", records)
    assert count_framed_records(path) == len(records)
    whole = path.read_bytes()
    second = 12 + len(records[0]) + 4
    flipped = bytearray(whole)
    flipped[second + 12 + 5] ^= 1  # record 1's data: only its CRC shows it, not read here
    path.write_bytes(bytes(flipped))
    assert count_framed_records(path) == len(records)
    flipped[second + 2] ^= 1  # record 1's length
    path.write_bytes(bytes(flipped))
    with pytest.raises(RecordError) as damaged:
        count_framed_records(path)
    assert (damaged.value.index, damaged.value.offset, damaged.value.kind) == (1, second, "crc")
    length = struct.pack("<Q", 1 << 36)
    path.write_bytes(whole[:second] + length + struct.pack("<I", framing.masked_crc32c(length))
                     + whole[second + 12:])  # the file keeps its size
    with pytest.raises(RecordError) as overlong:
        count_framed_records(path)
    assert (overlong.value.index, overlong.value.kind) == (1, "truncated")
    assert f"{1 << 36:,} bytes" in overlong.value.reason
    path.write_bytes(whole + b"12345")  # fewer bytes than a header end the file, as for TF
    assert count_framed_records(path) == len(records)
    path.write_bytes(b"")
    assert count_framed_records(path) == 0


def test_a_gzip_stream_cut_short_is_named(tmp_path):
    path = _write(tmp_path / "a.tfrecord.gz", [b"a" * 100] * 50, "gzip")
    path.write_bytes(path.read_bytes()[:-6])
    error = _error(path, "gzip")
    assert error.kind == "gzip" and "GZIP stream" in error.reason


def test_without_google_crc32c_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "google_crc32c", None)  # import fails
    monkeypatch.setattr(framing, "_crc32c_value", None)
    with pytest.raises(TfoptError, match="pip install google-crc32c"):
        RecordWriter(tmp_path / "a.tfrecord")
