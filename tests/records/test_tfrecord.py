"""TFRecord files: which files a path names, told by name or header (records/format/tfrecord.py)."""

from __future__ import annotations

import gzip

import pytest
from conftest import write_examples

import tfopt
from tfopt.errors import DatasetError
from tfopt.records.format.tfrecord import (
    count_records,
    detect_compression,
    is_tfrecord_file,
    resolve_files,
)


@pytest.mark.parametrize("command", [resolve_files, tfopt.inspect, tfopt.verify])
def test_a_folder_without_manifest_or_tfrecord_files_is_an_error(tmp_path, command):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "README.txt").write_text("hello\n")
    with pytest.raises(DatasetError, match="no TFRecord files in this folder.*README.txt"):
        command(folder)


def test_tfrecord_files_are_told_by_name_or_by_their_first_record_header(tmp_path, tf):
    write_examples(tmp_path / "noext", [{"a": [1]}], tf)
    write_examples(tmp_path / "gz", [{"a": [1]}], tf, "GZIP")
    (tmp_path / "empty").write_bytes(b"")  # an empty TFRecord file holds no records
    (tmp_path / "short").write_bytes(b"hello\n")
    (tmp_path / "text").write_text("0123456789abcdef, plain text")
    (tmp_path / "badgz").write_bytes(gzip.compress(b"plain text inside a gzip stream"))
    (tmp_path / "cut.tfrecord").write_bytes(b"xx")  # named as TFRecord: read, and reported
    assert [is_tfrecord_file(tmp_path / name) for name in
            ("noext", "gz", "empty", "short", "text", "badgz", "cut.tfrecord")] == \
        [True, True, True, False, False, False, True]


def test_a_folder_without_manifest_resolves_to_its_tfrecord_files_and_names_the_others(
        tmp_path, tf):
    write_examples(tmp_path / "b.tfrecord", [{"a": [1]}] * 3, tf)
    write_examples(tmp_path / "a", [{"a": [1]}] * 2, tf, "GZIP")  # told by its header
    (tmp_path / "README.txt").write_text("hello\n")
    files, manifest, notes = resolve_files(tmp_path)
    assert [file.name for file in files] == ["a", "b.tfrecord"] and manifest is None
    assert any("README.txt" in note and "not TFRecord files" in note for note in notes)
    with pytest.raises(DatasetError, match="mixed compression"):
        detect_compression(files, None)
    assert detect_compression(files[:1], None) == "gzip"
    assert [count_records(file, detect_compression([file], None)) for file in files] == [2, 3]
