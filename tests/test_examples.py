"""The examples run as their docstrings say (real processes, small data)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_multi_worker_example_imports_no_tensorflow_at_its_top():
    # make_demo_data's and convert's spawned processes import the script again (as
    # __mp_main__): each would load TensorFlow for nothing, and print its start-up lines
    code = ("import runpy, sys; runpy.run_path(sys.argv[1], run_name='__mp_main__'); "
            "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules")
    subprocess.run([sys.executable, "-c", code, str(EXAMPLES / "multi_worker.py")], check=True,
                   timeout=120)


# alone: TensorFlow's coordination service declares a worker dead when its heartbeats stop for
# 10 s; beside the rest of the suite on 2 cores, worker 0 once went that long unanswered (CI,
# 2026-12-03) and the run failed for a CPU starved by other tests
@pytest.mark.slow
@pytest.mark.alone
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
    # the validation pipeline (one shard, DATA-sharded) tells Keras its length: each
    # evaluation takes exactly its steps instead of running the iterator dry
    assert "ran out of data" not in output
    # TensorFlow's C++ start-up INFO lines are held back (tfopt launch)
    assert "absl::InitializeLog()" not in output and "port.cc" not in output, output[:4000]
    assert not re.search(r"^\[worker \d\] I\d{4} ", output, re.MULTILINE), output[:4000]
    # backups: the chief's folder holds the best model; the backup itself is gone after a
    # normal end
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["best.json",
                                                                            "best.keras"]
