"""verify agrees with the readers, and bombs stay under a memory bound (issue 44, item 6), each
input written at test time and met by a real ``tfopt`` process.

Examples: a record of a converted dataset replaced (CRCs, size and SHA-256 made to match) by
one with a field an Example does not have, or a field of the wrong wire type. What
TensorFlow's parser does with each, ``tf.io.parse_single_example`` with the manifest's
features (TensorFlow 2.21, asserted by ``test_tensorflow_parses_them_as_stated``):

- a top-level field other than ``features`` (field 5 varint, field 6 bytes, a
  ``SequenceExample``'s ``feature_lists``), or ``features`` with another wire type (varint,
  32-bit): **taken**, the field skipped and whatever it held dropped without a word;
- inside ``Features``, a field that is no entry, or an entry whose key is a varint:
  **refused** (``InvalidArgumentError``: "Could not parse example input").

``inspect`` and the pipelines' schema sample refuse all of them (one decoder,
``records/format/example_wire.py``), and so must ``verify``: exit 1 with one ``PROBLEM`` line
naming the shard, the record and what is wrong.

Bombs: a GZIP shard of one 1 GiB record (1 MB on disk; TensorFlow's reader, which has no
record limit, would allocate and read it whole), a GZIP shard whose header claims 1 GiB that
the stream does not hold, and a ``.npz`` whose one member inflates to 4 GB of zeros. Before,
verify and inspect peaked at 3.25 GB and 2.18 GB on the shards, and convert ran past 150 s at
4.10 GB on the archive; now each is one line naming the file and the limit
(``MAX_READ_RECORD_BYTES``, ``MAX_INFLATED_NPZ_BYTES``), its peak resident memory, taken by
``getrusage(RUSAGE_CHILDREN)`` in a wrapper process, under :data:`REFUSED_PEAK_BYTES`. A long
record that is whole is read at about three times its length (docs/records.md, "Memory").
"""

from __future__ import annotations

import io
import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import google_crc32c
import numpy as np
import pytest

from tfopt._files import sha256_file
from tfopt.records.format.example_pb import example_classes
from tfopt.records.format.framing import MAX_READ_RECORD_BYTES, RecordWriter, read_records
from tfopt.records.manifest import read_manifest
from tfopt.records.sources.numpy_arrays import MAX_INFLATED_NPZ_BYTES

MIB = 1 << 20
GIB = 1 << 30
# A refused bomb costs the interpreter, tfopt's modules and NumPy (about 40 MB measured), never
# its data (1 GiB, 4 GB): a ceiling far from both.
REFUSED_PEAK_BYTES = 256 * MIB
# A whole record is held about three times while verify reads it (its data, protobuf's parse,
# one value), beside the interpreter's ~40 MB.
RECORD_COPIES = 3.5
BASE_PEAK_BYTES = 100 * MIB

