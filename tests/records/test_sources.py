"""Source kinds told from the path, and the messages when none fits (records/sources/)."""

from __future__ import annotations

import pytest

import tfopt
from tfopt.errors import InvalidArgumentError, SourceError


def test_source_messages_name_what_was_looked_for(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "readme.txt").write_text("hi")
    with pytest.raises(SourceError) as error:
        tfopt.convert(folder, tmp_path / "out", workers=1)
    assert ".npy" in str(error.value) and "SRC/<class>/<image>" in str(error.value)
    assert "readme.txt" in str(error.value)
    unknown = tmp_path / "data.feather"
    unknown.write_bytes(b"ARROW1")
    with pytest.raises(SourceError, match=r"\.csv, \.tsv, \.parquet or \.h5 file"):
        tfopt.convert(unknown, tmp_path / "out", workers=1)
    images = tmp_path / "images" / "cat"
    images.mkdir(parents=True)
    with pytest.raises(InvalidArgumentError, match="^label 'kind': the labels of an image"):
        tfopt.convert(images.parent, tmp_path / "out", workers=1, label="kind")
