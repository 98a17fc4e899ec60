"""Two runs meeting in one workdir, met by real processes: the second is refused with one line
naming the first, a dead holder's workdir is taken over, and a run made again in the same
process (a notebook cell run twice) takes its own workdir back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tfopt
from tfopt.errors import WorkdirBusyError

# argv: the workdir, then "hold" (print "held" and wait to be killed) or "try" (print the
# outcome: "ok", or the error's class and message)
SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    import tfopt
    from tfopt.errors import TfoptError

    x, y = np.zeros((64, 4), "float32"), np.zeros((64,), "float32")
    try:
        run = tfopt.Run((x, y), batch_size=16, validation=None, workdir=sys.argv[1])
    except TfoptError as error:
        print(f"{type(error).__name__}: {error}", flush=True)
        sys.exit(3)
    print("held" if sys.argv[2] == "hold" else "ok", flush=True)
    if sys.argv[2] == "hold":
        time.sleep(600)
""")


def start(tmp_path, *args):
    script = tmp_path / "holder.py"
    script.write_text(SCRIPT)
    return subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_second_process_is_refused_naming_the_first_and_takes_over_once_it_is_dead(tmp_path):
    workdir = tmp_path / "run"
    workdir.mkdir()  # a workdir that exists is held from the Run's construction on
    holder = start(tmp_path, str(workdir), "hold")
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
        second = start(tmp_path, str(workdir), "try")
        out, err = second.communicate(timeout=300)
        assert second.returncode == 3, err[-2000:]
        line = out.strip()
        assert line.startswith("WorkdirBusyError: workdir=") and "\n" not in line
        assert f"process {holder.pid}" in line and "holder.py" in line  # the holder, named
        assert "another workdir" in line
        assert sorted(os.listdir(workdir)) == []  # the refused run wrote nothing there
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    third = start(tmp_path, str(workdir), "try")  # the holder died holding it: taken over
    out, err = third.communicate(timeout=300)
    assert third.returncode == 0 and out.strip() == "ok", err[-2000:]


def test_a_run_made_again_in_the_same_process_takes_its_workdir_back(tmp_path):
    x, y = np.zeros((32, 4), "float32"), np.zeros((32,), "float32")
    (tmp_path / "run").mkdir()
    first = tfopt.Run((x, y), batch_size=8, validation=None, workdir=tmp_path / "run")
    again = tfopt.Run((x, y), batch_size=8, validation=None, workdir=tmp_path / "run")
    assert again._workdir_lock.held and not first._workdir_lock.held


def test_a_held_folder_is_refused_at_once_and_free_again_once_released(tmp_path):
    from tfopt._lock import FolderBusyError, lock_folder

    folder = tmp_path / "held"
    folder.mkdir()
    lock = lock_folder(folder)
    with pytest.raises(FolderBusyError, match="this process"):
        lock_folder(folder, take_over=False)
    lock.release()
    lock_folder(folder, take_over=False).release()  # free once released
    started = time.monotonic()
    with pytest.raises(WorkdirBusyError):
        held = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from tfopt._lock import lock_folder
            lock = lock_folder({str(folder)!r})
            print("held", flush=True)
            time.sleep(600)
        """)], stdout=subprocess.PIPE, text=True)
        try:
            assert held.stdout.readline().strip() == "held"
            from tfopt.run.workdir import lock_workdir

            lock_workdir(folder)
        finally:
            held.kill()
            held.wait()
    assert time.monotonic() - started < 60  # refused at once, never waited for


def test_the_same_script_run_again_keeps_the_finished_runs_results(tmp_path):
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1)
    workdir = tmp_path / "run"

    def train(epochs, said=None):
        run = tfopt.Run((x, y), batch_size=16, validation=0.25, workdir=workdir, seed=1)
        if said is not None:  # told before it starts
            assert said in run.describe(), run.describe()
        with run.scope():
            model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        run.compile(model, optimizer="sgd", loss="mse")
        run.fit(model, epochs=epochs, verbose=0)

    train(3, said="resume       a new run")
    finished = {name: (workdir / name).read_bytes()
                for name in ("best.keras", "best.json", "history.csv")}
    train(1, said="are kept as <name>-previous-1")  # the script again: a new run
    for name, content in finished.items():
        stem, _, suffix = name.partition(".")
        assert (workdir / f"{stem}-previous-1.{suffix}").read_bytes() == content
    assert len((workdir / "history.csv").read_text().splitlines()) == 2  # its own epoch
    again = tfopt.Run((x, y), batch_size=16, validation=0.25, workdir=workdir, seed=1)
    assert "previous-2" in again.describe()  # the next free name


@pytest.mark.parametrize("name, make", [
    ("history.csv", "link"), ("best.keras", "link"), ("history.csv", "fifo"),
    ("backup", "file"),
])
def test_workdir_files_that_are_links_or_special_are_refused_before_anything_is_written(
        tmp_path, name, make):
    outside = tmp_path / "precious.txt"
    outside.write_text("not tfopt's")
    workdir = tmp_path / "run"
    workdir.mkdir()
    path = workdir / name
    if make == "link":
        path.symlink_to(outside)
    elif make == "fifo":
        os.mkfifo(path)
    else:
        path.write_text("a file where the backup folder goes")
    x, y = np.zeros((32, 4), "float32"), np.zeros((32,), "float32")
    with pytest.raises(tfopt.TfoptError, match=f"{name}: (a symbolic link|not a)") as caught:
        tfopt.Run((x, y), batch_size=8, validation=None, workdir=workdir)
    assert "\n" not in str(caught.value)
    assert outside.read_text() == "not tfopt's"
    assert sorted(p.name for p in workdir.iterdir()) == [name]


BY_HAND = textwrap.dedent("""
    import sys, time
    import numpy as np
    import keras
    from tfopt.errors import TfoptError
    from tfopt.train.backup import backup_callbacks

    class Hold(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if sys.argv[2] == "hold":
                print("held", flush=True)
                time.sleep(600)

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    try:
        model.fit(np.zeros((16, 4)), np.zeros((16, 1)), epochs=2, verbose=0,
                  callbacks=[*backup_callbacks(sys.argv[1], monitor="loss"), Hold()])
    except TfoptError as error:
        print(f"{type(error).__name__}: {error}", flush=True)
        sys.exit(3)
    print("ok", flush=True)
""")


@pytest.mark.slow
def test_two_trainings_by_hand_on_one_backup_folder_the_second_is_refused(tmp_path):
    script = tmp_path / "by_hand.py"
    script.write_text(BY_HAND)
    folder = tmp_path / "shared"
    first = subprocess.Popen([sys.executable, str(script), str(folder), "hold"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held", first.stderr.read()
        kept = sorted(p.name for p in (folder / "backup").iterdir())
        second = subprocess.run([sys.executable, str(script), str(folder), "go"],
                                capture_output=True, text=True, timeout=300)
        assert second.returncode == 3, second.stderr[-2000:]
        line = second.stdout.strip()
        assert line.startswith("TfoptError: ") and f"process {first.pid}" in line, line
        assert sorted(p.name for p in (folder / "backup").iterdir()) == kept  # untouched
    finally:
        first.kill()
        first.wait()
