"""Parquet sources (records/sources/parquet_tables.py): every column type kept exactly, part
file folders, images in binary columns, nulls and types that cannot be kept named with row and
column, row groups streamed and read by few shards, and pyarrow as an optional extra."""

from __future__ import annotations

import decimal

import numpy as np
import pytest
from tables_helpers import decoded_records, image_bytes, run_tfopt, without_package_env

import tfopt
from tfopt.errors import SourceError
from tfopt.records.manifest import read_manifest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROWS = 30


def _typed_table():
    rng = np.random.default_rng(1)
    tensor_type = pa.fixed_shape_tensor(pa.int16(), [2, 2])
    tensor = pa.ExtensionArray.from_storage(
        tensor_type, pa.array([[i, i + 1, i + 2, -i] for i in range(ROWS)], pa.list_(pa.int16(), 4)))
    return pa.table({
        "i8": pa.array(np.arange(ROWS, dtype=np.int8) - 15),
        "u32": pa.array(np.arange(ROWS, dtype=np.uint32) * 100_000_000),
        "i64": pa.array(np.arange(ROWS, dtype=np.int64) * (2**62 // ROWS)),
        "f16": pa.array(rng.normal(size=ROWS).astype(np.float16)),
        "f32": pa.array(rng.normal(size=ROWS).astype(np.float32)),
        "f64": pa.array(rng.normal(size=ROWS) / 3),
        "flag": pa.array([i % 3 == 0 for i in range(ROWS)]),
        "text": pa.array([f"zeile {i} ü" for i in range(ROWS)]),
        "blob": pa.array([bytes([i, 0, 255, 0]) for i in range(ROWS)]),
        "grid": pa.array([[[i, i + 0.5, i + 1], [-i, 0.25, 2.0]] for i in range(ROWS)],
                         pa.list_(pa.list_(pa.float32(), 3), 2)),
        "tensor": tensor,
        "floats": pa.array([[i / 7] * (i % 4) for i in range(ROWS)], pa.list_(pa.float64())),
        "ints": pa.array([list(range(i % 5)) for i in range(ROWS)], pa.list_(pa.int32())),
        "words": pa.array([[f"w{j}" for j in range(i % 3)] for i in range(ROWS)]),
        "when": pa.array(np.arange(ROWS, dtype=np.int64) * 10**9, pa.timestamp("us")),
        "day": pa.array(np.arange(ROWS, dtype=np.int32), pa.date32()),
        "price": pa.array([decimal.Decimal(f"{i}.{i:03d}") for i in range(ROWS)],
                          pa.decimal128(10, 3)),
        "kind": pa.array([["cat", "dog"][i % 2] for i in range(ROWS)]).dictionary_encode(),
        "y": pa.array(np.arange(ROWS, dtype=np.int64) % 3),
    })


def test_every_column_type_is_kept_exactly(tmp_path):
    table = _typed_table()
    src = tmp_path / "typed.parquet"
    pq.write_table(table, src, row_group_size=7)
    result = tfopt.convert(src, tmp_path / "out", workers=1, shards=3, label="y")
    specs = {spec.name: (spec.kind.value, spec.dtype, spec.shape, spec.encoding.value)
             for spec in result.manifest.features}
    assert specs == {
        "i8": ("int64", "int8", [], "values"),
        "u32": ("int64", "uint32", [], "values"),
        "i64": ("int64", "int64", [], "values"),
        "f16": ("float", "float16", [], "values"),
        "f32": ("float", "float32", [], "values"),
        "f64": ("bytes", "float64", [], "raw"),
        "flag": ("int64", "bool", [], "values"),
        "text": ("bytes", "string", [], "text"),
        "blob": ("bytes", "bytes", [], "bytes"),
        "grid": ("float", "float32", [2, 3], "values"),
        "tensor": ("int64", "int16", [2, 2], "values"),
        "floats": ("bytes", "float64", None, "raw"),
        "ints": ("int64", "int32", None, "values"),
        "words": ("bytes", "string", None, "text"),
        "when": ("int64", "datetime64[us]", [], "values"),
        "day": ("int64", "datetime64[D]", [], "values"),
        "price": ("bytes", "float64", [], "raw"),
        "kind": ("bytes", "string", [], "text"),
        "y": ("int64", "int64", [], "values"),
    }
    columns = table.to_pydict()
    rows = {int(row["i64"]) // (2**62 // ROWS): row for row in decoded_records(tmp_path / "out")}
    assert sorted(rows) == list(range(ROWS))
    for index, row in rows.items():
        for name in ("i8", "u32", "f16", "f32", "flag", "y"):
            assert row[name] == columns[name][index], name
        assert row["f64"] == columns["f64"][index]  # float64 bit for bit
        assert row["text"].decode("utf-8") == columns["text"][index]
        assert row["blob"] == columns["blob"][index]  # NUL bytes kept
        np.testing.assert_array_equal(row["grid"], np.asarray(columns["grid"][index], np.float32))
        np.testing.assert_array_equal(row["tensor"], np.reshape(columns["tensor"][index], (2, 2)))
        assert row["floats"].tolist() == columns["floats"][index]
        assert row["ints"].tolist() == columns["ints"][index]
        assert [word.decode() for word in row["words"]] == columns["words"][index]
        assert row["when"] == index * 10**9  # microseconds since the epoch, as given
        assert row["day"] == index
        assert row["price"] == float(columns["price"][index])
        assert row["kind"].decode() == columns["kind"][index]


def test_a_folder_of_part_files_as_spark_writes_it(tmp_path):
    folder = tmp_path / "table"
    folder.mkdir()
    for part in range(3):
        rows = np.arange(part * 10, part * 10 + 10)
        pq.write_table(pa.table({"v": rows, "y": rows % 2}),
                       folder / f"part-0000{part}-1f2e-c000.snappy.parquet")
        (folder / f".part-0000{part}-1f2e-c000.snappy.parquet.crc").write_bytes(b"crc")
    (folder / "_SUCCESS").write_bytes(b"")
    result = tfopt.convert(folder, tmp_path / "out", workers=1)
    assert result.manifest.source["kind"] == "parquet"
    assert sorted(int(row["v"]) for row in decoded_records(tmp_path / "out")) == list(range(30))

    pq.write_table(pa.table({"v": [1.5], "y": [0]}), folder / "part-00009.parquet")
    with pytest.raises(SourceError, match=r"part-00009.parquet: column 'v' has type "
                       r"double, part-00000-1f2e-c000.snappy.parquet has int64"):
        tfopt.convert(folder, tmp_path / "other", workers=1)
    (folder / "part-00009.parquet").unlink()
    (folder / "year=2020").mkdir()
    with pytest.raises(SourceError, match=r"holds folders \(year=2020\): a partitioned"):
        tfopt.convert(folder, tmp_path / "other", workers=1)
    assert not (tmp_path / "other").exists()


def test_binary_columns_of_images_are_read_as_images(tmp_path):
    pngs = [image_bytes(seed) for seed in range(12)]
    mixed = [image_bytes(seed, "JPEG" if seed % 2 else "PNG") for seed in range(12)]
    not_all = [image_bytes(seed) for seed in range(11)] + [b"not an image at all"]
    src = tmp_path / "images.parquet"
    pq.write_table(pa.table({"photo": pngs, "mixed": mixed, "other": not_all,
                             "y": np.arange(12) % 2}), src, row_group_size=5)
    result = tfopt.convert(src, tmp_path / "out", workers=1)
    specs = {spec.name: (spec.dtype, spec.shape, spec.encoding.value)
             for spec in result.manifest.features}
    assert specs["photo"] == ("uint8", None, "png")
    assert specs["mixed"] == ("uint8", None, "image")
    assert specs["other"] == ("bytes", [], "bytes")  # one value is no image: plain bytes
    assert result.manifest.image_key == "photo"
    assert sorted(row["photo"] for row in decoded_records(tmp_path / "out")) == sorted(pngs)

    broken = list(pngs)
    broken[7] = pngs[7][:-30]  # cut short: its chunks no longer add up
    pq.write_table(pa.table({"photo": broken}), src, row_group_size=5)
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "broken", workers=1)
    assert f"{src} row 7: column 'photo' holds an image that is truncated or corrupt" in str(error.value)
    assert not (tmp_path / "broken").exists()


def test_nulls_are_refused_with_row_and_column_or_skipped(tmp_path):
    src = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({
        "v": pa.array([1.0, 2.0, None, 4.0, 5.0, 6.0]),
        "lists": pa.array([[1], [2], [3], [4, None], [5], [6]]),
        "y": pa.array([0, 1, 0, 1, None, 1]),
    }), src, row_group_size=2)
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1, label="y")
    assert str(error.value).startswith(f"{src} row 4: label 'y' is null")
    pq.write_table(pa.table({
        "v": pa.array([1.0, 2.0, None, 4.0, 5.0, 6.0]),
        "lists": pa.array([[1], [2], [3], [4, None], [5], [6]]),
        "y": pa.array([0, 1, 0, 1, 0, 1]),
    }), src, row_group_size=2)
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1, label="y", shards=1)
    message = str(error.value)
    assert message.startswith(f"{src} row ") and " is null (a missing value" in message
    assert ("row 2: column 'v'" in message) or ("row 3: column 'lists'" in message)
    assert not (tmp_path / "out").exists()
    result = tfopt.convert(src, tmp_path / "out", workers=1, label="y", on_error="skip")
    assert result.num_records == 4
    skipped = {item.path: item.reason for item in read_manifest(tmp_path / "out").skipped}
    assert sorted(skipped) == [f"{src} row 2", f"{src} row 3"]
    assert skipped[f"{src} row 2"].startswith("column 'v' is null")
    assert skipped[f"{src} row 3"].startswith("column 'lists' is null")


