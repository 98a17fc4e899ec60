"""A backup meeting a full disk, met by a real training process on a real full file system:
a tmpfs of 1 MiB mounted in the process's own mount namespace (``unshare -rm``: no root
needed where user namespaces are allowed, nothing left mounted on the host), filled by the
training itself until the kernel answers ENOSPC.

What holds: the fit ends with one BackupWriteError line naming the folder (no traceback, no
death by SIGSEGV, which is what HDF5 writing a weights file to a full disk led to), nothing
half-written is left, and the backup before it is restored by the next fit, on the same full
disk, with the weights it was taken with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# argv: the mount point, where to fill ("weights": before the epoch-2 backup's weights;
# "best": after them, before the best model's .keras). Prints one JSON line.
SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from tfopt._internals.keras_model import initial_epoch
    from tfopt._tf import import_tensorflow
    import_tensorflow()
    import keras
    from tfopt.errors import TfoptError
    from tfopt.train.backup import backup_callbacks

    disk, when = sys.argv[1], sys.argv[2]
    run = os.path.join(disk, "run")

    def model():
        keras.utils.set_random_seed(1)
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
        m.compile(keras.optimizers.Adam(0.01), "mse")
        return m

    class Fill(keras.callbacks.Callback):
        # the epoch-1 end: keep the weights the backup is about to take; epoch 2: fill the disk
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 0:
                self.kept = [w.copy() for w in self.model.get_weights()]
            if epoch == 1:
                fd = os.open(os.path.join(disk, "filler"), os.O_WRONLY | os.O_CREAT)
                try:
                    while True:
                        os.write(fd, b"\\0" * 65536)
                except OSError as error:
                    self.filled = error.errno
                os.close(fd)

    rng = np.random.default_rng(0)
    x = rng.random((64, 8), dtype=np.float32)
    y = x.sum(axis=1, keepdims=True)
    fill, callbacks = Fill(), backup_callbacks(run, monitor="loss")
    order = [fill, *callbacks] if when == "weights" else [callbacks[0], fill, callbacks[1]]
    result = {}
    try:
        model().fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0, callbacks=order)
    except TfoptError as error:
        result["error"] = f"{type(error).__name__}: {error}"
    result["filled"] = fill.filled
    result["files"] = sorted(os.listdir(os.path.join(run, "backup")))
    result["run_files"] = sorted(os.listdir(run))

    class Stop(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            result["restored_epoch"] = initial_epoch(self.model)
            result["restored_equal"] = all(
                np.array_equal(a, b) for a, b in zip(self.model.get_weights(), fill.kept))
            raise KeyboardInterrupt

    again = backup_callbacks(run, monitor="loss")
    try:  # on the same full disk: a restore only reads
        model().fit(x, y, batch_size=16, epochs=4, verbose=0, callbacks=[*again, Stop()])
    except KeyboardInterrupt:
        pass
    result["best_loads"] = keras.models.load_model(os.path.join(run, "best.keras")).count_params()
    print("RESULT " + json.dumps(result), flush=True)
""")


def _namespace_mount_works() -> str | None:
    """Why this machine cannot mount a private tmpfs, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "a private tmpfs needs Linux mount namespaces"
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True, text=True)
    if probe.returncode:
        return f"cannot mount a tmpfs in a user and mount namespace here: {probe.stderr.strip()}"
    return None


@pytest.mark.parametrize("when", ["weights", "best"])
def test_a_backup_on_a_full_disk_is_one_error_and_the_previous_backup_is_restored(
        tmp_path, when):
    reason = _namespace_mount_works()
    if reason:
        pytest.skip(reason)
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    command = (f"mount -t tmpfs -o size=1m tmpfs {disk} && "
               f"exec {sys.executable} {script} {disk} {when}")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", command], capture_output=True,
                          text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-3000:]  # not -11 (SIGSEGV), not a traceback
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    assert result["filled"] == 28  # ENOSPC: the kernel's own full disk
    error = result["error"]
    assert "\n" not in error and error.startswith("BackupWriteError: ")
    if when == "weights":
        assert error.startswith(f"BackupWriteError: {disk}/run/backup: no space for "
                                "weights-000002.weights.h5"), error
        # the epoch-1 backup, whole, nothing half-written beside it
        assert result["files"] == ["latest.json", "weights-000001.weights.h5"]
        assert result["restored_epoch"] == 1 and result["restored_equal"]
    else:
        assert error.startswith(f"BackupWriteError: {disk}/run: cannot write best.keras: "
                                "No space left on device"), error
        assert result["files"] == ["latest.json", "weights-000001.weights.h5",
                                   "weights-000002.weights.h5"]
        assert result["restored_epoch"] == 2
    assert not [name for name in result["run_files"] if name.startswith(".tmp-")]
    assert result["best_loads"] == 8 * 16 + 16 + 16 + 1  # the earlier best model, whole
