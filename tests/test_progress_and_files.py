"""The progress bar's arithmetic (fake clock) and durable file writing."""

from __future__ import annotations

import io

import pytest

from tfopt._files import atomic_path, atomic_write_bytes, is_temp_file
from tfopt._progress import Progress


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_progress_line_shows_count_rate_and_eta():
    clock = FakeClock()
    stream = io.StringIO()
    bar = Progress(1000, "convert", unit="rec", enabled=True, stream=stream, clock=clock)
    clock.now += 10
    bar.update(250)
    line = bar.line()
    assert "250/1000" in line and "25%" in line
    assert "25.0 rec/s" in line
    assert "ETA 0:30" in line and "elapsed 0:10" in line
    bar.close()
    assert stream.getvalue().endswith("\n")


def test_progress_is_silent_when_disabled_or_not_a_terminal():
    stream = io.StringIO()  # not a tty
    with Progress(10, stream=stream) as bar:
        bar.update(10)
    assert stream.getvalue() == ""


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "file.bin"
    atomic_write_bytes(target, b"old")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half-writ")
            raise RuntimeError("crash while writing")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert is_temp_file(tmp_path / ".file.bin.tmp-42") and not is_temp_file(target)


def test_atomic_path_without_durability_renames_whole_files_and_syncs_nothing(tmp_path,
                                                                              monkeypatch):
    import tfopt._files as files

    def no_sync(path):
        raise AssertionError(f"fsync of {path}")

    monkeypatch.setattr(files, "fsync_file", no_sync)
    monkeypatch.setattr(files, "fsync_dir", no_sync)
    target = tmp_path / "image.jpg"
    with pytest.raises(RuntimeError):
        with atomic_path(target, durable=False) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("crash while writing")
    assert list(tmp_path.iterdir()) == []
    with atomic_path(target, durable=False) as tmp:
        tmp.write_bytes(b"whole")
    assert [p.name for p in tmp_path.iterdir()] == ["image.jpg"]
    assert target.read_bytes() == b"whole"
