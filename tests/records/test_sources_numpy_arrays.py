"""NumPy sources (records/sources/numpy_arrays.py): exact round trips of every dtype, or a
one-line refusal naming file, key and row (dtypes TensorFlow cannot read back, damaged
archives, object arrays)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import feature_values, manifest_specs, pipeline_columns, read_examples
from tables_helpers import run_tfopt

import tfopt
from tfopt.errors import SourceError


def _decode(example, spec):
    """Rebuild one example's array from its record, as a reader following the schema would."""
    values = feature_values(example, spec.name)
    if spec.encoding.value == "raw":
        array = np.frombuffer(values[0], dtype=np.dtype(spec.dtype).newbyteorder("<"))
    elif spec.encoding.value == "text":
        array = np.asarray([v.decode() for v in values])
    else:
        array = np.asarray(values, dtype=spec.dtype)
    return array.reshape(spec.shape)


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    count = 40
    return {
        "pixels": rng.integers(0, 256, (count, 4, 5, 3), dtype=np.uint8),
        "embedding": rng.standard_normal((count, 7)).astype(np.float32),
        "precise": rng.standard_normal((count, 2)),  # float64: must survive exactly
        "counts": rng.integers(-300, 300, (count, 3), dtype=np.int16),
        "flag": rng.integers(0, 2, count).astype(bool),
        "name": np.asarray([f"item-{i}" for i in range(count)]),
        "label": rng.integers(0, 5, count),
    }


@pytest.mark.parametrize("layout", ["npz", "npz-compressed", "npy-folder"])
def test_numpy_round_trip_is_exact_for_every_dtype(arrays, tmp_path, layout):
    if layout == "npz":
        src = tmp_path / "data.npz"
        np.savez(src, **arrays)
    elif layout == "npz-compressed":
        src = tmp_path / "data.npz"
        np.savez_compressed(src, **arrays)
    else:
        src = tmp_path / "arrays"
        src.mkdir()
        for key, value in arrays.items():
            np.save(src / f"{key}.npy", value)
    out = tmp_path / "out"
    result = tfopt.convert(src, out, workers=1, shards=3, val_fraction=0.25)
    manifest = result.manifest
    assert manifest.label_key == "label"
    specs = {spec.name: spec for spec in manifest.features}
    assert specs["pixels"].encoding.value == "raw" and specs["pixels"].shape == [4, 5, 3]
    assert specs["precise"].encoding.value == "raw" and specs["precise"].dtype == "float64"
    assert specs["embedding"].kind.value == "float"
    assert specs["counts"].kind.value == "int64" and specs["counts"].dtype == "int16"
    rows = {}
    for split in ("train", "validation"):
        for example in read_examples(out, split):
            decoded = {name: _decode(example, spec) for name, spec in specs.items()}
            rows[str(decoded["name"])] = decoded
    assert len(rows) == 40
    for i in range(40):
        row = rows[f"item-{i}"]
        for key, value in arrays.items():
            expected = np.asarray(value[i])
            np.testing.assert_array_equal(row[key].astype(expected.dtype), expected, err_msg=key)


def test_mismatched_first_dimensions_are_named(tmp_path):
    src = tmp_path / "data.npz"
    np.savez(src, x=np.zeros((10, 3)), y=np.zeros(9))
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert str(src) in str(error.value) and "x: 10, y: 9" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_object_arrays_are_refused_without_unpickling(tmp_path):
    src = tmp_path / "arrays"
    src.mkdir()
    np.save(src / "x.npy", np.zeros((3, 2)))
    np.save(src / "meta.npy", np.asarray([{"a": 1}, None, "x"], dtype=object), allow_pickle=True)
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert str(src / "meta.npy") in str(error.value) and "pickled" in str(error.value)
    npz = tmp_path / "data.npz"
    np.savez(npz, x=np.zeros((3, 2)), meta=np.asarray([1, "a", None], dtype=object))
    with pytest.raises(SourceError, match=r"\[key 'meta'\].*pickled"):
        tfopt.convert(npz, tmp_path / "out2", workers=1)


def test_uint64_within_int64_is_stored_as_int64_and_read_back_exactly(tmp_path):
    src = tmp_path / "data.npz"
    ids = np.asarray([0, 2**63 - 1, 5, 2**40, 7, 9], dtype=np.uint64)
    np.savez(src, ids=ids, order=np.arange(6), y=np.asarray([0, 1, 0, 1, 0, 1], np.uint64))
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1)
    assert manifest_specs(out)["ids"].kind.value == "int64"  # tf.io.decode_raw has no uint64
    features, labels = pipeline_columns(out)
    by_order = np.argsort(features["order"])
    assert features["ids"][by_order].tolist() == ids.astype(int).tolist()
    assert labels[by_order].tolist() == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("key", ["ids", "y"])
def test_uint64_beyond_int64_is_refused_naming_key_and_row(tmp_path, key):
    src = tmp_path / "data.npz"
    arrays = {"ids": np.arange(4, dtype=np.uint64), "y": np.arange(4, dtype=np.uint64)}
    arrays[key][2] = 2**64 - 1  # an int64 list would store it as -1
    np.savez(src, **arrays)
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1, label="y")
    message = str(error.value)
    assert f"{src} [key '{key}']" in message and "18446744073709551615 (row 2)" in message
    assert "view(np.int64)" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="long double is float64 here")
def test_long_double_is_refused_with_the_cast_to_make(tmp_path):
    src = tmp_path / "data.npz"
    np.savez(src, x=np.ones(4, dtype=np.longdouble), y=np.arange(4))
    with pytest.raises(SourceError, match=r"\[key 'x'\]: dtype float\d+ .*astype\(np.float64\)"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists()


def test_damaged_small_uncompressed_npz_member_is_named(tmp_path):
    src = tmp_path / "data.npz"
    pixels = np.arange(64, dtype=np.uint8).reshape(8, 8)
    np.savez(src, pixels=pixels, y=np.arange(8))
    data = bytearray(src.read_bytes())
    at = data.find(pixels.tobytes())
    data[at + 10] ^= 0xFF  # zipfile reads a member this small whole, checking its CRC-32 then
    src.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"\[key 'pixels'\]: damaged, cannot be read"):
        tfopt.convert(src, tmp_path / "out", workers=1)


def test_rows_of_zero_values_beyond_memory_are_one_line_not_memory_error(tmp_path):
    # a header alone: 10**12 rows of shape (0,) need no data, and no list of them fits
    src = tmp_path / "empty_rows.npy"
    with open(src, "wb") as handle:
        np.lib.format.write_array_header_1_0(
            handle, {"descr": "<f4", "fortran_order": False, "shape": (10**12, 0)})
    dst = tmp_path / "out"
    run = run_tfopt(["convert", src, dst, "--workers", "1", "-q"], tmp_path)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"tfopt: error: {src}: 1,000,000,000,000 rows (of shape (1000000000000, 0), rows that "
        "hold no values): planning a conversion takes about 128 bytes"), run.stderr
    assert not dst.exists()
