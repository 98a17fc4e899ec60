"""convert keeps NumPy and CSV values exactly, or refuses them with one line naming file and key
or line: dtypes TensorFlow cannot read back, CSV numbers a float type would change, damaged
archives, labels that are not text; float labels are regression targets the pipeline yields."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import feature_values, read_examples

import tfopt
from tfopt.records.manifest import read_manifest


def _pipeline_columns(out, split=None, **kwargs) -> tuple[dict, np.ndarray | None]:
    """Every feature and the label of a split, read through tfopt's own pipeline."""
    features: dict[str, list] = {}
    labels = []
    for element in tfopt.build_pipeline(out, 64, split=split, **kwargs):
        batch, label = element if isinstance(element, tuple) else (element, None)
        for name, value in batch.items():
            features.setdefault(name, []).append(value.numpy())
        if label is not None:
            labels.append(label.numpy())
    joined = {name: np.concatenate(values) for name, values in features.items()}
    return joined, (np.concatenate(labels) if labels else None)


def _specs(out) -> dict:
    return {spec.name: spec for spec in read_manifest(out).features}


# --- NumPy dtypes TensorFlow cannot read back ------------------------------------------------


def test_uint64_within_int64_is_stored_as_int64_and_read_back_exactly(tmp_path):
    src = tmp_path / "data.npz"
    ids = np.asarray([0, 2**63 - 1, 5, 2**40, 7, 9], dtype=np.uint64)
    np.savez(src, ids=ids, order=np.arange(6), y=np.asarray([0, 1, 0, 1, 0, 1], np.uint64))
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1)
    assert _specs(out)["ids"].kind.value == "int64"  # tf.io.decode_raw has no uint64
    features, labels = _pipeline_columns(out)
    by_order = np.argsort(features["order"])
    assert features["ids"][by_order].tolist() == ids.astype(int).tolist()
    assert labels[by_order].tolist() == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize("key", ["ids", "y"])
def test_uint64_beyond_int64_is_refused_naming_key_and_row(tmp_path, key):
    src = tmp_path / "data.npz"
    arrays = {"ids": np.arange(4, dtype=np.uint64), "y": np.arange(4, dtype=np.uint64)}
    arrays[key][2] = 2**64 - 1  # an int64 list would store it as -1
    np.savez(src, **arrays)
    with pytest.raises(tfopt.SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1, label="y")
    message = str(error.value)
    assert f"{src} [key '{key}']" in message and "18446744073709551615 (row 2)" in message
    assert "view(np.int64)" in message and "\n" not in message
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(np.dtype(np.longdouble).itemsize <= 8, reason="long double is float64 here")
def test_long_double_is_refused_with_the_cast_to_make(tmp_path):
    src = tmp_path / "data.npz"
    np.savez(src, x=np.ones(4, dtype=np.longdouble), y=np.arange(4))
    with pytest.raises(tfopt.SourceError, match=r"\[key 'x'\]: dtype float\d+ .*astype\(np.float64\)"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists()


# --- damaged archives and labels that are not text -------------------------------------------


def test_damaged_small_uncompressed_npz_member_is_named(tmp_path):
    src = tmp_path / "data.npz"
    pixels = np.arange(64, dtype=np.uint8).reshape(8, 8)
    np.savez(src, pixels=pixels, y=np.arange(8))
    data = bytearray(src.read_bytes())
    at = data.find(pixels.tobytes())
    data[at + 10] ^= 0xFF  # zipfile reads a member this small whole, checking its CRC-32 then
    src.write_bytes(bytes(data))
    with pytest.raises(tfopt.SourceError, match=r"\[key 'pixels'\]: damaged, cannot be read"):
        tfopt.convert(src, tmp_path / "out", workers=1)


def test_bytes_label_that_is_not_utf8_is_named(tmp_path):
    src = tmp_path / "data.npz"
    np.savez(src, x=np.arange(3.0), y=np.asarray([b"a", b"\xff", b"b"]))
    with pytest.raises(tfopt.SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1)
    message = str(error.value)
    assert f"{src} [key 'y']" in message and "row 1" in message and "not UTF-8" in message
    ok = tmp_path / "ok.npz"  # UTF-8 bytes are class names as before
    np.savez(ok, x=np.arange(3.0), y=np.asarray(["é".encode(), b"b", b"b"]))
    assert tfopt.convert(ok, tmp_path / "out", workers=1).manifest.class_names == ["b", "é"]


# --- CSV numbers: stored exactly, never rounded silently -------------------------------------

FLOATS_CSV = """id,short,precise,count,wide,label
1,0.1,0.75795440294030247,123456789,1e39,0
2,2.5,-1.2345678901234567,,2,1
3,-3.75,3.141592653589793,16777217,-5e-45,0
4,1e-3,100.5,7,0.5,1
"""


def test_csv_float_column_is_float32_only_when_every_value_survives_it(tmp_path):
    src = tmp_path / "table.csv"
    src.write_text(FLOATS_CSV)
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1)
    dtypes = {name: spec.dtype for name, spec in _specs(out).items()}
    assert dtypes == {"id": "int64", "short": "float32", "precise": "float64",
                      "count": "float64", "wide": "float64", "label": "int64"}
    features, _ = _pipeline_columns(out)
    rows = {int(i): n for n, i in enumerate(features["id"])}
    for line in FLOATS_CSV.splitlines()[1:]:
        cells = line.split(",")
        row = rows[int(cells[0])]
        for name, text in zip(("short", "precise", "count", "wide"), cells[1:5], strict=True):
            value = features[name][row]
            if not text:
                assert math.isnan(value)
            elif dtypes[name] == "float32":  # prints back as the text's number
                assert float(str(np.float32(value))) == float(text), (name, text)
            else:
                assert value.dtype == np.float64 and value == float(text), (name, text)


