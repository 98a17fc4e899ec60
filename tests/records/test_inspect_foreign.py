"""inspect on TFRecord files not written by tfopt: every record counts for the schema."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import feature_of, write_examples

import tfopt
from tfopt.errors import DatasetError
from tfopt.records.format.schema_sample import sample_schema


def late_changes(i):
    """Past record 64 (the old sample) 'v' goes missing, 'w' grows and 'late' appears."""
    row = {"label": [i % 2], "w": [float(i)] * (1 if i < 90 else 2)}
    if i < 80:
        row["v"] = [float(i)]
    if i >= 90:
        row["late"] = [float(i)]
    return row


def test_the_schema_comes_from_every_record_of_every_file(tmp_path, tf):
    write_examples(tmp_path / "part-0.tfrecord", [late_changes(i) for i in range(100)], tf)
    write_examples(tmp_path / "part-1.tfrecord", [{"label": [i % 2], "w": [1.0], "v": [1.0],
                                         "extra": [1.0]} for i in range(100)], tf)
    result = tfopt.inspect(str(tmp_path / "part-*"))
    assert result.sampled == result.num_records == 200
    by_name = {f.name: f for f in result.features}
    assert (by_name["v"].present_in, by_name["v"].records) == (180, 200)
    assert by_name["v"].optional and not by_name["v"].fixed_length
    assert by_name["late"].present_in == 10 and by_name["extra"].present_in == 100
    assert (by_name["w"].min_length, by_name["w"].max_length) == (1, 2)
    assert by_name["label"].fixed_length and not by_name["label"].optional
    assert result.label_key == "label"
    text = result.describe()
    assert "1 (in 180 of 200 records)" in text and "schema (from 200 records)" in text
    features = {f["name"]: f for f in result.to_json()["features"]}
    # as the pipeline parses them: missing from some records is ragged, not fixed
    assert features["v"]["fixed_length"] is False and features["v"]["optional"] is True
    assert features["label"]["fixed_length"] is True


def test_the_cli_table_shows_a_feature_missing_from_some_records(tmp_path, tf):
    from tfopt.cli import cli

    path = write_examples(tmp_path / "opt.tfrecord",
                 [{"label": [i], **({"opt": [i]} if i % 3 == 0 else {})} for i in range(50)], tf)
    result = CliRunner().invoke(cli, ["inspect", str(path), "-q"])
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if line.startswith("opt "))
    assert "int64" in line and "1 (in 17 of 50 records)" in line
    data = json.loads(CliRunner().invoke(cli, ["inspect", str(path), "-q", "--json"]).output)
    opt = next(f for f in data["features"] if f["name"] == "opt")
    assert (opt["present_in"], opt["records"], opt["fixed_length"]) == (17, 50, False)


def test_a_feature_with_two_types_is_shown_as_mixed_with_both(tmp_path, tf):
    path = write_examples(tmp_path / "conflict.tfrecord",
                 [{"label": [i % 2], "v": [1.0] if i < 10 else [1]} for i in range(20)], tf)
    result = tfopt.inspect(path)
    v = next(f for f in result.features if f.name == "v")
    assert v.kind == "mixed" and v.kinds == ("float", "int64")
    assert "mixed (float, int64)" in result.describe()


def test_a_sequence_example_file_is_refused_naming_the_file(tmp_path, tf):
    path = tmp_path / "seq.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(3):
            frames = tf.train.FeatureList(feature=[feature_of(tf, [1.0, 2.0])] * (i + 1))
            writer.write(tf.train.SequenceExample(
                context=tf.train.Features(feature={"label": feature_of(tf, [i])}),
                feature_lists=tf.train.FeatureLists(feature_list={"frames": frames}),
            ).SerializeToString())
    with pytest.raises(DatasetError) as caught:
        tfopt.inspect(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert "record 0 is not a tf.train.Example" in message and "SequenceExample" in message
    with pytest.raises(DatasetError, match="record 0 is not a tf.train.Example"):
        sample_schema([path], None)


def test_a_folder_without_manifest_reads_only_its_tfrecord_files(tmp_path, tf):
    folder = tmp_path / "foreign"
    folder.mkdir()
    rows = [{"label": [i]} for i in range(5)]
    write_examples(folder / "plain-0.tfrecord", rows, tf)
    write_examples(folder / "part-00000-of-00001", rows, tf)  # shard numbers, no split
    write_examples(folder / "data", rows, tf)  # no telling name, but a TFRecord header
    (folder / "README.txt").write_text("hello\n")  # 6 bytes: was listed as "0 records"
    (folder / "notes.md").write_text("# notes about this data set, long enough for a header")
    result = tfopt.inspect(folder)
    names = sorted(info.path.rsplit("/", 1)[-1] for info in result.files)
    assert names == ["data", "part-00000-of-00001", "plain-0.tfrecord"]
    assert result.num_records == 15
    text = "\n".join(result.notes)
    assert "README.txt" in text and "notes.md" in text and "not TFRecord files" in text
    assert "no manifest.json" in text and "one unsplit dataset" in text


def test_a_glob_of_tfopt_shards_names_the_dataset_whose_manifest_describes_them(tmp_path):
    import numpy as np

    src = tmp_path / "arrays.npz"
    np.savez(src, x=np.ones((12, 2, 3), np.float32), y=np.arange(12) % 2)
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1, shards=2)
    result = tfopt.inspect(str(out / "train-*"))
    assert result.num_records == 12
    assert any(f"tfopt dataset in {out}" in note for note in result.notes)
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "a.tfrecord").write_bytes((out / result.files[0].path.rsplit("/", 1)[-1]).read_bytes())
    assert not any("tfopt dataset" in note for note in tfopt.inspect(loose / "a.tfrecord").notes)


def test_the_build_time_sample_reads_on_past_a_corrupted_file(tmp_path, tf):
    rows = [{"label": [1]}] * 5
    files = [write_examples(tmp_path / "a-0.tfrecord", rows, tf), write_examples(tmp_path / "a-1.tfrecord", rows, tf),
             write_examples(tmp_path / "a-2.tfrecord", [{"label": [1], "extra": [1]}] * 5, tf)]
    data = bytearray(files[1].read_bytes())
    data[20] ^= 0x55  # inside the first record: its CRC fails
    files[1].write_bytes(bytes(data))
    sample = sample_schema(files, None, stop_at_corruption=True)
    assert sample.records == 10 and "extra" in {f.name for f in sample.features}
    with pytest.raises(DatasetError, match="a-1.tfrecord: corrupted"):
        sample_schema(files, None)


def test_raw_arrays_of_a_tfopt_dataset_show_their_numbers(tmp_path):
    import numpy as np

    np.savez(tmp_path / "a.npz", x=np.array([[0.5, 1.25]] * 4),
             px=np.array([[7, 9, 11]] * 4, dtype=np.uint8), label=np.arange(4) % 2)
    tfopt.convert(tmp_path / "a.npz", tmp_path / "out", workers=1)
    result = tfopt.inspect(tmp_path / "out")
    examples = {info.name: info.example for info in result.features}
    assert examples["x"] == "[0.5, 1.25]"  # was b'\x00\x00...'
    assert examples["px"] == "[7, 9, 11]"
    rows = {line.split()[0]: line for line in result.describe().splitlines() if line.strip()}
    assert "float64 (raw bytes)" in rows["x"] and "[0.5, 1.25]" in rows["x"]
    assert "uint8 (raw bytes)" in rows["px"]
