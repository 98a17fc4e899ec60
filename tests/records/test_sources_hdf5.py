"""HDF5 sources (records/sources/hdf5_arrays.py): the datasets of a group kept with their
dtype and shape, strings, variable-length sequences and images, datasets that disagree in
length or types that cannot be kept named, chunks read by block, and h5py as an optional
extra."""

from __future__ import annotations

import numpy as np
import pytest
from tables_helpers import decoded_records, image_bytes, run_tfopt, without_package_env

import tfopt
from tfopt.errors import InvalidArgumentError, SourceError
from tfopt.records.manifest import read_manifest

h5py = pytest.importorskip("h5py")

ROWS = 24


def _write_typed(path):
    rng = np.random.default_rng(2)
    data = {
        "i16": np.arange(ROWS, dtype=np.int16) - 100,
        "u8": rng.integers(0, 256, (ROWS, 3, 2), dtype=np.uint8),
        "f32": rng.normal(size=(ROWS, 4)).astype(np.float32),
        "f64": rng.normal(size=ROWS) / 3,
        "flag": np.arange(ROWS) % 3 == 0,
        "fixed": np.array([b"id\x00%d" % i for i in range(ROWS)]),
        "y": np.arange(ROWS) % 4,
    }
    with h5py.File(path, "w") as handle:
        group = handle.create_group("train")
        for name, values in data.items():
            group.create_dataset(name, data=values, chunks=(5,) + values.shape[1:])
        text = group.create_dataset("text", (ROWS,), dtype=h5py.string_dtype())
        text[:] = [f"Zeile {i} ü" for i in range(ROWS)]
        seq = group.create_dataset("seq", (ROWS,), dtype=h5py.vlen_dtype(np.int64))
        wide = group.create_dataset("wide", (ROWS,), dtype=h5py.vlen_dtype(np.float64))
        for i in range(ROWS):
            seq[i] = np.arange(i % 4) - 2**40
            wide[i] = np.full(i % 3, i / 7)
        group.create_dataset("pair", data=np.zeros(ROWS, dtype=np.dtype((np.float32, (2,)))) + 1.5)
        group.create_group("ignored").create_dataset("other", data=np.zeros(3))
        handle["root_only"] = np.zeros(5)
    return data


def test_datasets_of_a_group_are_kept_exactly(tmp_path):
    src = tmp_path / "data.h5"
    data = _write_typed(src)
    result = tfopt.convert(src, tmp_path / "out", workers=1, shards=2, group="train")
    specs = {spec.name: (spec.kind.value, spec.dtype, spec.shape, spec.encoding.value)
             for spec in result.manifest.features}
    assert specs == {
        "i16": ("int64", "int16", [], "values"),
        "u8": ("bytes", "uint8", [3, 2], "raw"),
        "f32": ("float", "float32", [4], "values"),
        "f64": ("bytes", "float64", [], "raw"),
        "flag": ("int64", "bool", [], "values"),
        "fixed": ("bytes", "bytes", [], "bytes"),
        "text": ("bytes", "string", [], "text"),
        "seq": ("int64", "int64", None, "values"),
        "wide": ("bytes", "float64", None, "raw"),
        "pair": ("float", "float32", [2], "values"),
        "y": ("int64", "int64", [], "values"),
    }
    assert result.manifest.label_key == "y"
    rows = {int(row["i16"]) + 100: row for row in decoded_records(tmp_path / "out")}
    assert sorted(rows) == list(range(ROWS))
    for index, row in rows.items():
        np.testing.assert_array_equal(row["u8"], data["u8"][index])
        np.testing.assert_array_equal(row["f32"], data["f32"][index])
        assert row["f64"] == data["f64"][index] and row["flag"] == data["flag"][index]
        assert row["fixed"] == data["fixed"][index]  # a NUL inside is kept
        assert row["text"].decode() == f"Zeile {index} ü"
        assert row["seq"].tolist() == (np.arange(index % 4) - 2**40).tolist()
        assert row["wide"].tolist() == [index / 7] * (index % 3)
        assert row["pair"].tolist() == [1.5, 1.5] and row["y"] == index % 4
    table = tmp_path / "table.csv"
    table.write_text("a,y\n1,0\n")
    with pytest.raises(InvalidArgumentError, match="a group applies to HDF5 sources only"):
        tfopt.convert(table, tmp_path / "csv", workers=1, group="train")


def test_images_in_variable_length_uint8_and_class_names(tmp_path):
    src = tmp_path / "images.h5"
    images = [image_bytes(seed, "JPEG" if seed < 3 else "PNG") for seed in range(8)]
    with h5py.File(src, "w") as handle:
        column = handle.create_dataset("image", (8,), dtype=h5py.vlen_dtype(np.uint8))
        for index, image in enumerate(images):
            column[index] = np.frombuffer(image, np.uint8)
        labels = handle.create_dataset("label", (8,), dtype=h5py.string_dtype())
        labels[:] = ["cat", "dog"] * 4
    result = tfopt.convert(src, tmp_path / "out", workers=2, shards=2)
    assert result.manifest.image_key == "image" and result.manifest.label_key == "label"
    assert result.manifest.class_names == ["cat", "dog"]
    assert read_manifest(tmp_path / "out").feature("image").encoding.value == "image"  # mixed
    rows = decoded_records(tmp_path / "out")
    assert sorted(row["image"] for row in rows) == sorted(images)
    assert {row["image"]: int(row["label"]) for row in rows} == {
        image: index % 2 for index, image in enumerate(images)}


