"""Backups: file layout, atomic writes, a plain Keras backup, the best model surviving a
restart, and a SIGKILL mid-epoch. Two workers: tests/distribute/test_multi_worker_backup.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from backup_helpers import (  # noqa: E402
    Interrupt,
    Recorder,
    assert_same_weights,
    tiny_data,
    tiny_model,
    train,
)

from tfopt._files import sha256_file  # noqa: E402
from tfopt.errors import InvalidArgumentError, TfoptError  # noqa: E402
from tfopt.train import backup  # noqa: E402
from tfopt.train.backup import (  # noqa: E402
    AtomicBackupAndRestore,
    BestModelCheckpoint,
    backup_callbacks,
)


def test_layout_best_model_and_backup_removed_after_normal_end(tmp_path):
    x, y = tiny_data()
    callbacks = backup_callbacks(tmp_path / "run", monitor="loss")
    assert isinstance(callbacks[0], AtomicBackupAndRestore)
    # Keras's own callbacks are not subclassed: their private hooks change between releases
    assert type(callbacks[0]).__mro__[1] is keras.callbacks.Callback
    assert type(callbacks[1]).__mro__[1] is keras.callbacks.Callback
    assert isinstance(callbacks[1], BestModelCheckpoint)
    tiny_model().fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=callbacks)
    run = tmp_path / "run"
    assert sorted(p.name for p in run.iterdir()) == ["best.json", "best.keras"]
    info = json.loads((run / "best.json").read_text())
    assert info["monitor"] == "loss" and info["epoch"] == 3  # loss falls every epoch here
    best = keras.models.load_model(run / "best.keras")
    assert best.count_params() == 5


def test_backup_kept_when_asked(tmp_path):
    x, y = tiny_data()
    callbacks = backup_callbacks(tmp_path, monitor="loss", delete_backup=False, save_freq=2)
    tiny_model().fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=callbacks)
    meta = json.loads((tmp_path / "backup" / "latest.json").read_text())
    # Keras 3.15 quirk: with save_freq in batches the last save came at batch 3 of epoch 0
    # (4 batches, every 2nd saved) and the epoch's end does not save, so a restart would run
    # epoch 0 again from the weights after its 4th batch
    folder = tmp_path / "backup"
    first, second = folder / "weights-000001.weights.h5", folder / "weights-000002.weights.h5"
    assert meta == {
        "format": 3, "run": meta["run"], "epoch": 0, "batch": 3, "weights": second.name,
        "generation": 2, "sha256": sha256_file(second), "size": second.stat().st_size,
        "time": meta["time"],
        # the backup it falls back to, kept until newer ones are committed
        "previous": {"epoch": 0, "batch": 1, "weights": first.name, "generation": 1,
                     "sha256": sha256_file(first), "size": first.stat().st_size,
                     "time": meta["previous"]["time"]}}
    assert len(meta["run"]) == 32 and meta["time"] >= meta["previous"]["time"] > 1.7e9
    assert sorted(p.name for p in folder.iterdir()) == [
        "latest.json", first.name, second.name]


def test_a_backup_in_batches_of_a_resumed_fit_records_the_epoch_it_is_in(tmp_path):
    with pytest.raises(Interrupt):
        train([*backup_callbacks(tmp_path, monitor="loss"), Recorder(stop_at=2)])
    # resumed at epoch 2 (its third), stopped before its end: the backups came mid-epoch 2
    with pytest.raises(Interrupt):
        train([*backup_callbacks(tmp_path, monitor="loss", save_freq=2), Recorder(stop_at=3)])
    meta = json.loads((tmp_path / "backup" / "latest.json").read_text())
    assert (meta["epoch"], meta["batch"]) == (2, 3)  # Keras's own callback records epoch 0
    assert (meta["previous"]["epoch"], meta["previous"]["batch"]) == (2, 1)


def failing_weights_save(monkeypatch, at_call):
    """The backup's weights write that, at its ``at_call``-th call, leaves half a temporary
    file and raises: a process killed while writing the weights."""
    calls = []
    original = backup.write_bytes_atomically

    def write(path, data, temp=None):
        if path.name.endswith(".weights.h5"):
            calls.append(str(temp))
            if len(calls) == at_call:
                temp.write_bytes(data[: len(data) // 2])
                raise Interrupt("killed while writing the weights")
        original(path, data, temp)

    monkeypatch.setattr(backup, "write_bytes_atomically", write)
    return calls


def failing_commit(monkeypatch, at_call):
    """The backup's latest.json write that, at its ``at_call``-th call, leaves half a temporary
    file and raises: a process killed between writing the weights and naming them."""
    calls = []
    original = backup.write_json_atomically

    def write(path, data):
        if path.name == "latest.json":
            calls.append(data)
            if len(calls) == at_call:
                text = json.dumps(data)
                (path.parent / f".tmp-{path.name}").write_text(text[: len(text) // 2])
                raise Interrupt("killed between the weights and latest.json")
        original(path, data)

    monkeypatch.setattr(backup, "write_json_atomically", write)
    return calls


@pytest.mark.parametrize("fail", [failing_weights_save, failing_commit])
def test_interrupted_backup_leaves_the_previous_one_and_the_restart_resumes_from_it(
        tmp_path, monkeypatch, fail):
    reference = train([])
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        calls = fail(patch, at_call=3)  # the backup at the end of epoch 3 of 4
        recorder = Recorder()
        with pytest.raises(Interrupt):
            train([*backup_callbacks(run, monitor="loss"), recorder])
    assert recorder.epochs == [0, 1, 2]
    folder = run / "backup"
    # the backup of epoch 2 is intact and whole, with epoch 1's as its fallback; the
    # interrupted write left only a temp file or an unnamed weights file behind
    meta = json.loads((folder / "latest.json").read_text())
    assert meta["epoch"] == 2 and meta["weights"] == "weights-000002.weights.h5"
    assert meta["previous"]["weights"] == "weights-000001.weights.h5"
    names = {p.name for p in folder.iterdir()}
    backup_files = {"latest.json", "weights-000001.weights.h5", "weights-000002.weights.h5"}
    assert backup_files <= names
    leftovers = names - backup_files
    # (a raise, unlike a kill, lets the temporary weights file be deleted)
    assert all(name.startswith(".tmp-") or name == "weights-000003.weights.h5"
               for name in leftovers)
    if fail is failing_weights_save:  # the half file had a temporary name
        # the writer's pid and a random part: two writers never share a temporary name
        assert re.fullmatch(r"\.tmp-\d+-[0-9a-f]{8}-weights-000003\.weights\.h5",
                            os.path.basename(calls[-1]))
    else:
        assert leftovers == {".tmp-latest.json", "weights-000003.weights.h5"}
    restored = tiny_model()
    restored.optimizer.build(restored.trainable_variables)
    restored.load_weights(folder / meta["weights"])

    recorder = Recorder()
    model = train([*backup_callbacks(run, monitor="loss", delete_backup=False), recorder])
    assert recorder.epochs == [2, 3]  # resumed at epoch 3 of 4
    assert_same_weights(model, reference)
    # the leftovers of the interrupted backup were swept by the next one; the backups of
    # epochs 2 and 3 are kept as the fallbacks of epoch 4's (keep=3)
    assert sorted(p.name for p in folder.iterdir()) == [
        "latest.json", "weights-000002.weights.h5", "weights-000003.weights.h5",
        "weights-000004.weights.h5"]


def test_a_backup_of_keras_backup_and_restore_is_restored_and_replaced(tmp_path):
    reference = train([])
    run = tmp_path / "run"
    with pytest.raises(Interrupt):
        train([keras.callbacks.BackupAndRestore(str(run / "backup")), Recorder(stop_at=2)])
    assert sorted(p.name for p in (run / "backup").iterdir()) == [
        "latest.weights.h5", "training_metadata.json"]

    recorder = Recorder()
    model = train([*backup_callbacks(run, monitor="loss", delete_backup=False), recorder])
    assert recorder.epochs == [2, 3]
    assert_same_weights(model, reference)
    # the Keras files went with the first backup written here
    assert sorted(p.name for p in (run / "backup").iterdir()) == [
        "latest.json", "weights-000001.weights.h5", "weights-000002.weights.h5"]


def test_a_backup_naming_missing_weights_is_an_error_not_a_fresh_start(tmp_path):
    folder = tmp_path / "backup"
    folder.mkdir()
    (folder / "latest.json").write_text(json.dumps(
        {"epoch": 2, "batch": 0, "weights": "weights-000002.weights.h5", "generation": 2}))
    with pytest.raises(TfoptError, match="weights-000002.weights.h5"):
        train([AtomicBackupAndRestore(folder)])


def test_restarted_checkpoint_keeps_a_better_earlier_model(tmp_path):
    x, y = tiny_data()
    model = tiny_model()
    first = BestModelCheckpoint(tmp_path / "best.keras", tmp_path / "best.json", monitor="loss")
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[first])
    saved = (tmp_path / "best.keras").stat().st_mtime_ns
    best_value = json.loads((tmp_path / "best.json").read_text())["value"]
    # a fresh process would make a fresh callback: it reads the best value back
    again = BestModelCheckpoint(tmp_path / "best.keras", tmp_path / "best.json", monitor="loss")
    assert again.best == pytest.approx(best_value)
    worse = tiny_model()
    worse.layers[0].kernel.assign(np.full((4, 1), 50.0, np.float32))  # a far worse model
    worse.compile(keras.optimizers.SGD(0.0), "mse")
    worse.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[again])
    assert (tmp_path / "best.keras").stat().st_mtime_ns == saved
    # a plain ModelCheckpoint would have forgotten and overwritten it
    plain = keras.callbacks.ModelCheckpoint(str(tmp_path / "best.keras"), monitor="loss",
                                            save_best_only=True)
    worse.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[plain])
    assert (tmp_path / "best.keras").stat().st_mtime_ns != saved


def test_other_monitor_in_best_json_is_ignored(tmp_path):
    (tmp_path / "best.keras").write_bytes(b"x")
    (tmp_path / "best.json").write_text(json.dumps({"monitor": "val_loss", "value": 0.1}))
    checkpoint = BestModelCheckpoint(tmp_path / "best.keras", tmp_path / "best.json",
                                     monitor="loss")
    assert checkpoint.best is None


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"save_freq": 0}, "save_freq=0: expected 'epoch' or a positive number of batches"),
    ({"save_freq": "batch"}, "save_freq"), ({"save_freq": True}, "save_freq=True"),
    ({"mode": "up"}, "mode"),
])
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        backup_callbacks(tmp_path, **kwargs)


TRAIN_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    from tfopt._tf import import_tensorflow
    tf = import_tensorflow()
    import keras
    from tfopt.train.backup import backup_callbacks

    run, out, hang_at = sys.argv[1], sys.argv[2], sys.argv[3]
    keras.utils.set_random_seed(7)
    tf.config.experimental.enable_op_determinism()
    rng = np.random.default_rng(0)
    x = rng.random((512, 8), dtype=np.float32)
    y = (x @ rng.random((8, 1), dtype=np.float32)).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)  # 16 batches, no shuffling
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")

    class Hang(keras.callbacks.Callback):
        # writes a marker at a known batch, then waits to be killed
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            with open(os.path.join(run, "epochs.txt"), "a") as f:
                f.write(f"{epoch}\\n")
        def on_train_batch_end(self, batch, logs=None):
            if hang_at != "none" and f"{self.epoch}:{batch}" == hang_at:
                open(os.path.join(run, "marker"), "w").close()
                time.sleep(600)

    model.fit(data, epochs=4, verbose=0,
              callbacks=[*backup_callbacks(os.path.join(run, "ckpt"), monitor="loss"), Hang()])
    np.savez(out, *[w.numpy() for w in model.weights])
""")


