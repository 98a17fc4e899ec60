"""Reading a backup folder without Keras: every malformed record refused with one line naming
the file, key, value and what was expected; which weights files are the backup's and which are
orphans; the checks of a weights file against its record."""

from __future__ import annotations

import hashlib
import json

import pytest

from tfopt.errors import TfoptError
from tfopt.train.backup_records import (
    BackupRecord,
    latest_json,
    read_backup_folder,
    temp_name,
    temporary_files,
    weights_problem,
)

WEIGHTS = "weights-{:06d}.weights.h5".format


def checked_record(folder, generation, epoch, data=b"weights"):
    (folder / WEIGHTS(generation)).write_bytes(data)
    return BackupRecord(WEIGHTS(generation), epoch, 0, generation,
                        hashlib.sha256(data).hexdigest(), len(data))


def write_latest(folder, info):
    (folder / "latest.json").write_text(json.dumps(info))


@pytest.fixture
def folder(tmp_path):
    """A backup folder of two checked backups (generations 1 and 2)."""
    first, second = checked_record(tmp_path, 1, 1), checked_record(tmp_path, 2, 2)
    write_latest(tmp_path, latest_json(second, first))
    return tmp_path


def test_the_records_read_back_newest_first(folder):
    state = read_backup_folder(folder)
    assert [(r.weights, r.epoch, r.verified) for r in state.candidates] == [
        (WEIGHTS(2), 2, True), (WEIGHTS(1), 1, True)]
    assert state.info_file == folder / "latest.json" and not state.keras
    assert state.orphans == () and state.interrupted is None and state.next_generation == 3
    assert state.backup_files == {WEIGHTS(1), WEIGHTS(2)}


@pytest.mark.parametrize(("change", "shown"), [
    ({"epoch": -4}, "epoch=-4: expected an integer >= 0"),
    ({"epoch": True}, "epoch=True: expected an integer >= 0"),
    ({"epoch": "3"}, "epoch='3': expected an integer >= 0"),
    ({"epoch": 2.5}, "epoch=2.5: expected an integer >= 0"),
    ({"epoch": None}, "epoch=None: expected an integer >= 0"),
    ({"batch": -1}, "batch=-1: expected an integer >= 0"),
    ({"generation": "2"}, "generation='2': expected an integer >= 0"),
    ({"weights": "../weights-000002.weights.h5"},
     "weights='../weights-000002.weights.h5': expected the name of a weights file in"),
    ({"weights": ""}, "weights='': expected the name of a weights file in"),
    ({"sha256": "ABC"}, "sha256='ABC': expected the weights file's SHA-256 (64 lowercase"),
    ({"sha256": None}, "sha256=None: expected the weights file's SHA-256"),
    ({"size": -1}, "size=-1: expected an integer >= 0"),
    ({"format": 4}, "format=4: expected 1 to 3 (a later format is a newer tfopt's)"),
    ({"format": "2"}, "format='2': expected 1 to 3"),
    ({"run": "RUN"}, "run='RUN': expected the training's id (32 lowercase hex digits)"),
    ({"time": -1}, "time=-1: expected the time it was written"),
    ({"time": float("nan")}, "time=nan: expected the time it was written"),
    ({"older": {"epoch": 0}}, "older={'epoch': 0}: expected a list of backup records"),
    ({"older": [{"epoch": 0, "weights": WEIGHTS(0), "sha256": "y", "size": 7}]},
     "older[0].sha256='y': expected the weights file's SHA-256"),
    ({"older": [{"epoch": 0, "weights": WEIGHTS(1), "generation": 1}]},
     "names a weights file twice"),
    ({"previous": [1]}, "previous=[1]: expected a backup record (an object) or null"),
    ({"previous": {"epoch": 1, "weights": WEIGHTS(1), "sha256": "x", "size": 7}},
     "previous.sha256='x': expected the weights file's SHA-256"),
])
def test_a_malformed_latest_json_is_refused_naming_key_and_value(folder, change, shown):
    info = json.loads((folder / "latest.json").read_text())
    info.update(change)
    write_latest(folder, info)
    with pytest.raises(TfoptError) as raised:
        read_backup_folder(folder)
    message = str(raised.value)
    assert message.startswith(f"{folder / 'latest.json'}: {shown}")
    assert message.endswith(f"Hint: delete {folder} to start training from scratch (the best "
                            "model beside it is kept).")
    assert "\n" not in message


def test_format_3_keeps_the_older_backups_and_the_run(tmp_path):
    records = [checked_record(tmp_path, g, g) for g in (1, 2, 3, 4)]
    for record in records:
        assert record.time is None
    newest = BackupRecord(**{**records[3].__dict__, "time": 1764830000.5})
    run = "0123456789abcdef0123456789abcdef"
    write_latest(tmp_path, latest_json(newest, records[2], (records[1], records[0]), run))
    info = json.loads((tmp_path / "latest.json").read_text())
    assert info["format"] == 3 and info["run"] == run and info["time"] == 1764830000.5
    assert [entry["weights"] for entry in info["older"]] == [WEIGHTS(2), WEIGHTS(1)]
    state = read_backup_folder(tmp_path)
    assert state.candidates == (newest, records[2], records[1], records[0])
    assert state.run == run and state.backup_files == {WEIGHTS(g) for g in (1, 2, 3, 4)}
    assert state.orphans == () and state.next_generation == 5
    # ignoring the records: every weights file is an orphan, nothing is the backup's
    ignored = read_backup_folder(tmp_path, ignore_records=True)
    assert ignored.candidates == () and len(ignored.orphans) == 4 and ignored.run is None


