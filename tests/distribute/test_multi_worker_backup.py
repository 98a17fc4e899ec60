"""Multi-worker fault tolerance: two real workers on localhost, one killed mid-epoch, relaunched.

The job trains with ``backup_callbacks`` under ``MultiWorkerMirroredStrategy``. On the first
launch worker 1 SIGKILLs itself in epoch 3 of 4; the launcher stops worker 0 and fails. The same
command launched again resumes from the backup of epoch 2 and ends with the weights of an
uninterrupted two-worker run, on both workers. Only the chief writes the backup; worker 1 makes
the same save calls into a temporary folder that it deletes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("keras")

from tfopt.distribute.launch import launch_workers  # noqa: E402

EPOCHS = 4

TRAIN_SCRIPT = textwrap.dedent(f"""
    import json, os, signal, sys
    from tfopt._tf import import_tensorflow
    tf = import_tensorflow()
    import keras
    import numpy as np
    import tfopt
    from tfopt.train.backup import backup_callbacks

    run, marker = sys.argv[1], sys.argv[2]  # marker: "none", or kill worker 1 once
    strategy = tfopt.select_strategy()
    worker = strategy.cluster_resolver.task_id

    # every save either callback makes, and where: the test checks who writes what
    for name in ("save", "save_weights"):
        def traced(self, filepath, *args, _original=getattr(keras.Model, name), **kwargs):
            print(f"SAVED {{filepath}}", flush=True)
            return _original(self, filepath, *args, **kwargs)
        setattr(keras.Model, name, traced)

    keras.utils.set_random_seed(7)
    tf.config.experimental.enable_op_determinism()
    rng = np.random.default_rng(0)
    x = rng.random((256, 8), dtype=np.float32)
    y = (x @ rng.random((8, 1), dtype=np.float32)).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)  # 8 global batches, in order
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(0.01), "mse")

    class Crash(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            print(f"EPOCH {{epoch}}", flush=True)

        def on_train_batch_end(self, batch, logs=None):
            # epoch 3 of 4, batch 4 of 8: the backup of epoch 2 is written (the chief wrote
            # it before this step's all-reduce could finish)
            if (marker != "none" and worker == 1 and (self.epoch, batch) == (2, 3)
                    and not os.path.exists(marker)):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)

    model.fit(data, epochs={EPOCHS}, verbose=0,
              callbacks=[*backup_callbacks(run, monitor="loss"), Crash()])
    print("RESULT " + json.dumps([w.tolist() for w in model.get_weights()]), flush=True)
""")


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("multi_worker_backup") / "train.py"
    path.write_text(TRAIN_SCRIPT)
    return path


def launch(script, run, marker="none"):
    """One two-worker job; per worker: the epochs begun, the paths saved to, the weights."""
    lines = []
    result = launch_workers([sys.executable, str(script), str(run), str(marker)], 2,
                            grace_seconds=5,
                            on_line=lambda index, stream, line: lines.append((index, line)))
    report = {index: {"epochs": [], "saved": [], "weights": None} for index in (0, 1)}
    for index, line in lines:
        if line.startswith("EPOCH "):
            report[index]["epochs"].append(int(line.split()[1]))
        elif line.startswith("SAVED "):
            report[index]["saved"].append(line[len("SAVED "):])
        elif line.startswith("RESULT "):
            report[index]["weights"] = json.loads(line[len("RESULT "):])
    return result, report, [line for _, line in lines]


def assert_chief_alone_writes(report, run):
    chief, other = report[0]["saved"], report[1]["saved"]
    assert chief and len(chief) == len(other)  # the same save calls on both workers
    for path in chief:  # under a temporary name in the run folder, then renamed
        assert os.path.dirname(path) in (str(run), str(run / "backup"))
        assert os.path.basename(path).startswith(".tmp-")
    for path in other:  # elsewhere, and deleted at once
        assert not path.startswith(str(run)) and not os.path.exists(path)


@pytest.mark.slow
def test_worker_killed_mid_epoch_then_relaunched_resumes_from_the_last_backup(script,
                                                                              tmp_path):
    reference_run = tmp_path / "reference"
    result, reference, lines = launch(script, reference_run)
    assert result.exit_code == 0, lines[-30:]
    assert reference[0]["epochs"] == reference[1]["epochs"] == list(range(EPOCHS))
    assert_chief_alone_writes(reference, reference_run)

    run, marker = tmp_path / "run", tmp_path / "killed-once"
    result, crashed, lines = launch(script, run, marker)
    assert marker.exists()
    assert result.exit_code == 128 + signal.SIGKILL and result.failed_worker == 1, lines[-30:]
    assert crashed[1]["epochs"] == [0, 1, 2] and crashed[1]["weights"] is None
    assert crashed[0]["weights"] is None  # stopped by the launcher
    # the chief's backup of epoch 2 and its fallback, nothing else: no files of worker 1, no
    # half files
    folder = run / "backup"
    assert sorted(p.name for p in folder.iterdir()) == [
        "latest.json", "weights-000001.weights.h5", "weights-000002.weights.h5"]
    assert json.loads((folder / "latest.json").read_text())["epoch"] == 2
    assert_chief_alone_writes(crashed, run)

    result, resumed, lines = launch(script, run, marker)
    assert result.exit_code == 0, lines[-30:]
    # both workers restored the chief's backup and ran epochs 3 and 4 only
    assert resumed[0]["epochs"] == resumed[1]["epochs"] == [2, 3]
    assert_chief_alone_writes(resumed, run)
    first, second = resumed[0]["weights"], resumed[1]["weights"]
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)  # synchronous training: identical replicas
    for got, want in zip(first, reference[0]["weights"], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # the chief deleted the backup at the normal end; the best model is there
    assert sorted(p.name for p in run.iterdir()) == ["best.json", "best.keras"]