def run_training(run, out, hang_at="none"):
    return subprocess.Popen([sys.executable, "-c", TRAIN_SCRIPT, str(run), str(out), hang_at],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process, timeout=120):
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr[-3000:]


@pytest.mark.slow
def test_sigkill_mid_epoch_then_restart_gives_the_uninterrupted_weights(tmp_path):
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    straight.mkdir()
    crashed.mkdir()
    reference = run_training(straight, tmp_path / "straight.npz")
    finish(reference)

    victim = run_training(crashed, tmp_path / "crashed.npz", hang_at="2:7")  # epoch 3, batch 8
    deadline = time.monotonic() + 120
    while not (crashed / "marker").exists():
        assert victim.poll() is None, victim.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the training never reached the marker"
        time.sleep(0.05)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL
    assert not (tmp_path / "crashed.npz").exists()
    # the backup of the last finished epoch (2 of 4) is there
    meta = json.loads((crashed / "ckpt" / "backup" / "latest.json").read_text())
    assert meta["epoch"] == 2
    assert (crashed / "ckpt" / "backup" / meta["weights"]).is_file()

    finish(run_training(crashed, tmp_path / "crashed.npz"))
    # the restart began at epoch index 2, not from scratch
    assert (crashed / "epochs.txt").read_text().split() == ["0", "1", "2", "2", "3"]
    want = np.load(tmp_path / "straight.npz")
    got = np.load(tmp_path / "crashed.npz")
    assert len(want.files) == len(got.files) == 4
    for name in want.files:
        np.testing.assert_array_equal(got[name], want[name])
    assert not (crashed / "ckpt" / "backup").exists()  # deleted after the normal end
    assert (crashed / "ckpt" / "best.keras").exists()


