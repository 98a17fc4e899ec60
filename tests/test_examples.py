"""The examples run as their docstrings say (real processes, small data)."""

from __future__ import annotations

import os
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


# beside the rest of the suite on 2 cores a worker can go 10 s without a heartbeat answered
# (CI, 2026-12-03), which ends a job under TensorFlow's own coordination service; under tfopt
# launch its workers wait 60 s (tfopt.distribute.cluster.LAUNCHED_ENV)
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


def _run_example(name, *args, timeout=600):
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    return done.stdout


@pytest.mark.slow
def test_the_run_example_trains_on_demo_data_and_a_rerun_resumes_its_finished_run(tmp_path):
    out = _run_example("train_image_classifier.py", "--workdir", tmp_path, "--epochs", "1",
                       "--demo-images", "120")
    assert "tfopt.Run on" in out and "last epoch:" in out and "val_accuracy" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best.json", "best.keras", "history.csv", "images", "shards"]
    # the same command again: the shards are reused, not converted a second time
    again = _run_example("train_image_classifier.py", "--workdir", tmp_path, "--epochs", "1")
    assert "last epoch:" in again


@pytest.mark.slow
def test_the_convert_and_pipeline_examples_run_on_small_data(tmp_path):
    from tests.conftest import make_image_folder

    photos = make_image_folder(tmp_path / "photos", per_class=8)
    out = _run_example("convert_images.py", photos, tmp_path / "shards")
    assert (tmp_path / "shards" / "manifest.json").exists(), out
    out = _run_example("train_with_pipeline.py", tmp_path / "shards")
    assert out.strip(), out


def _run_in(tmp_path: Path, name: str, *arguments: str) -> subprocess.CompletedProcess:
    """Run an example as a user would, its temporary folder (tempfile.mkdtemp) in tmp_path."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, str(EXAMPLES / name), *arguments],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    return done


@pytest.mark.slow
def test_the_convert_images_example_converts_inspects_and_verifies(tmp_path):
    done = _run_in(tmp_path, "convert_images.py", "--demo-images", "40")
    lines = done.stdout.splitlines()
    assert re.match(r"40 records in [\d.]+ s \(\d+ records/s\)$", lines[0]), done.stdout
    assert "splits: train 36 in 1 shards, validation 4 in 1 shards" in lines, done.stdout
    assert lines[-1] == "verified", done.stdout
    (workspace,) = tmp_path.glob("tfopt-example-*")  # the demo folder and its shards
    assert sorted(p.name for p in workspace.iterdir()) == ["photos", "shards"]


@pytest.mark.slow
def test_the_train_with_pipeline_example_trains_and_evaluates_on_the_validation_split(tmp_path):
    # 50 demo images: one task of demo-data, drawn in this process; 5 of them for validation
    done = _run_in(tmp_path, "train_with_pipeline.py", "--demo-images", "50", "--epochs", "1")
    assert "cache        final (memory)" in done.stdout, done.stdout  # the pipeline's choices
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"validation accuracy after 1 epoch\(s\): [01]\.\d{3}", last), last