def test_a_missing_key_is_named(folder):
    info = json.loads((folder / "latest.json").read_text())
    del info["epoch"]
    write_latest(folder, info)
    with pytest.raises(TfoptError, match=r"latest.json: epoch=missing: expected an integer"):
        read_backup_folder(folder)


@pytest.mark.parametrize(("data", "shown"), [
    (b"{not json", "not JSON (Expecting property name"),
    (b"\xff\xfe", "not JSON ("),
    (b"[3]", "holds a JSON list; expected the backup record tfopt writes (an object)"),
])
def test_latest_json_that_is_not_a_record_is_refused(tmp_path, data, shown):
    (tmp_path / "latest.json").write_bytes(data)
    with pytest.raises(TfoptError) as raised:
        read_backup_folder(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / 'latest.json'}: {shown}")


@pytest.mark.parametrize(("text", "shown"), [
    ("{not json", "not JSON ("),
    ("[3]", "a JSON list: expected Keras BackupAndRestore's metadata"),
    ('{"epoch": "three"}', "epoch='three': expected Keras BackupAndRestore's metadata"),
    ('{"epoch": -1}', "epoch=-1: expected Keras BackupAndRestore's metadata"),
])
def test_a_malformed_keras_metadata_file_is_refused(tmp_path, text, shown):
    (tmp_path / "training_metadata.json").write_text(text)
    with pytest.raises(TfoptError) as raised:
        read_backup_folder(tmp_path)
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'training_metadata.json'}: {shown}")
    assert 'like {"epoch": 3, "batch": 0}' in message and "\n" not in message


def test_a_format_1_record_and_a_previous_without_checksum_read_as_unverified(tmp_path):
    old = checked_record(tmp_path, 4, 4)
    write_latest(tmp_path, {"epoch": 4, "batch": 0, "weights": old.weights, "generation": 4})
    (record,) = read_backup_folder(tmp_path).candidates
    assert record == BackupRecord(old.weights, 4, 0, 4) and not record.verified
    # the first checked backup after it falls back to it
    new = checked_record(tmp_path, 5, 5)
    write_latest(tmp_path, latest_json(new, record))
    assert read_backup_folder(tmp_path).candidates == (new, record)


def test_orphans_are_told_apart_from_an_interrupted_save(folder):
    (folder / WEIGHTS(3)).write_bytes(b"a save cut short before its record")
    (folder / WEIGHTS(9)).write_bytes(b"copied in")
    (folder / "latest.weights.h5").write_bytes(b"a Keras backup's")
    state = read_backup_folder(folder)
    assert state.interrupted == WEIGHTS(3)
    assert state.orphans == (WEIGHTS(9), "latest.weights.h5")
    assert state.backup_files == {WEIGHTS(1), WEIGHTS(2), WEIGHTS(3)}
    assert state.next_generation == 10  # a new backup never takes an orphan's name


def test_without_a_record_every_weights_file_is_an_orphan(folder):
    (folder / "latest.json").unlink()
    state = read_backup_folder(folder)
    assert state.candidates == () and state.info_file is None
    assert state.orphans == (WEIGHTS(1), WEIGHTS(2)) and state.backup_files == set()
    assert state.next_generation == 3


def test_a_plain_keras_backup_is_read_as_keras_reads_it(tmp_path):
    (tmp_path / "latest.weights.h5").write_bytes(b"w")
    (tmp_path / WEIGHTS(2)).write_bytes(b"not the Keras backup's")
    state = read_backup_folder(tmp_path)
    assert state.keras and state.candidates == (BackupRecord("latest.weights.h5", 0),)
    assert state.orphans == (WEIGHTS(2),) and state.next_generation == 3
    (tmp_path / "training_metadata.json").write_text('{"epoch": 3, "batch": 0}')
    assert read_backup_folder(tmp_path).candidates == (BackupRecord("latest.weights.h5", 3),)
    assert "training_metadata.json" in read_backup_folder(tmp_path).backup_files


def test_weights_checked_against_their_record(tmp_path):
    record = checked_record(tmp_path, 1, 1, b"0123456789")
    assert weights_problem(tmp_path, record) is None
    path = tmp_path / record.weights
    path.write_bytes(b"01234")
    assert weights_problem(tmp_path, record) == (
        "has 5 bytes where 10 were written (truncated or overwritten)")
    path.write_bytes(b"0123456788")
    assert weights_problem(tmp_path, record).startswith("is damaged: its SHA-256")
    unverified = BackupRecord(record.weights, 1)
    assert weights_problem(tmp_path, unverified) is None  # only has to be there
    path.unlink()
    assert weights_problem(tmp_path, unverified) == "is missing"


def test_only_the_backups_own_temporary_files_are_its_leftovers(tmp_path):
    ours = temp_name(WEIGHTS(4))  # today's names: pid and random part, then the file's
    assert ours.endswith(f"-{WEIGHTS(4)}") and ours != temp_name(WEIGHTS(4))
    for name in (".tmp-latest.json", f".tmp-{WEIGHTS(3)}", ours, ".tmp-notes.txt",
                 ".tmp-12-0badc0de-notes.txt", "notes.txt"):
        (tmp_path / name).write_text("x")
    assert sorted(path.name for path in temporary_files(tmp_path)) == sorted([
        ".tmp-latest.json", f".tmp-{WEIGHTS(3)}", ours])