def worse_model():
    worse = tiny_model()
    worse.layers[0].kernel.assign(np.full((4, 1), 50.0, np.float32))  # a far worse model
    worse.compile(keras.optimizers.SGD(0.0), "mse")
    return worse


def test_a_new_run_in_a_finished_runs_folder_tracks_its_own_best(tmp_path, caplog):
    x, y = tiny_data()
    tiny_model().fit(x, y, batch_size=16, epochs=2, verbose=0,
                     callbacks=backup_callbacks(tmp_path, monitor="loss"))
    first_info = json.loads((tmp_path / "best.json").read_text())
    # a new experiment in the same folder: no backup to resume, so its model is the best so
    # far, however bad; the finished run's files are kept under new names, not overwritten
    with caplog.at_level("WARNING", logger="tfopt"):
        worse_model().fit(x, y, batch_size=16, epochs=1, verbose=0,
                          callbacks=backup_callbacks(tmp_path, monitor="loss"))
    info = json.loads((tmp_path / "best.json").read_text())
    assert info["epoch"] == 1 and info["value"] > first_info["value"]
    assert keras.models.load_model(tmp_path / "best.keras").layers[0].kernel.numpy().max() == 50
    assert json.loads((tmp_path / "best-previous-1.json").read_text()) == first_info
    assert keras.models.load_model(tmp_path / "best-previous-1.keras").count_params() == 5
    assert "best-previous-1.keras" in caplog.text
    # a third run keeps both earlier ones
    worse_model().fit(x, y, batch_size=16, epochs=1, verbose=0,
                      callbacks=backup_callbacks(tmp_path, monitor="loss"))
    assert (tmp_path / "best-previous-2.keras").exists()
    assert (tmp_path / "best-previous-1.keras").exists()


def test_a_resumed_run_keeps_the_best_value_it_finds(tmp_path):
    x, y = tiny_data()
    tiny_model().fit(x, y, batch_size=16, epochs=2, verbose=0,
                     callbacks=backup_callbacks(tmp_path, monitor="loss", delete_backup=False))
    saved = (tmp_path / "best.keras").stat().st_mtime_ns
    value = json.loads((tmp_path / "best.json").read_text())["value"]
    # the backup is there: the same run resuming (here with nothing left to train)
    callbacks = backup_callbacks(tmp_path, monitor="loss")
    tiny_model().fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=callbacks)
    assert callbacks[1].best == pytest.approx(value)
    assert (tmp_path / "best.keras").stat().st_mtime_ns == saved
    assert not list(tmp_path.glob("best-previous-*"))