def test_datasets_disagreeing_in_length_exit_1_naming_them(tmp_path):
    src = tmp_path / "bad.h5"
    with h5py.File(src, "w") as handle:
        handle["x"] = np.zeros((10, 2))
        handle["y"] = np.zeros(9)
    dst = tmp_path / "out"
    run = run_tfopt(["convert", src, dst, "--label", "y", "-q"], tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        f"tfopt: error: {src}: datasets disagree in their first dimension (/x: 10, /y: 9); "
        "every dataset needs one row per example"]
    assert not dst.exists()


def test_unreadable_files_groups_and_labels_exit_1_with_one_line(tmp_path):
    good = tmp_path / "good.h5"
    with h5py.File(good, "w") as handle:
        handle["x"] = np.arange(200.0)
        handle["y"] = np.arange(200) % 2
    truncated = tmp_path / "cut.h5"
    truncated.write_bytes(good.read_bytes()[:1500])
    fake = tmp_path / "fake.h5"
    fake.write_text("not hdf5 at all\n")
    cases = [([truncated], f"tfopt: error: {truncated}: not a readable HDF5 file"),
             ([fake], f"tfopt: error: {fake}: not a readable HDF5 file"),
             ([good, "--label", "target"],
              f"tfopt: error: label 'target': no such dataset in {good}; it has: x, y"),
             ([good, "--group", "train"], f"tfopt: error: {good}: no group 'train' in it")]
    for args, expected in cases:
        dst = tmp_path / "out"
        run = run_tfopt(["convert", args[0], dst, "--workers", "1", "-q", *args[1:]], tmp_path)
        assert run.returncode == 1, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(expected), run.stderr
        assert not dst.exists()


@pytest.mark.parametrize(("make", "expected"), [
    (lambda group: group.create_dataset("c", data=np.zeros(3, dtype=[("a", "i4"), ("b", "f4")])),
     "[dataset '/c']: has type [('a', '<i4'), ('b', '<f4')]: a compound type"),
    (lambda group: group.create_dataset("c", data=np.array([b"ab", b"cd", b"ef"], "V2")),
     "[dataset '/c']: has type |V2: opaque data"),
    (lambda group: group.create_dataset("c", (3,), dtype=h5py.ref_dtype),
     "[dataset '/c']: has type object: object references"),
    (lambda group: group.create_dataset("c", data=np.zeros(3, np.complex64)),
     "[dataset '/c']: unsupported dtype complex64"),
])
def test_types_that_cannot_be_kept_are_named(tmp_path, make, expected):
    src = tmp_path / "odd.h5"
    with h5py.File(src, "w") as handle:
        make(handle)
        handle["y"] = np.arange(3)
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert str(error.value).startswith(f"{src} {expected}")


def test_nan_labels_refused_or_skipped_and_uint64_beyond_int64(tmp_path):
    src = tmp_path / "nan.h5"
    with h5py.File(src, "w") as handle:
        handle["x"] = np.arange(6, dtype=np.uint64) + np.uint64(2**63 - 3)
        handle["target"] = np.array([0.5, np.nan, 1.5, 2.5, 3.5, np.inf])
    with pytest.raises(SourceError, match=r"row 1: label 'target' is nan; a regression"):
        tfopt.convert(src, tmp_path / "out", workers=1, label="target")
    result = tfopt.convert(src, tmp_path / "out", workers=1, label="target", on_error="skip")
    skipped = [item.path for item in result.manifest.skipped]
    # rows 1 and 5: NaN and inf targets; rows 3 and 4: uint64 values beyond int64
    assert sorted(skipped) == [f"{src} row {row}" for row in (1, 3, 4, 5)]
    assert sorted(float(row["target"]) for row in decoded_records(tmp_path / "out")) == [0.5, 1.5]


