"""verify on a folder of TFRecord files written elsewhere (no manifest) reads what inspect
reads: its TFRecord files, with the other files named in a note, not reported as corrupt."""

from __future__ import annotations

from conftest import write_examples

import tfopt


def test_a_readme_beside_foreign_shards_is_noted_not_a_bad_shard(tmp_path, tf):
    folder = tmp_path / "foreign"
    folder.mkdir()
    write_examples(folder / "data-a.tfrecord", [{"x": [i]} for i in range(5)], tf)
    write_examples(folder / "blob", [{"x": [i]} for i in range(3)], tf)  # no TFRecord name: taken by its record header
    (folder / "README.txt").write_text("shards of the x dataset\n")
    (folder / "tiny").write_bytes(b"hello!")  # 6 bytes: once listed as '0 records'
    result = tfopt.verify(folder)
    assert result.ok, result.problems
    assert sorted((check.file.split("/")[-1], check.num_records)
                  for check in result.checked) == [("blob", 3), ("data-a.tfrecord", 5)]
    note = next(note for note in result.notes if note.startswith("not read"))
    assert "README.txt" in note and "tiny" in note
    assert sorted(info.path.split("/")[-1] for info in tfopt.inspect(folder).files) == [
        "blob", "data-a.tfrecord"]

