"""SIGTERM to a real training process under ``tfopt.Run``, mid-epoch: a backup at the next step
boundary, exit status 75 within the grace period, and a rerun of the same command that resumes
at that step and ends with the weights of an uninterrupted run, bit for bit (seeded, op
determinism). A second SIGTERM during the save leaves a backup that restores; a script using
``backup_callbacks`` by hand stops the same way and resumes at the start of that epoch.
"""

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

pytest.importorskip("keras")

EPOCHS = 3
STEPS = 12  # 192 training examples in batches of 16

# argv: workdir, out folder, the signals to send itself ("none", or "E:B:N": N SIGTERMs at
# batch B of epoch E), and "run" or "hand" (backup_callbacks by hand)
SCRIPT = textwrap.dedent(f"""
    import json, os, signal, sys, time
    import numpy as np
    import tensorflow as tf
    tf.config.experimental.enable_op_determinism()
    import keras
    import tfopt
    from tfopt.train.backup import backup_callbacks

    workdir, out, when, how = sys.argv[1:5]
    sent = []
    if os.environ.get("SIGNAL_IN_SAVE"):  # once signalled, one more SIGTERM in the backup's write
        import tfopt.train.backup as backup
        write = backup.write_bytes_atomically
        def write_signalled(*args, **kwargs):
            if sent:
                os.kill(os.getpid(), signal.SIGTERM)
            return write(*args, **kwargs)
        backup.write_bytes_atomically = write_signalled
    rng = np.random.default_rng(0)
    x = rng.random((256, 6), dtype=np.float32)
    y = (x.sum(axis=1) > 3).astype(np.float32)

    class Signals(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            print("STEP", self.epoch, batch, flush=True)
            if when != "none":
                epoch, at, count = map(int, when.split(":"))
                if (self.epoch, batch) == (epoch, at):
                    sent.append(True)
                    for _ in range(count):
                        os.kill(os.getpid(), signal.SIGTERM)

    def make_model():
        keras.utils.set_random_seed(1)
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(16, activation="relu"),
                                 keras.layers.Dropout(0.2),
                                 keras.layers.Dense(1, activation="sigmoid")])

    try:
        if how == "run":
            run = tfopt.Run((x, y), batch_size=16, validation=0.25, workdir=workdir, seed=1,
                            steps_per_execution=4)
            for line in run.describe().splitlines():
                if line.startswith("resume"):
                    print("DESCRIBE", line, flush=True)
            with run.scope():
                model = make_model()
            run.compile(model, optimizer="adam", loss="binary_crossentropy")
            history = run.fit(model, epochs={EPOCHS}, callbacks=[Signals()], verbose=0)
        else:
            model = make_model()
            model.compile(optimizer="adam", loss="binary_crossentropy")
            history = model.fit(x, y, batch_size=16, epochs={EPOCHS}, shuffle=False, verbose=0,
                                validation_split=0.25,
                                callbacks=[*backup_callbacks(workdir), Signals()])
    finally:
        print("ENDED", time.time(), flush=True)
    print("EPOCHS", json.dumps(history.epoch), flush=True)
    np.savez(os.path.join(out, "weights.npz"), *model.get_weights())
""")


def train(tmp_path, workdir, when="none", how="run", name="out", env=None):
    out = tmp_path / name
    out.mkdir(exist_ok=True)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(workdir), str(out), when, how],
                          capture_output=True, text=True, timeout=600,
                          env=None if env is None else {**os.environ, **env})
    return done, out


def weights(out):
    with np.load(out / "weights.npz") as saved:
        return [saved[key] for key in sorted(saved.files, key=lambda k: int(k.split("_")[1]))]


def tagged(done, tag):
    return [line[len(tag) + 1:] for line in done.stdout.splitlines() if line.startswith(tag)]


def latest(workdir):
    return json.loads((workdir / "backup" / "latest.json").read_text())


