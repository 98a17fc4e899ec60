"""The machine's limits met by real ``tfopt`` processes: a file-size limit (``ulimit -f``) is one
``tfopt: error:`` line naming the limit, with nothing left at the destination, never a
traceback."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest


def limited(argv, cwd, file_size: int):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    return subprocess.run([sys.executable, "-m", "tfopt", *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=300, preexec_fn=limit)


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits")
    done = subprocess.run([sys.executable, "-m", "tfopt", "demo-data", str(root / "images"),
                           "--count", "20", "--classes", "2", "-q"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return root / "images"


@pytest.mark.parametrize("command", ["convert", "demo-data"])
def test_a_file_size_limit_is_one_line_and_nothing_is_left(tmp_path, images, command):
    dst = tmp_path / "out"
    argv = (["convert", str(images), str(dst), "-q"] if command == "convert"
            else ["demo-data", str(dst), "--count", "40", "--classes", "2", "-q"])
    done = limited(argv, tmp_path, 20 * 1024)  # 20 KiB: an image or a shard is larger
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("tfopt: error:")]
    assert len(lines) == 1 and "ulimit -f" in lines[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert not dst.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary folder left either
