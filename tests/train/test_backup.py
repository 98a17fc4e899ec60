"""Backups: file layout, the best model surviving a restart, and a SIGKILL mid-epoch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from tfopt.errors import InvalidArgumentError  # noqa: E402
from tfopt.train.backup import BestModelCheckpoint, backup_callbacks  # noqa: E402


def tiny_model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model


def tiny_data():
    rng = np.random.default_rng(0)
    return rng.random((64, 4), dtype=np.float32), rng.random((64, 1), dtype=np.float32)


def test_layout_best_model_and_backup_removed_after_normal_end(tmp_path):
    x, y = tiny_data()
    callbacks = backup_callbacks(tmp_path / "run", monitor="loss")
    assert isinstance(callbacks[0], keras.callbacks.BackupAndRestore)
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
    meta = json.loads((tmp_path / "backup" / "training_metadata.json").read_text())
    # Keras 3.15 quirk: with save_freq in batches the last save came at batch 3 of epoch 0
    # (4 batches, every 2nd saved) and the epoch's end does not save, so a restart would run
    # epoch 0 again from the weights after its 4th batch
    assert meta == {"epoch": 0, "batch": 3}
    assert (tmp_path / "backup" / "latest.weights.h5").exists()


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
    ({"save_freq": 0}, "save_freq"), ({"save_freq": "batch"}, "save_freq"),
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
    meta = json.loads((crashed / "ckpt" / "backup" / "training_metadata.json").read_text())
    assert meta["epoch"] == 2

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