@pytest.mark.parametrize(("column", "expected"), [
    (pa.array([{"a": 1}] * 3), "column 'c' has type struct<a: int64>: nested fields"),
    (pa.array([1, 2, 3], pa.timestamp("ms", tz="Europe/Berlin")),
     "column 'c' has type timestamp[ms, tz=Europe/Berlin]: a timestamp with the time zone"),
    (pa.array([decimal.Decimal(1)] * 3, pa.decimal128(38, 2)),
     "column 'c' has type decimal128(38, 2): up to 38 significant digits, beyond the 15"),
    (pa.array([[[1]]] * 3), "column 'c' has type list<element: list<element: int64>>: a list inside"),
    (pa.array([[("k", 1)]] * 3, pa.map_(pa.string(), pa.int64())),
     "column 'c' has type map<string, int64 ('c')>: a map"),
])
def test_types_that_cannot_be_kept_are_named(tmp_path, column, expected):
    src = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"c": column, "y": [0, 1, 0]}), src)
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert str(error.value).startswith(f"{src}: {expected}")
    assert "\n" not in str(error.value)


def test_uint64_beyond_int64_and_pandas_index_column(tmp_path):
    src = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"big": pa.array([1, 2**63 + 5, 3], pa.uint64()),
                             "__index_level_0__": [10, 11, 12]}), src)
    with pytest.raises(SourceError, match=r"row 1: column 'big' holds 9223372036854775813, "
                       "beyond int64"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    result = tfopt.convert(src, tmp_path / "out", workers=1, on_error="skip")
    assert [spec.name for spec in result.manifest.features] == ["big"]  # pandas' index left out
    assert sorted(int(row["big"]) for row in decoded_records(tmp_path / "out")) == [1, 3]


def test_shards_draw_on_few_row_groups_and_match_across_workers(tmp_path):
    src = tmp_path / "groups.parquet"
    rows = 600
    pq.write_table(pa.table({"v": np.arange(rows), "y": np.arange(rows) % 4}), src,
                   row_group_size=50)
    one = tfopt.convert(src, tmp_path / "one", workers=1, shards=4, val_fraction=0.2, seed=3)
    two = tfopt.convert(src, tmp_path / "two", workers=2, shards=4, val_fraction=0.2, seed=3)
    assert [s.sha256 for s in one.manifest.shards] == [s.sha256 for s in two.manifest.shards]
    from tfopt.records.format.example_pb import example_classes
    from tfopt.records.format.framing import read_records

    seen, readers = [], {}
    for shard in one.manifest.shards:
        values = [example_classes().Example.FromString(record).features.feature["v"]
                  .int64_list.value[0] for record in read_records(tmp_path / "one" / shard.file)]
        groups = [value // 50 for value in values]
        # a shard holds runs of rows of one row group each, one run per row group
        runs = [group for position, group in enumerate(groups)
                if position == 0 or group != groups[position - 1]]
        assert len(runs) == len(set(runs))
        assert values != sorted(values)  # each run shuffled
        for group in runs:
            readers.setdefault((shard.file.split("-")[0], group), []).append(shard.file)
        seen += values
    assert sorted(seen) == list(range(rows))
    # so each row group is read by one or two shards of each split, not by every shard
    assert max(len(files) for files in readers.values()) <= 2
    assert len(readers) == 2 * rows // 50  # every group has training and validation rows
    assert one.manifest.splits["validation"].num_records == 120


def test_bad_input_exits_1_with_one_line_and_writes_nothing(tmp_path):
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"v": np.arange(100), "y": np.arange(100) % 2}), good)
    truncated = tmp_path / "cut.parquet"
    truncated.write_bytes(good.read_bytes()[:-20])
    fake = tmp_path / "fake.parquet"
    fake.write_text("v,y\n1,0\n")
    cases = [([truncated], f"tfopt: error: {truncated}: not a readable Parquet file"),
             ([fake], f"tfopt: error: {fake}: not a readable Parquet file"),
             ([good, "--label", "target"],
              f"tfopt: error: label 'target': no such column in {good}; it has: v, y")]
    for args, expected in cases:
        dst = tmp_path / "out"
        run = run_tfopt(["convert", args[0], dst, "--workers", "1", "-q", *args[1:]], tmp_path)
        assert run.returncode == 1, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), run.stderr
        assert not dst.exists()