@pytest.mark.parametrize(("cell", "problem"), [
    ("1e400", "1e400, which is beyond float64's range"),
    ("-1e-400", "-1e-400, which is too small for float64"),
    ("9007199254740993", "9007199254740993, which float64, the type of a float column, cannot"),
])
def test_csv_number_float64_would_change_is_refused_naming_line_and_column(
        tmp_path, cell, problem):
    src = tmp_path / "table.csv"
    src.write_text(f"v,label\n1,0\n,1\n{cell},0\n")  # the empty cell makes v a float column
    with pytest.raises(tfopt.SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert f"{src}: line 4: column 'v' holds {problem}" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_csv_numbers_are_plain_ascii_decimal_notation(tmp_path):
    src = tmp_path / "table.csv"
    src.write_text("under,arabic,signed,decimal,special,label\n"
                   "1_000,١٢٣,+5,1.,nan,0\n"
                   "2_0,٤,-0,.5e1,-Infinity,1\n", encoding="utf-8")
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1)
    dtypes = {name: spec.dtype for name, spec in _specs(out).items()}
    assert dtypes == {"under": "string", "arabic": "string", "signed": "int64",
                      "decimal": "float32", "special": "float32", "label": "int64"}
    rows = sorted(read_examples(out), key=lambda e: feature_values(e, "label")[0])
    assert [feature_values(e, "under")[0].decode() for e in rows] == ["1_000", "2_0"]
    assert [feature_values(e, "arabic")[0].decode() for e in rows] == ["١٢٣", "٤"]
    assert [feature_values(e, "signed")[0] for e in rows] == [5, 0]
    assert [feature_values(e, "decimal")[0] for e in rows] == [1.0, 5.0]
    special = [feature_values(e, "special")[0] for e in rows]
    assert math.isnan(special[0]) and special[1] == -math.inf


