"""Damaged backups: flipped bytes, truncated weights, a deleted or edited latest.json, a backup
of an earlier tfopt, a malformed Keras metadata file. Nothing is restored unchecked, nothing
the backup cannot account for is deleted, and a folder that cannot be resumed stops the fit
with one line that names it."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

keras = pytest.importorskip("keras")
from backup_helpers import (  # noqa: E402
    Interrupt,
    Recorder,
    assert_same_weights,
    tiny_model,
    train,
)

from tfopt._files import sha256_file  # noqa: E402
from tfopt.errors import TfoptError  # noqa: E402
from tfopt.train.backup import backup_callbacks  # noqa: E402
from tfopt.train.backup_records import read_backup_folder  # noqa: E402

WEIGHTS = "weights-{:06d}.weights.h5".format


@pytest.fixture(scope="module")
def reference():
    """The model after 4 uninterrupted epochs: what every resumed fit must end with."""
    return train([])


@pytest.fixture(scope="module")
def backups(tmp_path_factory):
    """The run folder of a fit of 4 epochs stopped at the start of epoch 3: its backups of
    epochs 3 (the newest) and 2 (its fallback) are in ``backup/``. Copy it; do not change it."""
    run = tmp_path_factory.mktemp("interrupted") / "run"
    with pytest.raises(Interrupt):
        train([*backup_callbacks(run, monitor="loss"), Recorder(stop_at=3)])
    return run


@pytest.fixture
def run(backups, tmp_path):
    """A copy of the interrupted run's folder."""
    return Path(shutil.copytree(backups, tmp_path / "run"))


def snapshot(folder):
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def nan_kernel(path):
    """Overwrite the Dense kernel's values in a weights file with NaNs, in place: the file
    still loads, and plain Keras restores NaN weights without a word."""
    model = tiny_model()
    model.optimizer.build(model.trainable_variables)
    model.load_weights(path)
    kernel = model.layers[0].kernel.numpy().tobytes()
    data = path.read_bytes()
    assert data.count(kernel) == 1
    path.write_bytes(data.replace(kernel, b"\xff" * len(kernel)))


def truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def resume(run, epochs=4, **options):
    recorder = Recorder()
    model = train([*backup_callbacks(run, monitor="loss", **options), recorder], epochs)
    return model, recorder.epochs


@pytest.mark.parametrize("damage", [nan_kernel, truncate])
def test_damaged_newest_weights_fall_back_to_the_previous_backup(run, reference, caplog,
                                                                 damage):
    folder = run / "backup"
    damage(folder / WEIGHTS(3))
    if damage is nan_kernel:  # what a restore without the check would have resumed from
        silent = tiny_model()
        silent.optimizer.build(silent.trainable_variables)
        silent.load_weights(folder / WEIGHTS(3))
        assert np.isnan(silent.layers[0].kernel.numpy()).all()
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        model, epochs = resume(run)
    assert epochs == [2, 3]  # from the previous backup, taken after 2 epochs
    assert_same_weights(model, reference)
    assert f"{folder / WEIGHTS(3)}: " in caplog.text
    # one warning names the backup used and the damaged one it replaced
    assert (f"{folder}: restored an older backup ({WEIGHTS(2)}, after 2 epochs) instead of "
            f"{WEIGHTS(3)}, which cannot be restored") in caplog.text
    assert not folder.exists()  # every file was the backup's: the normal end deleted them


def test_no_good_backup_stops_with_one_line_and_deletes_nothing(run):
    folder = run / "backup"
    nan_kernel(folder / WEIGHTS(3))
    truncate(folder / WEIGHTS(2))
    (folder / WEIGHTS(1)).unlink()  # the third kept backup (keep=3)
    before = snapshot(folder)
    recorder = Recorder()
    with pytest.raises(TfoptError) as raised:
        train([*backup_callbacks(run, monitor="loss"), recorder])
    message = str(raised.value)
    assert "\n" not in message and recorder.epochs == []
    assert message.startswith(f"{folder}: no backup in it can be restored: ")
    assert f"{WEIGHTS(3)} is damaged: its SHA-256" in message
    assert f"{WEIGHTS(2)} has " in message and "(truncated or overwritten)" in message
    assert f"{WEIGHTS(1)} is missing" in message
    assert f"Hint: delete {folder} to start training from scratch" in message
    assert snapshot(folder) == before