@pytest.mark.slow
def test_sigterm_mid_epoch_backs_up_at_the_step_and_the_rerun_ends_bit_identical(tmp_path):
    whole, whole_out = train(tmp_path, tmp_path / "whole", name="whole")
    assert whole.returncode == 0, whole.stderr[-3000:]

    workdir = tmp_path / "preempted"
    # the signal at the end of the first call of epoch 2 (batches 0-3 at 4 steps per call):
    # the backup comes at the next boundary, after the second call (8 steps)
    stopped, _ = train(tmp_path, workdir, when="1:3:1")
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    assert "SIGTERM: training stopped at epoch 2, step 8" in stopped.stderr
    assert "Traceback" not in stopped.stderr
    record = latest(workdir)
    assert (record["epoch"], record["steps"]) == (1, 8)
    steps = [tuple(map(int, s.split())) for s in tagged(stopped, "STEP")]
    # the fit stopped in the backup's own callback at batch 7, before the script's callback
    # (after tfopt's) saw it: the last step the script saw is the one it signalled at
    assert steps[-1] == (1, 3)

    resumed, resumed_out = train(tmp_path, workdir, name="resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step 8 of epoch 2" in tagged(resumed, "DESCRIBE")[0]
    assert json.loads(tagged(resumed, "EPOCHS")[0]) == [1, 2]
    # the resumed epoch trains its last call only, then epoch 3 whole
    steps = [tuple(map(int, s.split())) for s in tagged(resumed, "STEP")]
    assert steps == [(1, 3), (2, 3), (2, 7), (2, 11)]
    for a, b in zip(weights(whole_out), weights(resumed_out), strict=True):
        np.testing.assert_array_equal(a, b)
    rows = (workdir / "history.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in rows[1:]] == ["0", "1", "2"]  # one row per epoch
    assert not (workdir / "backup").exists()  # the training finished: backups deleted


@pytest.mark.slow
def test_a_second_sigterm_during_the_save_is_ignored_and_the_backup_restores(tmp_path):
    workdir = tmp_path / "twice"
    stopped, _ = train(tmp_path, workdir, when="1:3:1", env={"SIGNAL_IN_SAVE": "1"})
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    assert (latest(workdir)["epoch"], latest(workdir)["steps"]) == (1, 8)
    resumed, _ = train(tmp_path, workdir, name="resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(tagged(resumed, "EPOCHS")[0]) == [1, 2]


@pytest.mark.slow
def test_a_sigterm_at_an_epochs_last_step_lets_the_epoch_end_first(tmp_path):
    workdir = tmp_path / "last"
    stopped, _ = train(tmp_path, workdir, when="0:11:1")
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    assert "at the end of epoch 1" in stopped.stderr
    assert (latest(workdir)["epoch"], latest(workdir).get("steps", 0)) == (1, 0)
    assert len((workdir / "history.csv").read_text().splitlines()) == 2  # epoch 1's row


@pytest.mark.slow
def test_an_outside_sigterm_exits_75_within_the_grace_period(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.replace("epochs=3", "epochs=200"))
    process = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run"), str(out),
                                "none", "run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        for line in process.stdout:
            if line.startswith("STEP 2 "):
                break
        sent = time.time()
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 75, stderr[-3000:]
    ended = float(tagged(subprocess.CompletedProcess([], 0, stdout, ""), "ENDED")[0])
    assert ended - sent < 10  # a step and a backup: far within a 30 s grace period
    assert latest(tmp_path / "run")["epoch"] >= 2


@pytest.mark.slow
def test_backup_callbacks_by_hand_stop_the_same_way_and_resume_at_the_epochs_start(tmp_path):
    workdir = tmp_path / "hand"
    stopped, _ = train(tmp_path, workdir, when="1:5:1", how="hand")
    assert stopped.returncode == 75, stopped.stderr[-3000:]
    assert (latest(workdir)["epoch"], latest(workdir)["steps"]) == (1, 7)
    resumed, _ = train(tmp_path, workdir, how="hand", name="resumed")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads(tagged(resumed, "EPOCHS")[0]) == [1, 2]
    steps = [tuple(map(int, s.split())) for s in tagged(resumed, "STEP")]
    assert steps[0] == (1, 0)  # the epoch again from its first step, as Keras's callback does


LEFT_OVER = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    import keras
    from tfopt._signals import replaceable
    from tfopt.train.backup import backup_callbacks

    class Boom(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            raise RuntimeError("the fit ends by an exception: Keras calls no on_train_end")

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    try:
        model.fit(np.zeros((16, 4)), np.zeros((16, 1)), epochs=2, verbose=0,
                  callbacks=[*backup_callbacks(sys.argv[1], monitor="loss"), Boom()])
    except RuntimeError:
        pass
    print("REPLACEABLE", replaceable(signal.SIGTERM), replaceable(signal.SIGINT), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)  # no fit runs: the signal does what it always did
    time.sleep(30)
    print("STILL ALIVE", flush=True)
""")


def test_a_fit_ended_by_an_exception_leaves_sigterm_its_default_action(tmp_path):
    script = tmp_path / "left_over.py"
    script.write_text(LEFT_OVER)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert "REPLACEABLE True True" in done.stdout, done.stderr[-3000:]
    assert "STILL ALIVE" not in done.stdout
    assert done.returncode == -signal.SIGTERM, done.stderr[-3000:]
