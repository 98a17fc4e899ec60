"""The schema sampled from the first records of TFRecord files (records/format/schema_sample.py)."""

from __future__ import annotations

from conftest import write_examples

from tfopt.records.format.schema_sample import sample_schema


def test_sample_schema_reads_the_first_records_of_every_file(tmp_path, tf):
    files = [write_examples(tmp_path / f"s-{k}.tfrecord",
                   [{"x": [1.0], **({"only_here": [k]} if k in (3, 6) else {})}
                    for _ in range(30)], tf) for k in range(7)]
    sample = sample_schema(files, None, records=70)
    assert (sample.files, sample.per_file, sample.records) == (7, 10, 70)
    seen = {f.name: f for f in sample.features}
    assert seen["only_here"].present_in == 20 and seen["only_here"].optional
    # more files than max_files: that many spread evenly, the first and the last included
    spread = sample_schema(files, None, records=3, max_files=3)
    assert (spread.files, spread.records) == (3, 3)  # files 0, 3 and 6
    assert {f.name: f.present_in for f in spread.features}["only_here"] == 2
    # large records: fewer per file, to stay near max_bytes
    small = sample_schema(files, None, records=70, max_bytes=200)
    assert small.per_file < 10