def test_chunks_are_read_by_block_and_workers_agree(tmp_path, monkeypatch):
    from tfopt.records.format.example_pb import example_classes
    from tfopt.records.format.framing import read_records
    from tfopt.records.sources import hdf5_arrays

    monkeypatch.setattr(hdf5_arrays, "_BLOCK_BYTES", 1000)  # many blocks for a small file
    src = tmp_path / "chunked.h5"
    with h5py.File(src, "w") as handle:
        handle.create_dataset("v", data=np.arange(500), chunks=(32,), compression="gzip")
        handle["y"] = np.arange(500) % 5
    one = tfopt.convert(src, tmp_path / "one", workers=1, shards=5, seed=4)
    assert one.manifest.source["kind"] == "hdf5"
    assert sorted(int(row["v"]) for row in decoded_records(tmp_path / "one")) == list(range(500))
    # blocks of whole chunks: 1000 bytes of two int64 datasets is 62 rows, so two chunks
    for shard in one.manifest.shards:
        values = [example_classes().Example.FromString(record).features.feature["v"]
                  .int64_list.value[0] for record in read_records(tmp_path / "one" / shard.file)]
        blocks = [value // 64 for value in values]
        runs = [block for position, block in enumerate(blocks)
                if position == 0 or block != blocks[position - 1]]
        assert len(runs) == len(set(runs)) <= 100 // 64 + 2
    two = tfopt.convert(src, tmp_path / "two", workers=2, shards=5, seed=4)
    assert [s.sha256 for s in two.manifest.shards] == [s.sha256 for s in one.manifest.shards]


def test_without_h5py_the_error_names_the_extra(tmp_path):
    src = tmp_path / "d.h5"
    with h5py.File(src, "w") as handle:
        handle["v"] = np.arange(3)
    run = run_tfopt(["convert", src, tmp_path / "out", "-q"], tmp_path,
                    without_package_env(tmp_path, "h5py"))
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"tfopt: error: {src}: reading HDF5 needs the h5py package")
    assert lines[0].endswith("pip install 'tfopt[hdf5]'")
    assert not (tmp_path / "out").exists()


def _outside_sources(folder):
    """name -> (HDF5 file whose /x is read from elsewhere, what the error says, --group)."""
    other = folder / "other.h5"
    with h5py.File(other, "w") as handle:
        handle["x"] = np.arange(10.0)
        handle["g/x"] = np.arange(10.0)
        handle["g/y"] = np.arange(10) % 2
    secret = folder / "secret.bin"
    secret.write_bytes(b"not yours " * 8)
    made = {}

    def write(name, fill, expected, group=None):
        path = folder / f"{name}.h5"
        with h5py.File(path, "w") as handle:
            handle["y"] = np.arange(10) % 2
            fill(handle)
        made[name] = (path, expected, group)

    write("external_storage", lambda h: h.create_dataset(
        "x", (10, 8), dtype="u1", external=[(str(secret), 0, 80)]),
        f"[/x]: has external raw storage: its bytes are read from '{secret}'")
    write("external_link", lambda h: h.__setitem__("x", h5py.ExternalLink(str(other), "/x")),
          f"[/x]: is an external link to '/x' in '{other}'")

    def virtual(source):
        def fill(handle):
            layout = h5py.VirtualLayout(shape=(10,), dtype="f8")
            layout[:] = h5py.VirtualSource(str(source), "x", shape=(10,))
            handle.create_virtual_dataset("x", layout, fillvalue=0)
        return fill

    write("virtual", virtual(other), f"[/x]: is a virtual dataset, whose rows are read from '{other}'")
    # HDF5 reads a missing source file's rows as the fill value, without a word
    missing = folder / "gone.h5"
    write("virtual_missing_source", virtual(missing),
          f"[/x]: is a virtual dataset, whose rows are read from '{missing}'")
    write("group_behind_external_link",
          lambda h: h.__setitem__("linked", h5py.ExternalLink(str(other), "/g")),
          f"[group 'linked']: is an external link to '/g' in '{other}'", group="linked")
    return made


def test_nothing_outside_the_source_file_is_read(tmp_path):
    for name, (src, expected, group) in _outside_sources(tmp_path).items():
        dst = tmp_path / f"out-{name}"
        with pytest.raises(SourceError) as error:
            tfopt.convert(src, dst, workers=1, label="y", group=group)
        assert str(error.value).startswith(f"{src} {expected}: tfopt reads only the source "
                                           "file"), name
        assert not dst.exists(), name


def test_soft_links_are_followed_inside_the_file_and_a_loop_is_one_line(tmp_path):
    inside = tmp_path / "inside.h5"
    with h5py.File(inside, "w") as handle:
        handle["data/x"] = np.arange(10.0)
        handle["x"] = h5py.SoftLink("/data/x")
        handle["y"] = np.arange(10) % 2
    result = tfopt.convert(inside, tmp_path / "out", workers=1, label="y")
    assert result.manifest.num_records == 10
    looping = tmp_path / "loop.h5"
    with h5py.File(looping, "w") as handle:
        handle["y"] = np.arange(10) % 2
        handle["a"] = h5py.SoftLink("/b")
        handle["b"] = h5py.SoftLink("/a")
    dst = tmp_path / "out-loop"
    run = run_tfopt(["convert", looping, dst, "--label", "y", "--workers", "1", "-q"], tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        f"tfopt: error: {looping} [/a]: is a soft link to '/b' that loops (Special link "
        "traversal failed (too many links))"]
    assert not dst.exists()


def test_a_shape_of_more_rows_than_memory_can_plan_is_one_line(tmp_path):
    # unwritten chunks cost nothing on disk: 10**12 rows in a few KB
    src = tmp_path / "huge.h5"
    with h5py.File(src, "w") as handle:
        handle.create_dataset("x", (10**12,), dtype="f4", chunks=(1000,))
    with pytest.raises(SourceError, match=r"1,000,000,000,000 rows: planning a conversion "
                       r"takes about 128 bytes of memory per row"):
        tfopt.convert(src, tmp_path / "out", workers=1)
