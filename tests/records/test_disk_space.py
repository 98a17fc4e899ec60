"""convert on a disk that is too small (records/disk_space.py): refused up front for images, named (not a worker's
traceback) when it fills mid-run, with the finished shards kept for --resume."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tfopt
from tfopt.errors import DiskFullError
from tfopt.records import disk_space
from tfopt.records.convert import pool
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME


def _source_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def test_an_image_dataset_that_cannot_fit_is_refused_before_anything_is_written(
        image_folder, tmp_path, monkeypatch):
    needed = _source_bytes(image_folder)
    monkeypatch.setattr(disk_space, "free_bytes", lambda folder: needed // 2)
    out = tmp_path / "new" / "out"
    with pytest.raises(DiskFullError, match=r"out: the dataset needs about .* free; "):
        tfopt.convert(image_folder, out, workers=1, shards=2)
    assert not out.exists()
    # --max-size may shrink the images below the free space: left to the run itself
    monkeypatch.setattr(disk_space, "free_bytes", lambda folder: needed * 2)
    tfopt.convert(image_folder, out, workers=1, shards=2)
    assert tfopt.verify(out).ok


def test_a_disk_that_fills_mid_run_keeps_the_finished_shards_for_resume(
        image_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real = pool.write_shard
    written = []

    def write_until_full(task, folder, **kwargs):
        if written:
            (Path(folder) / f".{task.file}.tmp-1").write_bytes(b"half")  # as a cut-off write
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(task.file)
        return real(task, folder, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(pool, "write_shard", write_until_full)
        with pytest.raises(DiskFullError,
                           match=r"out: no space left on device after 1 of 3 shards; .*--resume"):
            tfopt.convert(image_folder, out, workers=1, shards=3)
    assert sorted(path.name for path in out.iterdir()) == sorted([JOURNAL_NAME, written[0]])
    result = tfopt.convert(image_folder, out, workers=1, shards=3, resume=True)
    assert result.resumed_shards == 1 and (out / MANIFEST_NAME).exists()
    assert tfopt.verify(out).ok


def _tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


@pytest.mark.skipif(sys.platform != "linux", reason="a small tmpfs")
def test_a_real_full_disk_through_the_cli(tmp_path):
    small = tmp_path / "small"
    if not _tmpfs(small, "1m"):
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        src = tmp_path / "images"
        tfopt.make_demo_data(src, count=100, classes=3, min_size=200, max_size=260, workers=1)
        assert _source_bytes(src) > 1_500_000, "the demo images must not fit in 1 MB"
        command = [sys.executable, "-m", "tfopt", "convert", str(src), str(small / "out"),
                   "--shards", "6", "--workers", "2", "-q"]
        # up front: the images alone are larger than the disk
        refused = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines()[-1].startswith(
            f"tfopt: error: {small / 'out'}: the dataset needs about ")
        assert list(small.iterdir()) == []
        # with --max-size the check is left to the run (downscaled images may fit); these
        # barely shrink, and fill the disk in the middle of the run
        full = subprocess.run([*command, "--max-size", "250"], capture_output=True, text=True,
                              timeout=300)
        assert full.returncode == 1 and "Traceback" not in full.stderr, full.stderr
        assert "no space left on device after" in full.stderr
        assert not any(path.name.startswith(".") and path.name != JOURNAL_NAME
                       for path in (small / "out").iterdir())
    finally:
        subprocess.run(["umount", str(small)], check=False)
