"""Backups kept in several versions and copied to a second location: a training killed with
SIGKILL while it writes a backup, its workdir then deleted, resumes from the copy (a second
local folder, and a real local S3 server) with the weights of the last verified backup; a
damaged newest backup gives way to the next that verifies, with a warning naming both; keep=
and copy_keep= leave their own counts."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from backup_helpers import Interrupt, Recorder, train  # noqa: E402
from s3_server import s3_endpoint, s3_url  # noqa: E402,F401  (fixtures)

from tfopt.train.backup import backup_callbacks  # noqa: E402
from tfopt.train.backup_records import read_backup_folder  # noqa: E402
from tfopt.train.backup_store import BackupStore, StoreError, VersionState  # noqa: E402

# Trains 4 epochs, a backup after each, copied to argv[3]. With argv[4] = N the N-th backup's
# weights write is where the process kills itself with SIGKILL, half of the file written:
# first it waits until the copy of the backup before is complete, so that the copy holds a
# known last verified backup. Prints where the fit resumed and the weights it restored.
SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    from tfopt._internals.keras_model import initial_epoch
    from tfopt._tf import import_tensorflow
    tf = import_tensorflow()
    import keras
    from tfopt.train import backup
    from tfopt.train.backup_store import BackupStore

    run, out, copy_to, kill_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    keras.utils.set_random_seed(7)
    rng = np.random.default_rng(0)
    x = rng.random((256, 8), dtype=np.float32)
    y = (x @ rng.random((8, 1), dtype=np.float32)).astype(np.float32)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    writes = []
    original = backup.write_bytes_atomically

    def write(path, data, temp=None):
        if path.name.endswith(".weights.h5") and path.parent.name == "backup":
            writes.append(path)
            if len(writes) == kill_at:
                store, deadline = BackupStore(copy_to), time.monotonic() + 60
                while not any(v.record is not None and v.record.epoch == kill_at - 1
                              for v in store.versions()) and time.monotonic() < deadline:
                    time.sleep(0.02)
                with open(temp, "wb") as half:
                    half.write(data[: len(data) // 2])
                    half.flush()
                    os.fsync(half.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
        original(path, data, temp)

    backup.write_bytes_atomically = write

    class Restored(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            print("START", initial_epoch(self.model), restore.restored_from,
                  flush=True)
            np.savez(out, *model.get_weights())

    callbacks = backup.backup_callbacks(run, monitor="loss", copy_to=copy_to)
    restore = callbacks[0]
    model.fit(x, y, batch_size=32, epochs=4, shuffle=False, verbose=0,
              callbacks=[*callbacks, Restored()])
    print("DONE", flush=True)
""")


def _train(tmp_path, copy_to, kill_at, out):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run"), str(out), str(copy_to),
         str(kill_at)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})


def _copy_weights(store, version, tmp_path):
    """The version's weights, fetched and checked, loaded into the script's model."""
    path = tmp_path / "fetched.weights.h5"
    assert store.fetch(version, path) is None
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    model.optimizer.build(model.trainable_variables)
    model.load_weights(str(path))
    return model.get_weights()


def _killed_then_resumed_from_the_copy(tmp_path, copy_to):
    killed = _train(tmp_path, copy_to, kill_at=3, out=tmp_path / "first.npz")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    folder = tmp_path / "run" / "backup"
    # killed mid-write: the half file has its temporary name, latest.json the epoch-2 backup
    assert list(folder.glob(".tmp-*-weights-000003.weights.h5"))
    assert json.loads((folder / "latest.json").read_text())["epoch"] == 2
    store = BackupStore(copy_to)
    verified = [v for v in store.versions() if store.state(v)[0] is VersionState.VERIFIED]
    assert [v.record.epoch for v in verified] == [2, 1]  # newest first
    want = _copy_weights(store, verified[0], tmp_path)

    shutil.rmtree(tmp_path / "run")  # the disk, the folder, the ransomware: all gone
    resumed = _train(tmp_path, copy_to, kill_at=0, out=tmp_path / "resumed.npz")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    start = resumed.stdout.split("START ", 1)[1].splitlines()[0].split()
    assert start == ["2", verified[0].where], resumed.stdout
    got = np.load(tmp_path / "resumed.npz")
    assert len(got.files) == len(want) == 4
    for index, array in enumerate(want):
        np.testing.assert_array_equal(got[f"arr_{index}"], array)
    assert "DONE" in resumed.stdout
    # the finished training's versions stay in the copy, marked so that no rerun resumes them
    assert [v.record.epoch for v in store.versions()][:2] == [4, 3]
    assert len(store.finished_runs()) == 1


@pytest.mark.slow
def test_killed_writing_a_backup_then_the_workdir_deleted_resumes_from_a_second_folder(
        tmp_path):
    _killed_then_resumed_from_the_copy(tmp_path, tmp_path / "second-disk" / "run")


@pytest.mark.slow
def test_killed_writing_a_backup_then_the_workdir_deleted_resumes_from_s3(
        tmp_path, s3_url):  # noqa: F811  (the fixture imported above)
    _killed_then_resumed_from_the_copy(tmp_path, s3_url)


