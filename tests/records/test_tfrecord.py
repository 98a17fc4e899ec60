"""TFRecord files: which files a path names (records/format/layout.py), told by name or header
(records/format/tfrecord.py)."""

from __future__ import annotations

import gzip

import pytest
from conftest import write_examples

import tfopt
from tfopt.errors import DatasetError
from tfopt.records.format.layout import Layout, resolve_dataset
from tfopt.records.format.tfrecord import count_records, is_gzip, is_tfrecord_file


@pytest.mark.parametrize("command", [resolve_dataset, tfopt.inspect, tfopt.verify])
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
    write_examples(tmp_path / "a", [{"a": [1]}] * 2, tf)  # told by its header
    (tmp_path / "README.txt").write_text("hello\n")
    dataset = resolve_dataset(tmp_path)
    assert [file.name for file in dataset.files] == ["a", "b.tfrecord"]
    assert (dataset.layout, dataset.splits, dataset.manifest) == (Layout.UNSPLIT, {}, None)
    assert any("README.txt" in note and "not TFRecord files" in note for note in dataset.notes)
    assert [count_records(file, dataset.compression) for file in dataset.files] == [2, 3]


def test_gzip_and_plain_files_in_one_folder_are_refused_naming_the_folder(tmp_path, tf):
    write_examples(tmp_path / "b.tfrecord", [{"a": [1]}] * 3, tf)
    write_examples(tmp_path / "a", [{"a": [1]}] * 2, tf, "GZIP")
    with pytest.raises(DatasetError, match=f"^{tmp_path}: mixed compression: .*GZIP"):
        resolve_dataset(tmp_path)
    assert is_gzip(tmp_path / "a") and resolve_dataset(str(tmp_path / "a")).compression == "gzip"
    assert count_records(tmp_path / "a", "gzip") == 2
