"""records/convert/source_watch.py: a source that changes under its conversion is told, a
rewrite in place of a table or array file that keeps the size and puts the modification time
back included."""

from __future__ import annotations

import os

import pytest

from tfopt.errors import SourceError
from tfopt.records.convert.source_watch import SourceSnapshot


def _rewrite_in_place(path, position: int) -> None:
    """One byte changed, the size kept and the modification time put back."""
    status = path.stat()
    data = bytearray(path.read_bytes())
    data[position] ^= 0x01
    with open(path, "r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (status.st_size, status.st_mtime_ns)


@pytest.fixture
def large_file(tmp_path):
    path = tmp_path / "table.csv"
    path.write_bytes(b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * 7) for i in range(400_000)))
    assert path.stat().st_size > 16 * (64 << 10)  # sampled, not read whole
    return path


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_rewrite_that_keeps_size_and_time_is_caught_in_the_sampled_blocks(large_file, where):
    snapshot = SourceSnapshot(large_file, sampled=True)
    assert snapshot.change() is None
    _rewrite_in_place(large_file, 5 if where == "first" else large_file.stat().st_size - 3)
    assert "its bytes differ, though its size and modification time do not" in snapshot.change()
    with pytest.raises(SourceError, match="the source changed while it was converted"):
        snapshot.check()


def test_each_file_of_a_folder_is_sampled_and_a_deleted_one_told(tmp_path):
    folder = tmp_path / "arrays"  # .npy files, or Parquet parts
    folder.mkdir()
    for index in range(3):
        (folder / f"{index}.npy").write_bytes(bytes([index]) * 3_000_000)
    snapshot = SourceSnapshot(folder, sampled=True)
    _rewrite_in_place(folder / "1.npy", 2_999_990)  # in its last block
    assert snapshot.change() == (f"{folder / '1.npy'} changed (its bytes differ, though its "
                                 "size and modification time do not: it was written to, and "
                                 "its time put back)")
    (folder / "1.npy").unlink()
    assert snapshot.change() == f"{folder / '1.npy'} was deleted"


def test_an_image_folder_is_watched_by_stat_alone(tmp_path):
    # each image is read whole at one moment: no record mixes two versions of it
    folder = tmp_path / "images" / "cat"
    folder.mkdir(parents=True)
    (folder / "1.jpg").write_bytes(b"x" * 100)
    snapshot = SourceSnapshot(tmp_path / "images", sampled=False)
    _rewrite_in_place(folder / "1.jpg", 50)
    assert snapshot.change() is None
    (folder / "1.jpg").write_bytes(b"x" * 101)
    assert snapshot.change() == f"{folder / '1.jpg'} changed (its size changed)"


def test_a_named_pipe_in_the_source_is_not_opened(tmp_path):
    folder = tmp_path / "arrays"
    folder.mkdir()
    (folder / "x.npy").write_bytes(b"x" * 100)
    os.mkfifo(folder / "pipe.npy")  # open() on it without O_NONBLOCK would wait for a writer
    snapshot = SourceSnapshot(folder, sampled=True)
    assert snapshot.change() is None