@pytest.mark.parametrize("labels", [("cat", "", "dog"), ("0", "", "1")])
def test_empty_label_cell_is_refused_naming_its_line_or_skipped(tmp_path, labels):
    src = tmp_path / "table.csv"
    src.write_text("x,label\n" + "".join(f"{i},{label}\n" for i, label in enumerate(labels)))
    with pytest.raises(tfopt.SourceError, match=r"table.csv: line 3: empty label: column 'label'"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    result = tfopt.convert(src, tmp_path / "out", workers=1, on_error="skip")
    assert result.num_records == 2
    assert [item.path for item in result.manifest.skipped] == [f"{src}:3"]
    assert "" not in (result.manifest.class_names or [])


# --- float labels: regression targets --------------------------------------------------------


@pytest.mark.parametrize("layout", ["npz-float32", "npz-float64", "csv"])
def test_float_labels_are_regression_targets_the_pipeline_yields(tmp_path, layout):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 3))
    target = (x @ np.asarray([1.0, -2.0, 0.5]) + 0.123456789012).round(12)
    if layout == "csv":
        src = tmp_path / "table.csv"
        src.write_text("a,b,c,target\n" + "".join(
            f"{float(a)!r},{float(b)!r},{float(c)!r},{float(t)!r}\n"
            for (a, b, c), t in zip(x, target, strict=True)))
    else:
        src = tmp_path / "data.npz"
        dtype = np.float32 if layout == "npz-float32" else np.float64
        np.savez(src, x=x, target=target.astype(dtype))
    out = tmp_path / "out"
    result = tfopt.convert(src, out, workers=1, val_fraction=0.25, seed=3)
    manifest = result.manifest
    assert manifest.label_key == "target" and manifest.class_names is None
    assert manifest.feature("target").dtype == ("float32" if layout == "npz-float32" else "float64")
    # no classes to stratify by: a plain seeded random split, floor(40 * 0.25) records
    assert manifest.splits["validation"].num_records == 10
    again = tfopt.convert(src, tmp_path / "again", workers=1, val_fraction=0.25, seed=3)
    assert [s.sha256 for s in again.manifest.shards] == [s.sha256 for s in manifest.shards]

    expected = {tuple(row): t for row, t in zip(x, target, strict=True)}
    for split in ("train", "validation"):
        features, labels = _pipeline_columns(out, split=split)
        assert labels.dtype.kind == "f" and labels.shape == (manifest.splits[split].num_records,)
        inputs = (features["x"] if layout != "csv" else
                  np.stack([features["a"], features["b"], features["c"]], axis=1))
        for row, label in zip(inputs, labels, strict=True):
            want = expected[tuple(row)]
            assert label == (np.float32(want) if layout == "npz-float32" else want)


def test_model_fit_takes_a_float_label_pipeline(tmp_path):
    keras = pytest.importorskip("keras")
    src = tmp_path / "table.csv"
    src.write_text("a,b,price\n" + "".join(f"{i},{i % 7},{i * 1.25 + 0.3}\n" for i in range(48)))
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1, label="price")
    train = tfopt.build_pipeline(out, 16, training=True, repeat=False,
                                 label_key=read_manifest(out).label_key)
    inputs = {name: keras.Input((), name=name, dtype="float32") for name in ("a", "b")}
    joined = keras.layers.Concatenate()([keras.layers.Reshape((1,))(v) for v in inputs.values()])
    model = keras.Model(inputs, keras.layers.Dense(1)(joined))
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(train, epochs=1, verbose=0)
    assert math.isfinite(history.history["loss"][0])


def test_non_finite_float_label_is_refused_or_skipped(tmp_path):
    src = tmp_path / "data.npz"
    target = np.linspace(0, 1, 6)
    target[3] = np.nan
    np.savez(src, x=np.arange(6.0), target=target)
    with pytest.raises(tfopt.SourceError, match=r"\[key 'target'\]: label 'target' is nan at row 3"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    result = tfopt.convert(src, tmp_path / "out", workers=1, on_error="skip")
    assert result.num_records == 5 and len(result.manifest.skipped) == 1
    table = tmp_path / "table.csv"
    table.write_text("x,target\n1,0.5\n2,inf\n3,1.5\n")
    with pytest.raises(tfopt.SourceError, match="line 3: label 'target' is inf"):
        tfopt.convert(table, tmp_path / "out2", workers=1)


# --- messages that read right from the API and the CLI ---------------------------------------


def test_source_messages_name_what_was_looked_for(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "readme.txt").write_text("hi")
    with pytest.raises(tfopt.SourceError) as error:
        tfopt.convert(folder, tmp_path / "out", workers=1)
    assert ".npy" in str(error.value) and "SRC/<class>/<image>" in str(error.value)
    assert "readme.txt" in str(error.value)
    unknown = tmp_path / "data.parquet"
    unknown.write_bytes(b"PAR1")
    with pytest.raises(tfopt.SourceError, match=r"\.csv or \.tsv"):
        tfopt.convert(unknown, tmp_path / "out", workers=1)
    images = tmp_path / "images" / "cat"
    images.mkdir(parents=True)
    with pytest.raises(tfopt.InvalidArgumentError, match="^label 'kind': the labels of an image"):
        tfopt.convert(images.parent, tmp_path / "out", workers=1, label="kind")


def test_negative_class_labels_are_kept_with_a_warning_naming_one(tmp_path, caplog):
    src = tmp_path / "neg.npz"
    np.savez(src, x=np.arange(6.0), y=np.array([0, 1, -1, 2, -1, 1]))
    with caplog.at_level("WARNING", logger="tfopt"):
        result = tfopt.convert(src, tmp_path / "out", workers=1)
    assert result.num_records == 6
    assert "label 'y' holds 2 negative value(s), e.g. -1 at row 2" in caplog.text
