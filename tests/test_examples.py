"""The examples run as their docstrings say (real processes, small data)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.slow
def test_multi_worker_example_under_tfopt_launch_ends_with_the_same_weights(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "tfopt", "launch", "-n", "2", "--", sys.executable,
         str(EXAMPLES / "multi_worker.py"), "--work", str(tmp_path), "--epochs", "2",
         "--demo-images", "800"],
        capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    finished = dict(re.findall(r"\[worker (\d)\] done: 2 replica\(s\).*weights crc32 (\w+)",
                               output))
    assert sorted(finished) == ["0", "1"], output[-4000:]
    assert finished["0"] == finished["1"]  # synchronous training: the same weights everywhere
    # backups: the chief's folder holds the best model; the backup itself is gone after a
    # normal end
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["best.json",
                                                                            "best.keras"]