def test_deleted_latest_json_starts_afresh_and_keeps_the_orphaned_weights(run, reference,
                                                                          caplog):
    folder = run / "backup"
    (folder / "latest.json").unlink()
    orphans = snapshot(folder)
    assert sorted(orphans) == [WEIGHTS(1), WEIGHTS(2), WEIGHTS(3)]
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        model, epochs = resume(run)
    assert epochs == [0, 1, 2, 3]  # their epoch and checksum are unknown: not restored
    assert_same_weights(model, reference)
    assert (f"{WEIGHTS(1)}, {WEIGHTS(2)}, {WEIGHTS(3)}: no backup record names them"
            in caplog.text)
    # the new run's backups took new names and were deleted at its end; the orphans were not
    assert snapshot(folder) == orphans
    assert f"{folder}: kept after the backup was deleted: it holds {WEIGHTS(1)}" in caplog.text


def edit_latest(folder, **changes):
    path = folder / "latest.json"
    info = json.loads(path.read_text())
    info.update(changes)
    path.write_text(json.dumps(info))


def test_a_backup_of_more_epochs_than_the_fit_runs_stops_it_and_is_kept(run):
    folder = run / "backup"
    edit_latest(folder, epoch=99)
    before = snapshot(folder)
    recorder = Recorder()
    with pytest.raises(TfoptError, match=r"latest.json: the backup was taken after 99 epochs, "
                                         r"more than the 4 this fit runs\. Hint: fit with "
                                         r"epochs=99 or more"):
        train([*backup_callbacks(run, monitor="loss"), recorder])
    assert recorder.epochs == []
    assert snapshot(folder) == before


def test_a_finished_trainings_backup_says_so(run, reference, caplog):
    # the interrupted run finished, its backup kept
    resume(run, delete_backup=False)
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        model, epochs = resume(run)
    assert epochs == []
    assert_same_weights(model, reference)
    assert "taken after the last of the 4 epochs: that training had finished" in caplog.text
    assert not (run / "backup").exists()


def test_a_negative_epoch_is_refused(run):
    folder = run / "backup"
    edit_latest(folder, epoch=-4)
    before = snapshot(folder)
    with pytest.raises(TfoptError) as raised:
        train(backup_callbacks(run, monitor="loss"))
    assert str(raised.value).startswith(
        f"{folder / 'latest.json'}: epoch=-4: expected an integer >= 0. Hint: delete")
    assert snapshot(folder) == before


def as_previous_tfopt(folder):
    """Rewrite the backup in ``folder`` as tfopt wrote it before checksums: latest.json with
    epoch, batch, weights and generation only, and no previous backup kept."""
    info = json.loads((folder / "latest.json").read_text())
    (folder / "latest.json").write_text(json.dumps(
        {key: info[key] for key in ("epoch", "batch", "weights", "generation")}))
    (folder / info["previous"]["weights"]).unlink()
    return info["weights"]


def test_a_backup_of_the_previous_tfopt_is_restored_unverified_then_checked(run, reference,
                                                                            caplog):
    folder = run / "backup"
    name = as_previous_tfopt(folder)
    with caplog.at_level(logging.WARNING, logger="tfopt"):
        model, epochs = resume(run, delete_backup=False)
    assert epochs == [3]
    assert_same_weights(model, reference)
    assert (f"{folder / name}: restored unverified: latest.json records no checksum (written "
            "by a tfopt from before backups carried checksums)") in caplog.text
    # the backup written since carries a checksum; the old one is its fallback
    state = read_backup_folder(folder)
    assert [record.weights for record in state.candidates] == [WEIGHTS(4), name]
    assert state.candidates[0].sha256 == sha256_file(folder / WEIGHTS(4))
    assert not state.candidates[1].verified


def test_a_truncated_unverified_backup_stops_with_one_line(run):
    folder = run / "backup"
    name = as_previous_tfopt(folder)
    truncate(folder / name)
    with pytest.raises(TfoptError) as raised:
        train(backup_callbacks(run, monitor="loss"))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{folder}: no backup in it can be restored: {name} cannot be "
                              "loaded (OSError: ")


def test_weights_of_another_model_stop_with_one_line(run):
    folder = run / "backup"
    before = snapshot(folder)
    wider = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    wider.compile("adam", "mse")
    with pytest.raises(TfoptError) as raised:
        train(backup_callbacks(run, monitor="loss"), model=wider)
    message = str(raised.value)
    assert "\n" not in message
    assert f"{WEIGHTS(3)} cannot be loaded (ValueError: " in message
    assert f"{WEIGHTS(2)} cannot be loaded (ValueError: " in message
    assert snapshot(folder) == before


def test_a_malformed_keras_metadata_file_stops_the_fit_with_one_line(tmp_path):
    folder = tmp_path / "run" / "backup"
    folder.mkdir(parents=True)
    (folder / "training_metadata.json").write_text("{not json")
    with pytest.raises(TfoptError) as raised:
        train(backup_callbacks(tmp_path / "run", monitor="loss"))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{folder / 'training_metadata.json'}: not JSON (")
    assert 'expected Keras BackupAndRestore\'s metadata, like {"epoch": 3' in message
