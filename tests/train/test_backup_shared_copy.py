"""Several trainings given one ``copy_to``: each names its versions after its run, prunes only
its own, and a restore never takes another training's weights, whether the local backup names
the run or the local folder is lost (the versions then say which folder they came from)."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from backup_helpers import Interrupt, Recorder, tiny_model, train  # noqa: E402

from tfopt.errors import TfoptError  # noqa: E402
from tfopt.train.backup import backup_callbacks  # noqa: E402
from tfopt.train.backup_records import read_backup_folder  # noqa: E402
from tfopt.train.backup_store import BackupStore, SharedStoreError  # noqa: E402


def _stopped(folder, copy, epochs_run, model=None):
    """A training stopped at the start of epoch ``epochs_run`` (of 6), its copies complete."""
    callbacks = backup_callbacks(folder, monitor="loss", copy_to=copy, copy_keep=2)
    with pytest.raises(Interrupt):
        train([*callbacks, Recorder(stop_at=epochs_run)], epochs=6, model=model)
    callbacks[0].copier.wait()
    return read_backup_folder(folder / "backup").run


def _other_model():
    """Same layers, other weights: what another training's backup would load into."""
    keras.utils.set_random_seed(11)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    return model


@pytest.fixture
def shared(tmp_path):
    """Training A (3 epochs) and training B (5 epochs, other weights) share one copy."""
    copy = tmp_path / "copy"
    run_a = _stopped(tmp_path / "a", copy, 3)
    run_b = _stopped(tmp_path / "b", copy, 5, _other_model())
    return tmp_path, copy, run_a, run_b


def test_each_training_names_and_prunes_only_its_own_versions(shared):
    _, copy, run_a, run_b = shared
    versions = BackupStore(copy).versions()
    # copy_keep=2 each: B's pruning left A's two newest alone
    assert sorted((v.run, v.record.epoch) for v in versions) == sorted(
        [(run_a, 3), (run_a, 2), (run_b, 5), (run_b, 4)])
    for version in versions:
        assert version.name.startswith(f"weights-{version.run[:12]}-")


def test_a_damaged_local_backup_falls_back_to_its_own_copy_not_the_newer_other(shared, caplog):
    tmp_path, copy, run_a, _ = shared
    folder = tmp_path / "a" / "backup"
    for record in read_backup_folder(folder).candidates:  # every local backup damaged
        path = folder / record.weights
        data = bytearray(path.read_bytes())
        data[-100] ^= 0xFF
        path.write_bytes(bytes(data))
    callbacks = backup_callbacks(tmp_path / "a", monitor="loss", copy_to=copy, copy_keep=2)
    recorder = Recorder(stop_at=4)
    with caplog.at_level(logging.WARNING, logger="tfopt"), pytest.raises(Interrupt):
        train([*callbacks, recorder], epochs=6)
    assert recorder.epochs == [3]  # A's copy after 3 epochs, not B's after 5
    assert f"weights-{run_a[:12]}-000003-" in callbacks[0].restored_from


def test_the_lost_workdir_at_its_path_resumes_its_own_training(shared):
    tmp_path, copy, run_a, _ = shared
    shutil.rmtree(tmp_path / "a")
    callbacks = backup_callbacks(tmp_path / "a", monitor="loss", copy_to=copy, copy_keep=2)
    recorder = Recorder(stop_at=4)
    with pytest.raises(Interrupt):
        train([*callbacks, recorder], epochs=6)
    assert recorder.epochs == [3]
    assert f"weights-{run_a[:12]}-000003-" in callbacks[0].restored_from


def test_a_new_training_in_another_folder_takes_nobody_s_weights(shared, caplog):
    tmp_path, copy, _, _ = shared
    callbacks = backup_callbacks(tmp_path / "c", monitor="loss", copy_to=copy)
    recorder = Recorder(stop_at=1)
    fresh = tiny_model()
    start = [w.copy() for w in fresh.get_weights()]
    seen = []

    class Weights(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            seen.extend(w.copy() for w in self.model.get_weights())

    with caplog.at_level(logging.WARNING, logger="tfopt"), pytest.raises(Interrupt):
        train([*callbacks, recorder, Weights()], epochs=6, model=fresh)
    assert recorder.epochs == [0] and callbacks[0].restored_from is None
    for got, want in zip(seen, start, strict=True):
        np.testing.assert_array_equal(got, want)
    passed = [r.getMessage() for r in caplog.records if "another training" in r.getMessage()]
    assert len(passed) == 2 and all("a restore never takes another training's weights" in m
                                    for m in passed)


def test_two_unfinished_trainings_from_one_folder_stop_the_fit_with_one_line(tmp_path):
    copy = tmp_path / "copy"
    folder = tmp_path / "a" / "backup"
    store = BackupStore(copy)
    for run in ("1" * 32, "2" * 32):  # two machines that used the same path
        callbacks = backup_callbacks(tmp_path / run, monitor="loss")
        with pytest.raises(Interrupt):
            train([*callbacks, Recorder(stop_at=1)], epochs=6)
        record = read_backup_folder(tmp_path / run / "backup").candidates[0]
        store.put(tmp_path / run / "backup" / record.weights, record, run,
                  origin=str(folder.absolute()))
    with pytest.raises(SharedStoreError) as refused:
        store.resumable(None, str(folder.absolute()))
    message = str(refused.value)
    assert "holds the unfinished backups of 2 trainings" in message
    assert "run 111111111111" in message and "run 222222222222" in message
    callbacks = backup_callbacks(tmp_path / "a", monitor="loss", copy_to=copy)
    with pytest.raises(TfoptError, match="none is restored"):
        train(callbacks, epochs=6)