# -- in one process: kept versions, damage, retention ---------------------------------------


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _stopped_run(tmp_path, **options):
    """4 epochs of 5 stopped at the start of the 5th: backups of epochs 1-4 written."""
    callbacks = backup_callbacks(tmp_path / "run", monitor="loss", **options)
    with pytest.raises(Interrupt):
        train([*callbacks, Recorder(stop_at=4)], epochs=5)
    if callbacks[0].copier is not None:
        callbacks[0].copier.wait()  # an interrupted fit ends no thread; the copies finish
    return tmp_path / "run" / "backup"


def test_keep_3_leaves_three_and_the_copy_keeps_its_own_count(tmp_path):
    copy = tmp_path / "copy"
    folder = _stopped_run(tmp_path, keep=3, copy_to=copy, copy_keep=2)
    assert sorted(p.name for p in folder.iterdir()) == [
        "latest.json", "weights-000002.weights.h5", "weights-000003.weights.h5",
        "weights-000004.weights.h5"]
    store = BackupStore(copy)
    assert [(v.record.epoch, store.state(v)[0]) for v in store.versions()] == [
        (4, VersionState.VERIFIED), (3, VersionState.VERIFIED)]
    assert len(list(copy.iterdir())) == 4  # each version: its weights and its record


def test_a_damaged_newest_backup_gives_way_to_the_next_with_a_warning_naming_both(
        tmp_path, caplog):
    folder = _stopped_run(tmp_path, keep=3)
    _flip(folder / "weights-000004.weights.h5")
    recorder = Recorder()
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        train([*backup_callbacks(tmp_path / "run", monitor="loss", keep=3), recorder],
              epochs=5)
    assert recorder.epochs == [3, 4]  # the backup of epoch 3 restored: epochs 4 and 5 run
    restored = [r.getMessage() for r in caplog.records if "instead of" in r.getMessage()]
    assert len(restored) == 1, caplog.text
    assert "weights-000003.weights.h5" in restored[0]
    assert "weights-000004.weights.h5" in restored[0]


def test_a_damaged_newest_local_backup_is_taken_from_the_copy(tmp_path, caplog):
    copy = tmp_path / "copy"
    folder = _stopped_run(tmp_path, keep=3, copy_to=copy)
    _flip(folder / "weights-000004.weights.h5")
    _flip(folder / "weights-000003.weights.h5")
    callbacks = backup_callbacks(tmp_path / "run", monitor="loss", copy_to=copy)
    recorder = Recorder()
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        train([*callbacks, recorder], epochs=5)
    assert recorder.epochs == [4]  # the copy of epoch 4's backup
    assert callbacks[0].restored_from.startswith(str(copy))
    assert "weights-000004.weights.h5" in caplog.text and str(copy) in caplog.text


def test_a_copy_that_arrives_damaged_is_never_recorded(tmp_path):
    copy = tmp_path / "copy"
    folder = _stopped_run(tmp_path, keep=1)
    store = BackupStore(copy)
    record = read_backup_folder(folder).candidates[0]
    staged = tmp_path / "staged.weights.h5"
    shutil.copyfile(folder / record.weights, staged)
    _flip(staged)
    with pytest.raises(StoreError, match="arrived damaged"):
        store.put(staged, record, "0" * 32)
    (version,) = store.versions()
    assert store.state(version)[0] is VersionState.PARTIAL
    # the same name is never overwritten in place, even by the good file
    with pytest.raises(StoreError, match="not overwritten"):
        store.put(folder / record.weights, record, "0" * 32)


def test_a_copy_the_store_refuses_is_a_warning_and_training_goes_on(
        tmp_path, s3_url, caplog):  # noqa: F811  (the fixture imported above)
    missing = s3_url.replace("s3://", "s3://no-such-")  # a bucket nobody made
    callbacks = backup_callbacks(tmp_path / "run", monitor="loss", copy_to=missing)
    recorder = Recorder()
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        train([*callbacks, recorder], epochs=3)
    assert recorder.epochs == [0, 1, 2]  # every epoch ran, the backups written locally
    failures = callbacks[0].copier.failures
    assert failures and all(message.startswith(f"{missing}: the copy of ") for message in failures)
    assert "the local backup is kept" in caplog.text


@pytest.mark.parametrize("setting, seconds", [("", 30.0), ("2.5", 2.5), ("abc", None),
                                               ("0", None), ("-1", None), ("inf", None),
                                               ("nan", None)])
def test_the_remote_deadline_comes_from_the_environment_or_is_refused_naming_it(
        monkeypatch, setting, seconds):
    pytest.importorskip("fsspec")
    from tfopt.errors import InvalidArgumentError
    from tfopt.train.backup_store import REMOTE_DEADLINE_VARIABLE, remote_deadline

    monkeypatch.setenv(REMOTE_DEADLINE_VARIABLE, setting)
    if seconds is not None:
        assert remote_deadline() == seconds
        BackupStore("memory://deadline-check")  # a store opens with it
        return
    with pytest.raises(InvalidArgumentError, match=rf"{REMOTE_DEADLINE_VARIABLE}=.*positive"):
        BackupStore("memory://deadline-check")  # named when the store is made