_MEASURE = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout=150)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # KiB on Linux
print(json.dumps([done.returncode, done.stdout, done.stderr, peak]))
"""


def tfopt_measured(*argv) -> tuple[int, str, str, int]:
    """``tfopt argv`` as a child of a wrapper process, whose only child it is: its exit code,
    stdout, stderr and peak resident bytes."""
    wrapper = subprocess.run([sys.executable, "-c", _MEASURE, sys.executable, "-m", "tfopt",
                              *map(str, argv)], capture_output=True, text=True, timeout=200)
    assert wrapper.returncode == 0, wrapper.stderr[-3000:]
    code, out, err, peak = json.loads(wrapper.stdout)
    assert "Traceback" not in err, err[-3000:]
    return code, out, err, peak


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("tfopt: error:")]


def problem_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("PROBLEM ")]


# --- Examples ------------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: int, body: bytes) -> bytes:
    return bytes([tag]) + _varint(len(body)) + body


def _sequence_example(good: bytes) -> bytes:
    classes = example_classes()
    sequence = classes.SequenceExample()
    sequence.context.CopyFrom(classes.Example.FromString(good).features)
    sequence.feature_lists.feature_list["frames"].feature.add().float_list.value.extend([1, 2])
    return sequence.SerializeToString(deterministic=True)


def foreign_examples(good: bytes) -> dict[str, tuple[bytes, str, bool]]:
    """name -> (a record made from the Example ``good``, what verify's line says of it,
    whether TensorFlow's parser refuses it)."""
    at = len(good)
    features = example_classes().Example.FromString(good).features.SerializeToString(
        deterministic=True)
    value = _length_delimited(0x1A, b"\x0a\x01\x01")  # an int64_list holding [1]
    varint_key_entry = _length_delimited(0x0A, b"\x08\x01" + _length_delimited(0x12, value))
    return {
        "unknown_varint_field": (good + b"\x28\x05", f"field 5 (varint) at byte {at}, which "
                                 "an Example does not have", False),
        "unknown_bytes_field": (good + b"\x32\x03abc", f"field 6 (length-delimited) at byte "
                                f"{at}, which an Example does not have", False),
        "sequence_example": (_sequence_example(good), f"field 2 (length-delimited) at byte {at} "
                             "(a tf.train.SequenceExample's feature_lists?)", False),
        "features_as_varint": (good + b"\x08\x01", f"field 1 as a varint value at byte {at}, "
                               "where an Example's features are length-delimited", False),
        "features_as_32_bit": (good + b"\x0d\x00\x00\x80\x3f", f"field 1 as a 32-bit value at "
                               f"byte {at}", False),
        "unknown_field_in_features": (_length_delimited(0x0A, features + b"\x10\x01"),
                                      "Features: field 2 (varint) at byte", True),
        "entry_key_as_varint": (_length_delimited(0x0A, features + varint_key_entry),
                                "field 1 (varint) at byte", True),
    }


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """A one-shard dataset of 6 records: a float vector and a class label."""
    root = tmp_path_factory.mktemp("verify_examples")
    np.savez(root / "data.npz", x=np.arange(18, dtype=np.float32).reshape(6, 3),
             label=np.arange(6) % 2)
    done = subprocess.run([sys.executable, "-m", "tfopt", "convert", str(root / "data.npz"),
                           str(root / "dataset"), "--label", "label", "--shards", "1",
                           "--workers", "1", "-q"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return root / "dataset"


def _shard(dataset: Path) -> Path:
    (shard,) = read_manifest(dataset).splits["train"].shards
    return dataset / shard.file


def _good_record(dataset: Path) -> bytes:
    return list(read_records(_shard(dataset)))[1]


def with_record(dataset: Path, folder: Path, index: int, record: bytes) -> Path:
    """A copy of ``dataset`` whose record ``index`` is ``record``, framed by tfopt's writer,
    its shard's size and SHA-256 set in the manifest: only the record tells."""
    shutil.copytree(dataset, folder)
    shard = _shard(folder)
    records = list(read_records(shard))
    records[index] = record
    with RecordWriter(shard) as writer:
        for data in records:
            writer.write(data)
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    for split in manifest["splits"].values():
        for entry in split["shards"]:
            entry["num_bytes"], entry["sha256"] = shard.stat().st_size, sha256_file(shard)
        split["num_bytes"] = sum(entry["num_bytes"] for entry in split["shards"])
    manifest["totals"]["num_bytes"] = sum(s["num_bytes"] for s in manifest["splits"].values())
    path.write_text(json.dumps(manifest))
    return folder


CASES = sorted(foreign_examples(b"\x0a\x00"))  # the names: any Example makes them


@pytest.mark.parametrize("name", CASES)
def test_verify_fails_what_inspect_refuses(dataset, tmp_path, name):
    record, said, _ = foreign_examples(_good_record(dataset))[name]
    damaged = with_record(dataset, tmp_path / name, 1, record)
    shard = _shard(damaged)

    code, out, err, _ = tfopt_measured("verify", damaged, "-q")
    assert code == 1, out + err
    (line,) = problem_lines(out)
    assert line.startswith(f"PROBLEM {shard} record 1: example: not a tf.train.Example "), line
    assert said in line, line
    assert out.rstrip().endswith("FAILED: 1 problem(s)")

    code, out, err, _ = tfopt_measured("inspect", damaged)
    assert code == 1, out + err
    (line,) = error_lines(err)
    assert line.startswith(f"tfopt: error: {shard}: record 1 is not a tf.train.Example "), line
    assert said in line, line


def test_tensorflow_parses_them_as_stated(dataset, tf):
    good = _good_record(dataset)
    spec = {feature.name: tf.io.FixedLenFeature(feature.shape, {
        "float": tf.float32, "int64": tf.int64, "bytes": tf.string}[feature.kind.value])
        for feature in read_manifest(dataset).features}
    expected = {key: value.numpy() for key, value in tf.io.parse_single_example(good, spec).items()}
    for name, (record, _, refuses) in foreign_examples(good).items():
        try:
            parsed = tf.io.parse_single_example(record, spec)
        except tf.errors.InvalidArgumentError as error:
            assert refuses, f"{name}: {error}"
            continue
        assert not refuses, f"{name}: TensorFlow's parser took it"
        # taken: the good record's values, and nothing said of the field it skipped
        assert {key: value.numpy().tolist() for key, value in parsed.items()} == {
            key: value.tolist() for key, value in expected.items()}, name


# --- bombs ---------------------------------------------------------------------------------

def _raw_deflate(data: bytes, finish: bool = False) -> bytes:
    """``data`` as raw deflate blocks that end on a byte and refer to nothing before them, so
    that copies of them can follow one another (the last one with ``finish``)."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
    return deflate.compress(data) + deflate.flush(zlib.Z_FINISH if finish else zlib.Z_FULL_FLUSH)


_ZERO_MIB = _raw_deflate(bytes(MIB))  # about 1 KB: a MiB of zeros written 1,000 times smaller


def _masked_crc32c(crc: int) -> int:
    """TFRecord's mask of a CRC-32C (the format's own formula)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def gzip_record_bomb(path: Path, claimed: int, held_mib: int) -> Path:
    """A GZIP TFRecord file of one record whose header says ``claimed`` bytes, followed by
    ``held_mib`` MiB of zeros (and the data's CRC when they are the whole record), written a
    compressed MiB at a time: a few MB on disk, nothing large in memory."""
    length = struct.pack("<Q", claimed)
    header = length + struct.pack("<I", _masked_crc32c(google_crc32c.value(length)))
    data_crc, gzip_crc = 0, zlib.crc32(header)
    zeros = bytes(MIB)
    for _ in range(held_mib):
        data_crc = google_crc32c.extend(data_crc, zeros)
        gzip_crc = zlib.crc32(zeros, gzip_crc)
    footer = struct.pack("<I", _masked_crc32c(data_crc)) if claimed == held_mib * MIB else b""
    gzip_crc = zlib.crc32(footer, gzip_crc)
    size = len(header) + held_mib * MIB + len(footer)
    with open(path, "wb") as handle:
        handle.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")  # GZIP, no name, no time
        handle.write(_raw_deflate(header))
        for _ in range(held_mib):
            handle.write(_ZERO_MIB)
        handle.write(_raw_deflate(footer, finish=True))
        handle.write(struct.pack("<II", gzip_crc, size & 0xFFFFFFFF))
    return path


def npz_deflate_bomb(path: Path, mebibytes: int) -> Path:
    """An ``.npz`` of one float32 array of zeros, ``mebibytes`` MiB of data, deflated; the
    archive written by hand (local header, data, central directory) so that its data never
    exists uncompressed."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False,
                                                  "shape": (mebibytes * 256, 1024)})
    header = buffer.getvalue()
    crc = zlib.crc32(header)
    zeros = bytes(MIB)
    for _ in range(mebibytes):
        crc = zlib.crc32(zeros, crc)
    first, last = _raw_deflate(header), _raw_deflate(b"", finish=True)
    size = len(header) + mebibytes * MIB
    name = b"x.npy"
    # version 2.0, no flags, deflate, 1980-01-01, CRC-32, compressed and full sizes, name
    fields = struct.pack("<HHHHHIIIHH", 20, 0, 8, 0, 0x21, crc,
                         len(first) + mebibytes * len(_ZERO_MIB) + len(last), size, len(name), 0)
    with open(path, "wb") as handle:
        handle.write(b"PK\x03\x04" + fields + name + first)
        for _ in range(mebibytes):
            handle.write(_ZERO_MIB)
        handle.write(last)
        directory_at = handle.tell()
        entry = b"PK\x01\x02" + struct.pack("<H", 20) + fields + bytes(14) + name
        handle.write(entry + b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 1, 1, len(entry),
                                                        directory_at, 0))
    return path


def test_the_bomb_builders_write_valid_files(tmp_path):
    # small ones, read whole: the large ones are refused for their size, not as damage
    small = gzip_record_bomb(tmp_path / "small.tfrecord.gz", 3 * MIB, 3)
    assert [len(record) for record in read_records(small, "gzip")] == [3 * MIB]
    with np.load(npz_deflate_bomb(tmp_path / "small.npz", 2)) as archive:
        assert archive["x"].shape == (512, 1024) and not archive["x"].any()


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bombs")
    return {
        "one_gib_record": gzip_record_bomb(root / "one_gib_record.tfrecord.gz", GIB, 1024),
        "claims_one_gib": gzip_record_bomb(root / "claims_one_gib.tfrecord.gz", GIB, 1023),
    }


@pytest.mark.parametrize("bomb", ["one_gib_record", "claims_one_gib"])
def test_a_gzip_record_past_the_limit_is_refused_from_its_header(bombs, bomb):
    path = bombs[bomb]
    assert path.stat().st_size < 2 * MIB
    said = (f"record 0: its length says {GIB:,} bytes, more than the "
            f"{MAX_READ_RECORD_BYTES:,} tfopt reads as one record (MAX_READ_RECORD_BYTES)")

    code, out, err, peak = tfopt_measured("verify", path, "-q")
    assert code == 1, out + err
    (line,) = problem_lines(out)
    assert line.startswith(f"PROBLEM {path} record 0: corrupt: its length says {GIB:,} bytes"), line
    assert "(MAX_READ_RECORD_BYTES)" in line
    assert peak < REFUSED_PEAK_BYTES, f"verify peaked at {peak:,} bytes"

    code, out, err, peak = tfopt_measured("inspect", path)
    assert code == 1, out + err
    assert error_lines(err) == [f"tfopt: error: {path}: {said}: a decompression bomb or a "
                                "damaged header"], err
    assert peak < REFUSED_PEAK_BYTES, f"inspect peaked at {peak:,} bytes"


def test_a_long_record_that_is_whole_is_read_in_bounded_memory(tmp_path):
    example = example_classes().Example()
    example.features.feature["x"].bytes_list.value.append(bytes(64 * MIB))
    record = example.SerializeToString(deterministic=True)
    path = tmp_path / "long.tfrecord.gz"
    with RecordWriter(path, "gzip") as writer:
        writer.write(record)
    del example
    code, out, err, peak = tfopt_measured("verify", path, "-q")
    assert code == 0, out + err
    assert peak < BASE_PEAK_BYTES + RECORD_COPIES * len(record), f"peaked at {peak:,} bytes"


def test_an_npz_deflate_bomb_is_refused_from_its_index(tmp_path):
    src = npz_deflate_bomb(tmp_path / "bomb.npz", 3800)  # 3.98 GB of zeros in 3.9 MB
    assert src.stat().st_size < 5 * MIB
    dst = tmp_path / "out"
    code, out, err, peak = tfopt_measured("convert", src, dst, "-q")
    assert code == 1, out + err
    assert error_lines(err) == [
        f"tfopt: error: {src}: its 1 compressed array(s) inflate to {3800 * MIB + 128:,} "
        f"bytes, more than the {MAX_INFLATED_NPZ_BYTES:,} convert inflates into each "
        "process's memory (MAX_INFLATED_NPZ_BYTES); save them uncompressed (np.savez, or one "
        ".npy file each), which convert memory-maps"], err
    assert not dst.exists()
    assert peak < REFUSED_PEAK_BYTES, f"convert peaked at {peak:,} bytes"
