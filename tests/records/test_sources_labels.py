"""Labels of NumPy and CSV sources (records/sources/labels.py): class names become indices,
floats are regression targets the pipeline yields, bad labels are named."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import feature_values, pipeline_columns, read_examples

import tfopt
from tfopt.errors import InvalidArgumentError, SourceError
from tfopt.records.manifest import read_manifest


def test_string_labels_become_class_indices(tmp_path):
    src = tmp_path / "data.npz"
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    y = np.asarray(["dog", "cat", "dog", "emu", "cat", "dog"])
    np.savez(src, x=x, y=y)
    result = tfopt.convert(src, tmp_path / "out", workers=1)
    assert result.manifest.label_key == "y"
    assert result.manifest.class_names == ["cat", "dog", "emu"]
    pairs = {tuple(feature_values(e, "x")): feature_values(e, "y")[0]
             for e in read_examples(tmp_path / "out")}
    for row, name in zip(x, y, strict=True):
        assert result.manifest.class_names[pairs[tuple(row)]] == name


def test_label_argument_must_name_an_array(tmp_path):
    src = tmp_path / "data.npz"
    np.savez(src, x=np.zeros((3, 2)), target_id=np.arange(3))
    # the message reads right from the API and the CLI alike: no flag spelling in it
    with pytest.raises(InvalidArgumentError, match="^label 'tgt': no such array.*it has: x, target_id"):
        tfopt.convert(src, tmp_path / "out", workers=1, label="tgt")
    result = tfopt.convert(src, tmp_path / "out", workers=1, label="target_id")
    assert result.manifest.label_key == "target_id"


def test_bytes_label_that_is_not_utf8_is_named(tmp_path):
    src = tmp_path / "data.npz"
    np.savez(src, x=np.arange(3.0), y=np.asarray([b"a", b"\xff", b"b"]))
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1)
    message = str(error.value)
    assert f"{src} [key 'y']" in message and "row 1" in message and "not UTF-8" in message
    ok = tmp_path / "ok.npz"  # UTF-8 bytes are class names as before
    np.savez(ok, x=np.arange(3.0), y=np.asarray(["é".encode(), b"b", b"b"]))
    assert tfopt.convert(ok, tmp_path / "out", workers=1).manifest.class_names == ["b", "é"]


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
        features, labels = pipeline_columns(out, split=split)
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
    with pytest.raises(SourceError, match=r"\[key 'target'\]: label 'target' is nan at row 3"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    result = tfopt.convert(src, tmp_path / "out", workers=1, on_error="skip")
    assert result.num_records == 5 and len(result.manifest.skipped) == 1
    table = tmp_path / "table.csv"
    table.write_text("x,target\n1,0.5\n2,inf\n3,1.5\n")
    with pytest.raises(SourceError, match="line 3: label 'target' is inf"):
        tfopt.convert(table, tmp_path / "out2", workers=1)


def test_negative_class_labels_are_kept_with_a_warning_naming_one(tmp_path, caplog):
    src = tmp_path / "neg.npz"
    np.savez(src, x=np.arange(6.0), y=np.array([0, 1, -1, 2, -1, 1]))
    with caplog.at_level("WARNING", logger="tfopt"):
        result = tfopt.convert(src, tmp_path / "out", workers=1)
    assert result.num_records == 6
    assert "label 'y' holds 2 negative value(s), e.g. -1 at row 2" in caplog.text
