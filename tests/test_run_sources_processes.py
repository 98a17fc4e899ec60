"""tfopt.Run on NumPy arrays, a pandas DataFrame and a tf.data.Dataset in real processes (issue
41): each trains under ``tfopt launch -n 2`` (two CPU workers, MultiWorkerMirroredStrategy),
the chief alone writing history.csv; and a job whose worker is killed with SIGKILL after a
backup, launched again with the same script and workdir, resumes from that backup and ends with
the weights of the uninterrupted job (the same launch, in another workdir).

Beside them, one process on the dataset with no launcher: the user's own seeded shuffle resumed
without sharding.

One script serves every case: the source kind is its argument. Given a pause epoch, each worker
stops in that epoch (after its first call of steps) and waits; the test polls the workdir's
backup folder until the backup of the epochs before it is there, then kills one worker with
SIGKILL: killed mid-training, after the backup, at a moment the test knows. The uninterrupted
job of a kind and its killed job are one test (each launch costs TensorFlow's start-up twice).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("keras")
pytest.importorskip("pandas")

EPOCHS = 4
KILL_EPOCH = 2  # killed in the third epoch, after the backup of two epochs is written
KINDS = ("arrays", "dataframe", "dataset")
# the worker each kind's killed job loses: the chief (the backup's writer) or the other one
KILLED = {"arrays": 0, "dataframe": 1, "dataset": 0}
GLOBAL_BATCH = {"arrays": 32, "dataframe": 32, "dataset": None}  # run.plan.global_batch

TRAIN_SCRIPT = textwrap.dedent(f"""
    import json, os, sys, time
    import numpy as np
    import pandas as pd
    import keras
    import tensorflow as tf
    import tfopt

    kind, workdir, out, pause = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    worker = json.loads(os.environ.get("TF_CONFIG", "{{}}")).get("task", {{}}).get("index", 0)
    with open(os.path.join(out, f"pid-{{worker}}"), "w") as f:
        f.write(str(os.getpid()))

    # who opens history.csv: the chief alone must
    original = keras.callbacks.CSVLogger.on_train_begin
    def traced(self, logs=None):
        print("HISTORY", self.filename, flush=True)
        return original(self, logs)
    keras.callbacks.CSVLogger.on_train_begin = traced

    # 384 examples whose class is whether their features sum above the middle: learnable
    rng = np.random.default_rng(0)
    x = rng.random((384, 6), dtype=np.float32)
    y = (x.sum(axis=1) > 3).astype(np.float32)
    if kind == "arrays":
        run = tfopt.Run((x, y), batch_size=16, validation=0.25, workdir=workdir, seed=1)
    elif kind == "dataframe":
        frame = pd.DataFrame({{f"f{{i}}": x[:, i] for i in range(6)}})
        frame["target"] = y
        run = tfopt.Run(frame, label="target", batch_size=16, validation=0.25,
                        workdir=workdir, seed=1)
    elif kind == "late":  # a dataset made first: too late for the workers' collective ops
        train_ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
        try:
            run = tfopt.Run(train_ds, validation=None, workdir=workdir)
        except tfopt.errors.InvalidArgumentError as error:
            print("REFUSED", error, flush=True)
            sys.exit(3)
    else:
        # under several workers the strategy comes before the first TensorFlow op (docs/run.md)
        tfopt.select_strategy()
        train_ds = (tf.data.Dataset.from_tensor_slices((x[:288], y[:288]))
                    .shuffle(288, seed=3).batch(32))  # reshuffled each iteration (default)
        val_ds = tf.data.Dataset.from_tensor_slices((x[288:], y[288:])).batch(32)
        run = tfopt.Run(train_ds, validation=val_ds, workdir=workdir, seed=1)
    print("PLAN", run.plan.workers, run.plan.global_batch, flush=True)
    for line in run.describe().splitlines():
        if line.startswith("resume"):
            print("DESCRIBE", line, flush=True)
    with run.scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(1, activation="sigmoid")])
    run.compile(model, optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])

    class Pause(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            print("EPOCH", epoch, flush=True)

        def on_train_batch_end(self, batch, logs=None):
            if self.epoch == pause:  # mid-epoch: the test kills a worker now
                open(os.path.join(out, f"paused-{{worker}}"), "w").close()
                time.sleep(600)

    history = run.fit(model, epochs={EPOCHS}, callbacks=[Pause()], verbose=0)
    print("LOSS", json.dumps(history.history["loss"]), flush=True)
    np.savez(os.path.join(out, f"weights-{{worker}}.npz"), *model.get_weights())
""")


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sources_processes") / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return path


class Job:
    """One ``tfopt launch -n 2`` of the script (or one process of it, alone: worker 0): its exit
    code and each worker's lines."""

    def __init__(self, returncode: int, output: str, out: Path, launched: bool = True):
        self.returncode, self.output, self.out = returncode, output, out
        self.lines = ({index: re.findall(rf"^\[worker {index}\] (.*)$", output, re.MULTILINE)
                       for index in (0, 1)} if launched else {0: output.splitlines()})

    def tagged(self, index: int, tag: str) -> list[str]:
        return [line[len(tag) + 1:] for line in self.lines[index] if line.startswith(tag + " ")]

    def epochs(self, index: int) -> list[int]:
        return [int(e) for e in self.tagged(index, "EPOCH")]

    def weights(self, index: int) -> list[np.ndarray] | None:
        path = self.out / f"weights-{index}.npz"
        if not path.exists():
            return None
        with np.load(path) as saved:
            return [saved[f"arr_{i}"] for i in range(len(saved.files))]

    def tail(self) -> str:
        return self.output[-6000:]


def start(script: Path, kind: str, workdir: Path, out: Path, pause: int = -1,
          launched: bool = True):
    """The script under ``tfopt launch -n 2`` (launched) or as one process, output to a file
    (not a pipe: nothing blocks on a full pipe)."""
    out.mkdir(parents=True, exist_ok=True)
    log = out / "output.txt"
    launcher = [sys.executable, "-m", "tfopt", "launch", "-n", "2", "--grace", "5", "--"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    with open(log, "w") as sink:
        process = subprocess.Popen(
            [*(launcher if launched else []), sys.executable, str(script), kind, str(workdir),
             str(out), str(pause)], stdout=sink, stderr=subprocess.STDOUT, text=True, env=env)
    return process, log


def stop(process) -> None:
    """End a launch still running: SIGTERM to the launcher, which stops its workers' groups."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def finish(process, log: Path, out: Path, timeout: float = 300, launched: bool = True) -> Job:
    try:
        process.wait(timeout=timeout)
    finally:
        stop(process)
    return Job(process.returncode, log.read_text(), out, launched)


def launch(script: Path, kind: str, workdir: Path, out: Path, launched: bool = True) -> Job:
    return finish(*start(script, kind, workdir, out, launched=launched), out,
                  launched=launched)


def kill_after_backup(script: Path, kind: str, workdir: Path, out: Path, killed: int,
                      launched: bool = True) -> Job:
    """The script paused in epoch KILL_EPOCH, killed with SIGKILL (worker ``killed``) once the
    backup of the epochs before it is in the workdir; the job as it ended."""
    process, log = start(script, kind, workdir, out, pause=KILL_EPOCH, launched=launched)
    try:
        deadline = time.monotonic() + 240
        paused = [out / f"paused-{index}" for index in ((0, 1) if launched else (0,))]
        while not (backup_epoch(workdir) == KILL_EPOCH and all(p.exists() for p in paused)):
            assert process.poll() is None, log.read_text()[-6000:]
            assert time.monotonic() < deadline, log.read_text()[-6000:]
            time.sleep(0.1)
        os.kill(int((out / f"pid-{killed}").read_text()), signal.SIGKILL)
    except BaseException:
        stop(process)
        raise
    return finish(process, log, out, timeout=120, launched=launched)


def history_rows(workdir: Path) -> list[dict]:
    text = (workdir / "history.csv").read_text()
    assert text.count("epoch,") == 1, text  # one header: written by one writer, appended to
    return list(csv.DictReader(text.splitlines()))


def backup_epoch(workdir: Path) -> int | None:
    try:
        return json.loads((workdir / "backup" / "latest.json").read_text())["epoch"]
    except (OSError, ValueError, KeyError):
        return None


def assert_trained_on_two_workers(job: Job, workdir: Path, kind: str) -> None:
    """The uninterrupted job: both workers planned, trained every epoch and ended alike; the
    chief alone wrote history.csv."""
    assert job.returncode == 0, job.tail()  # both workers exited 0 (the launcher says so)
    for index in (0, 1):
        # two workers; the global batch 16 per replica x 2 (None: the dataset's own, 32)
        assert job.tagged(index, "PLAN") == [f"2 {GLOBAL_BATCH[kind]}"], job.tail()
        assert job.epochs(index) == list(range(EPOCHS)), job.tail()
        assert job.tagged(index, "DESCRIBE") == ["resume       a new run"], job.tail()
        losses = json.loads(job.tagged(index, "LOSS")[0])
        assert len(losses) == EPOCHS and all(math.isfinite(v) for v in losses), losses
    # synchronous training: both workers end with the same weights
    for a, b in zip(job.weights(0), job.weights(1), strict=True):
        np.testing.assert_array_equal(a, b)
    # history.csv: opened by the chief alone, one row an epoch, finite losses
    assert job.tagged(0, "HISTORY") == [str(workdir / "history.csv")], job.tail()
    assert job.tagged(1, "HISTORY") == [], job.tail()
    rows = history_rows(workdir)
    assert [int(row["epoch"]) for row in rows] == list(range(EPOCHS))
    assert all(math.isfinite(float(row["loss"])) for row in rows), rows
    assert all(math.isfinite(float(row["val_loss"])) for row in rows), rows


@pytest.mark.slow
def test_a_dataset_made_before_the_strategy_is_refused_with_the_way_out(script, tmp_path):
    workdir = tmp_path / "run"
    job = launch(script, "late", workdir, tmp_path / "out")
    assert job.returncode != 0, job.tail()
    for index in (0, 1):
        refused = job.tagged(index, "REFUSED")
        assert refused and "call tfopt.select_strategy() at the top of the script" in refused[0], \
            job.tail()
    assert not workdir.exists() or not any(workdir.iterdir())  # nothing written


# one test a kind, the uninterrupted job first: shared through a fixture, it was launched again
# by each pytest process that ran a test of it
@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_each_source_trains_under_tfopt_launch_and_a_job_killed_after_a_backup_resumes(
        script, tmp_path, kind):
    reference = tmp_path / "uninterrupted"
    uninterrupted = launch(script, kind, reference, tmp_path / "uninterrupted-out")
    assert_trained_on_two_workers(uninterrupted, reference, kind)

    workdir, killed = tmp_path / "run", KILLED[kind]
    job = kill_after_backup(script, kind, workdir, tmp_path / "killed", killed)
    # the launcher saw the worker killed and stopped the other: no weights, a mid-training end
    assert job.returncode == 128 + signal.SIGKILL, job.tail()
    assert f"tfopt launch: worker {killed} failed with exit code 137" in job.output, job.tail()
    for index in (0, 1):
        assert job.epochs(index) == list(range(KILL_EPOCH + 1)), job.tail()
        assert job.weights(index) is None and job.tagged(index, "LOSS") == []
    assert backup_epoch(workdir) == KILL_EPOCH
    assert len(history_rows(workdir)) == KILL_EPOCH

    job = launch(script, kind, workdir, tmp_path / "resumed")
    assert job.returncode == 0, job.tail()
    for index in (0, 1):  # both restored the chief's backup and ran the epochs after it
        assert job.tagged(index, "DESCRIBE") == [
            f"resume       from the backup of epoch {KILL_EPOCH}"], job.tail()
        assert job.epochs(index) == list(range(KILL_EPOCH, EPOCHS)), job.tail()
    # history.csv: the killed job's rows, then the relaunch's appended
    assert [int(row["epoch"]) for row in history_rows(workdir)] == list(range(EPOCHS))
    weights = job.weights(0)
    for a, b in zip(weights, job.weights(1), strict=True):
        np.testing.assert_array_equal(a, b)
    want = uninterrupted.weights(0)
    for got, expected in zip(weights, want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


# Without a cluster: the dataset's own seeded shuffle, resumed in one process (no sharding, no
# launcher). The kind whose data order is the user's pipeline's, not tfopt's index stream.
@pytest.mark.slow
def test_one_process_on_a_seeded_dataset_killed_after_a_backup_reruns_to_the_same_weights(
        script, tmp_path):
    reference = launch(script, "dataset", tmp_path / "whole", tmp_path / "whole-out",
                       launched=False)
    assert reference.returncode == 0, reference.tail()
    assert reference.tagged(0, "PLAN") == ["1 None"], reference.tail()
    workdir = tmp_path / "run"
    job = kill_after_backup(script, "dataset", workdir, tmp_path / "killed", 0, launched=False)
    assert job.returncode == -signal.SIGKILL, job.tail()
    assert job.epochs(0) == list(range(KILL_EPOCH + 1)) and job.weights(0) is None, job.tail()
    assert backup_epoch(workdir) == KILL_EPOCH

    job = launch(script, "dataset", workdir, tmp_path / "resumed", launched=False)
    assert job.returncode == 0, job.tail()
    assert job.tagged(0, "DESCRIBE") == [
        f"resume       from the backup of epoch {KILL_EPOCH}"], job.tail()
    assert job.epochs(0) == list(range(KILL_EPOCH, EPOCHS)), job.tail()
    assert [int(row["epoch"]) for row in history_rows(workdir)] == list(range(EPOCHS))
    for got, expected in zip(job.weights(0), reference.weights(0), strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
