"""``tfopt backups DIR``, run as a real process on the backups of a real fit: every version in
the folder and the copy with its state (verified, damaged, partial), newest first, and which
one a restore takes; the same as JSON; a folder that is not there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

keras = pytest.importorskip("keras")

from tests.train.backup_helpers import Interrupt, Recorder, train  # noqa: E402
from tests.train.s3_server import s3_endpoint, s3_url  # noqa: E402,F401  (fixtures)
from tfopt.train.backup import backup_callbacks  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def tfopt(*args):
    return subprocess.run([sys.executable, "-m", "tfopt", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def backups(tmp_path_factory):
    """A fit of 5 epochs stopped at the start of the 5th, keep=3, each backup copied; copy
    the folders before changing them."""
    root = tmp_path_factory.mktemp("backups")
    callbacks = backup_callbacks(root / "run", monitor="loss", keep=3, copy_to=root / "copy",
                                 copy_keep=2)
    with pytest.raises(Interrupt):
        train([*callbacks, Recorder(stop_at=4)], epochs=5)
    callbacks[0].copier.wait()
    return root


@pytest.fixture
def copied(backups, tmp_path):
    shutil.copytree(backups / "run", tmp_path / "run")
    shutil.copytree(backups / "copy", tmp_path / "copy")
    return tmp_path


def test_every_version_newest_first_and_the_one_a_restore_takes(copied):
    done = tfopt("backups", copied / "run", "--copy-to", copied / "copy")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"backups in {copied / 'run' / 'backup'} and {copied / 'copy'}, newest first:"
    rows = [line.split() for line in lines[2:-1]]
    # place, epoch, batch, date, time, state, file; the local file first on a tie
    assert [(r[0], r[1], r[5]) for r in rows] == [
        ("local", "4", "verified"), ("copy", "4", "verified"), ("local", "3", "verified"),
        ("copy", "3", "verified"), ("local", "2", "verified")]
    assert rows[0][6] == "weights-000004.weights.h5"
    assert lines[-1] == (f"restore: local {copied / 'run' / 'backup'}/weights-000004.weights.h5 "
                         "(after 4 epochs)")
    assert done.stderr == ""


def test_damaged_and_partial_versions_are_named_and_the_restore_skips_them(copied):
    folder, copy = copied / "run" / "backup", copied / "copy"
    newest = folder / "weights-000004.weights.h5"
    data = bytearray(newest.read_bytes())
    data[100] ^= 0xFF
    newest.write_bytes(bytes(data))
    # the copy of epoch 4 cut short before its record: a partial version
    (record,) = [p for p in copy.glob("weights-*-000004-*.json")]
    record.unlink()
    done = tfopt("backups", copied / "run", "--copy-to", copy, "--json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    states = [(v["place"], v["epoch"], v["state"]) for v in listing["versions"]]
    assert states == [("local", 4, "damaged"), ("local", 3, "verified"),
                      ("copy", 3, "verified"), ("local", 2, "verified"),
                      ("copy", None, "partial")]
    assert "SHA-256" in listing["versions"][0]["problem"]
    assert listing["restore"]["place"] == "local" and listing["restore"]["epoch"] == 3
    plain = tfopt("backups", copied / "run", "--copy-to", copy)
    assert "damaged   weights-000004.weights.h5: is damaged" in plain.stdout
    assert plain.stdout.splitlines()[-1].startswith("restore: local ")


def test_with_the_local_folder_gone_the_restore_is_the_copys_newest(backups, tmp_path):
    # the workdir lost, the same path given again (a new machine, the same command)
    shutil.copytree(backups / "copy", tmp_path / "copy")
    shutil.move(backups / "run", tmp_path / "run-aside")
    try:
        done = tfopt("backups", backups / "run", "--copy-to", tmp_path / "copy", "--json")
    finally:
        shutil.move(tmp_path / "run-aside", backups / "run")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert [v["place"] for v in listing["versions"]] == ["copy", "copy"]
    assert listing["restore"]["epoch"] == 4
    assert listing["restore"]["location"] == str(tmp_path / "copy")


def test_another_folders_training_in_the_copy_is_never_the_restore(copied):
    # a new training in another folder, given the copy_to of one that did not finish
    done = tfopt("backups", copied / "new-run", "--copy-to", copied / "copy", "--json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert [(v["place"], v["other_training"]) for v in listing["versions"]] == [
        ("copy", True), ("copy", True)]
    assert listing["restore"] is None
    plain = tfopt("backups", copied / "new-run", "--copy-to", copied / "copy")
    assert "verified (another training)" in plain.stdout
    assert plain.stdout.splitlines()[-1] == "restore: none: a fit starts from scratch"


def test_a_folder_that_is_not_there_is_one_line(tmp_path):
    done = tfopt("backups", tmp_path / "nothing")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"tfopt: error: {tmp_path / 'nothing'}: no such folder, and no --copy-to to look in. "
        "Hint: give the folder given to backup_callbacks or tfopt.Run's workdir"]
    empty = tmp_path / "empty"
    empty.mkdir()
    done = tfopt("backups", empty)
    assert done.returncode == 0
    assert done.stdout.strip() == f"no backups in {empty / 'backup'}: a fit would start from scratch"
    done = tfopt("backups", empty, "--copy-to", "nosuchproto://bucket/run")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("tfopt: error: --copy-to='nosuchproto://bucket/run': fsspec "
                                  "cannot open it") and done.stderr.count("\n") == 1


def test_the_versions_on_a_real_s3_server(tmp_path, s3_url):  # noqa: F811  (the fixture)
    callbacks = backup_callbacks(tmp_path / "run", monitor="loss", copy_to=s3_url)
    with pytest.raises(Interrupt):
        train([*callbacks, Recorder(stop_at=2)], epochs=3)
    callbacks[0].copier.wait()
    shutil.rmtree(tmp_path / "run")
    done = tfopt("backups", tmp_path / "run", "--copy-to", s3_url, "--json")
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert [(v["place"], v["epoch"], v["state"]) for v in listing["versions"]] == [
        ("copy", 2, "verified"), ("copy", 1, "verified")]
    assert listing["restore"]["location"] == s3_url and listing["restore"]["epoch"] == 2