def test_without_pyarrow_the_error_names_the_extra(tmp_path):
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": [1, 2]}), src)
    run = run_tfopt(["convert", src, tmp_path / "out", "-q"], tmp_path,
                    without_package_env(tmp_path, "pyarrow"))
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"tfopt: error: {src}: reading Parquet needs the pyarrow package")
    assert lines[0].endswith("pip install 'tfopt[parquet]'")
    assert not (tmp_path / "out").exists()


def test_tensorflow_pipeline_reads_parquet_values_back(tmp_path):
    """The one test here with TensorFlow: the pipeline reads what the Parquet source wrote,
    ragged or padded, and decodes a column of images."""
    rows = 20
    lists = [[i / 3] * (i % 4) for i in range(rows)]
    counts = [list(range(i % 3)) for i in range(rows)]
    src = tmp_path / "t.parquet"
    pq.write_table(pa.table({
        "v": np.arange(rows, dtype=np.int64), "f64": np.arange(rows) / 7,
        "lists": pa.array(lists, pa.list_(pa.float64())),
        "counts": pa.array(counts, pa.list_(pa.uint8())),
        "flag": [i % 2 == 0 for i in range(rows)], "y": np.arange(rows) % 2,
    }), src, row_group_size=6)
    tfopt.convert(src, tmp_path / "out", workers=1, shards=2)
    for pad in (False, True):
        seen = []
        for features, labels in tfopt.build_pipeline(tmp_path / "out", 8, pad_ragged=pad,
                                                     split="train"):
            for position, index in enumerate(features["v"].numpy().tolist()):
                got = features["lists"][position].numpy().tolist()
                count = features["counts"][position].numpy().tolist()
                if pad:
                    got, count = got[:len(lists[index])], count[:len(counts[index])]
                assert got == lists[index] and count == counts[index]
                assert features["f64"].numpy()[position] == index / 7
                assert features["flag"].numpy()[position] == (index % 2 == 0)
                assert labels.numpy()[position] == index % 2
                seen.append(index)
        assert sorted(seen) == list(range(rows))

    images = tmp_path / "images.parquet"
    pixels = [image_bytes(seed, "PNG", 12, 10) for seed in range(6)]
    pq.write_table(pa.table({"image": pixels, "label": np.arange(6) % 3}), images)
    tfopt.convert(images, tmp_path / "images", workers=1)
    batches = list(tfopt.build_pipeline(tmp_path / "images", 6, image_size=(12, 10), split="train"))
    decoded, labels = batches[0]
    assert decoded.shape == (6, 12, 10, 3) and sorted(labels.numpy().tolist()) == [0, 0, 1, 1, 2, 2]
