"""CSV sources (records/sources/csv_tables.py): column types inferred from every cell, rows
that round trip, and numbers a float type would change refused with their line and column."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from conftest import feature_values, manifest_specs, pipeline_columns, read_examples

import tfopt
from tfopt.errors import SourceError
from tfopt.records.manifest import read_manifest
from tfopt.records.sources import SourceKind, open_reader, scan_source

CSV_TEXT = """id,height,comment,species
1,1.5,"plain",setosa
2,,"has, a comma",virginica
3,2.25,"two
lines",setosa
4,3,"",versicolor
5,0.5,x,virginica
"""


def test_csv_types_are_inferred_and_rows_round_trip(tmp_path):
    src = tmp_path / "table.csv"
    src.write_text(CSV_TEXT)
    result = tfopt.convert(src, tmp_path / "out", workers=1, label="species", shards=2)
    manifest = result.manifest
    kinds = {spec.name: spec.kind.value for spec in manifest.features}
    assert kinds == {"id": "int64", "height": "float", "comment": "bytes", "species": "int64"}
    assert manifest.class_names == ["setosa", "versicolor", "virginica"]
    rows = {feature_values(e, "id")[0]: e for e in read_examples(tmp_path / "out")}
    assert sorted(rows) == [1, 2, 3, 4, 5]
    assert math.isnan(feature_values(rows[2], "height")[0])  # empty cell in a float column
    assert feature_values(rows[3], "height") == [2.25]
    assert feature_values(rows[2], "comment") == [b"has, a comma"]
    assert feature_values(rows[3], "comment") == [b"two\nlines"]  # quoted line break
    assert manifest.class_names[feature_values(rows[4], "species")[0]] == "versicolor"


def test_ragged_csv_row_is_named_with_its_line(tmp_path):
    src = tmp_path / "table.csv"
    src.write_text("a,b,c\n1,2,3\n4,5\n6,7,8\n")
    with pytest.raises(SourceError) as error:
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert str(src) in str(error.value)
    assert "line 3 has 2 fields; the header has 3" in str(error.value)
    assert not (tmp_path / "out").exists()
    result = tfopt.convert(src, tmp_path / "out", workers=1, on_error="skip")
    assert result.num_records == 2
    assert [item.path for item in read_manifest(tmp_path / "out").skipped] == [f"{src}:3"]


def test_csv_without_rows_or_header(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(SourceError, match="needs a header row"):
        tfopt.convert(empty, tmp_path / "out", workers=1)
    header_only = tmp_path / "header.csv"
    header_only.write_text("a,b\n")
    with pytest.raises(SourceError, match="no data rows"):
        tfopt.convert(header_only, tmp_path / "out", workers=1)


def test_csv_with_many_rows_in_parallel_matches_one_process(tmp_path):
    src = tmp_path / "big.csv"
    lines = ["x,y,label"] + [f"{i},{i * 0.5},{i % 3}" for i in range(3000)]
    src.write_text("\n".join(lines) + "\n")
    one = tfopt.convert(src, tmp_path / "one", workers=1, shards=4)
    two = tfopt.convert(src, tmp_path / "two", workers=2, shards=4)
    assert [s.sha256 for s in one.manifest.shards] == [s.sha256 for s in two.manifest.shards]
    xs = sorted(feature_values(e, "x")[0] for e in read_examples(tmp_path / "two"))
    assert xs == list(range(3000))


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
    dtypes = {name: spec.dtype for name, spec in manifest_specs(out).items()}
    assert dtypes == {"id": "int64", "short": "float32", "precise": "float64",
                      "count": "float64", "wide": "float64", "label": "int64"}
    features, _ = pipeline_columns(out)
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
    with pytest.raises(SourceError) as error:
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
    dtypes = {name: spec.dtype for name, spec in manifest_specs(out).items()}
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
    with pytest.raises(SourceError, match=r"table.csv: line 3: empty label: column 'label'"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    result = tfopt.convert(src, tmp_path / "out", workers=1, on_error="skip")
    assert result.num_records == 2
    assert [item.path for item in result.manifest.skipped] == [f"{src}:3"]
    assert "" not in (result.manifest.class_names or [])


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_row_rewritten_in_place_after_the_scan_is_refused_not_read(tmp_path, on_error):
    # the same bytes count and the time put back: only the row's own bytes tell
    src = tmp_path / "table.csv"
    src.write_text(CSV_TEXT)
    scanned = scan_source(src, SourceKind.CSV, label="species", skip_bad=on_error == "skip")
    read = open_reader(scanned.kind, scanned.reader_config, scanned.items)
    assert read(scanned.items[0])["id"] == 1  # unchanged: read as scanned
    status = src.stat()
    src.write_text(CSV_TEXT.replace("5,0.5,x", "5,0.7,x"))
    os.utime(src, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert read(scanned.items[0])["id"] == 1  # a row that did not change still reads
    with pytest.raises(SourceError, match="line 7 is no longer the row the scan read"):
        read(scanned.items[-1])
    src.write_text(CSV_TEXT[:40])  # cut short: the row is gone
    with pytest.raises(SourceError, match="the source changed while it was converted"):
        read(scanned.items[-1])
