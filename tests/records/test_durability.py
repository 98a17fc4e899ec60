"""Durability of convert, resume and verify under interruptions, changed inputs and damage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    encode_jpeg,
    interrupt_convert_after,
    make_image_folder,
    random_pixels,
    small_image_dataset,
    spawned_children,
)

import tfopt
from tfopt.errors import DatasetError, OutputExistsError, SourceError
from tfopt.records.convert.output import staging_folder
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME


def _interrupted(monkeypatch, src, out, shards_done: int, **options) -> dict:
    """Convert ``src`` into ``out`` until ``shards_done`` shards are written, then stop as
    Ctrl-C does; return the folder's files and their bytes."""
    with monkeypatch.context() as patch:
        interrupt_convert_after(patch, shards_done)
        with pytest.raises(KeyboardInterrupt):
            tfopt.convert(src, out, workers=1, **options)
    assert not (out / MANIFEST_NAME).exists()
    return {path.name: path.read_bytes() for path in out.iterdir()}


def test_a_refused_resume_keeps_the_interrupted_work(image_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    options = dict(shards=4, seed=1)
    before = _interrupted(monkeypatch, image_folder, out, 2, **options)
    assert JOURNAL_NAME in before and len(before) == 3
    # another seed plans shards of the same names: refused, and nothing of the first run deleted
    with pytest.raises(DatasetError, match="other options"):
        tfopt.convert(image_folder, out, workers=1, resume=True, seed=2, shards=4)
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    result = tfopt.convert(image_folder, out, workers=1, resume=True, **options)
    assert result.resumed_shards == 2
    assert tfopt.verify(out).ok


def _add_array(src: Path) -> None:
    np.save(src / "extra.npy", np.arange(30, dtype=np.int32))


def _edit_csv_cell(src: Path) -> None:
    # the same length, so every row keeps its line and byte offset
    src.write_text(src.read_text().replace("2.5", "3.5"))


def _replace_image(src: Path) -> None:
    (src / "cat" / "002.jpg").write_bytes(encode_jpeg(random_pixels(7, 30, 30)))


def _replace_image_keeping_its_size(src: Path) -> None:
    # one byte of the entropy-coded data changed: same size, so only the file's time tells
    path = src / "cat" / "002.jpg"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def _numpy_source(tmp_path: Path) -> Path:
    src = tmp_path / "arrays"
    src.mkdir()
    np.save(src / "x.npy", np.arange(60, dtype=np.float32).reshape(30, 2))
    np.save(src / "label.npy", np.arange(30) % 3)
    return src


def _csv_source(tmp_path: Path) -> Path:
    src = tmp_path / "table.csv"
    src.write_text("a,b,label\n" + "".join(f"{i},{i % 7}.5,{i % 3}\n" for i in range(30)))
    return src


@pytest.mark.parametrize("make_source, change", [
    (_numpy_source, _add_array),
    (_csv_source, _edit_csv_cell),
    (lambda tmp_path: make_image_folder(tmp_path / "images"), _replace_image),
    (lambda tmp_path: make_image_folder(tmp_path / "images"), _replace_image_keeping_its_size),
], ids=["array-added", "csv-cell-edited", "image-replaced", "image-replaced-same-size"])
def test_resume_refuses_an_input_that_changed_since_the_interruption(
        tmp_path, monkeypatch, make_source, change):
    src = make_source(tmp_path)
    out = tmp_path / "out"
    before = _interrupted(monkeypatch, src, out, 1, shards=3)
    change(src)
    with pytest.raises(DatasetError, match="input changed"):
        tfopt.convert(src, out, workers=1, shards=3, resume=True)
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker process in /proc")
def test_a_killed_worker_process_keeps_the_work_for_resume(tmp_path):
    src = make_image_folder(tmp_path / "images", per_class=8)
    out = tmp_path / "out"
    args = ["--shards", "9", "--seed", "3", "--workers", "2", "-q"]
    command = [sys.executable, "-m", "tfopt", "convert", str(src), str(out), *args]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    # kill the worker process (as the OOM killer would) as soon as it exists: the shards handed
    # to it can then never arrive, however fast the main process writes its own
    while not (workers := spawned_children(process.pid)):
        assert process.poll() is None and time.monotonic() < deadline, "no worker process seen"
        time.sleep(0.005)
    os.kill(workers[0], signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    assert "process died" in stderr and "--resume" in stderr
    assert (out / JOURNAL_NAME).exists() and not (out / MANIFEST_NAME).exists()

    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    reference = tfopt.convert(src, tmp_path / "reference", workers=1, shards=9, seed=3)
    assert ([shard.sha256 for shard in tfopt.read_manifest(out).shards]
            == [shard.sha256 for shard in reference.manifest.shards])
    assert tfopt.verify(out).ok


@pytest.mark.skipif(sys.platform == "win32", reason="flock, SIGSTOP")
def test_a_second_run_beside_a_running_conversion_is_refused_and_leaves_it_whole(tmp_path):
    src = tmp_path / "images"
    tfopt.make_demo_data(src, count=400, classes=4, min_size=40, max_size=56, workers=1)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "tfopt", "convert", str(src), str(out), "--shards", "8",
               "--workers", "1", "-q"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    journal = out / JOURNAL_NAME
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_text().count("\n") >= 3):
        assert process.poll() is None and time.monotonic() < deadline, "no shard seen in time"
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGSTOP)  # mid-run, for as long as the second runs take
    try:
        during = {path.name: path.read_bytes() for path in out.iterdir()}
        # a --resume would otherwise take the running one's half-written shard for a killed
        # worker's leftover and delete it; a plain run or --overwrite would write beside it
        for options in ({}, {"resume": True}, {"overwrite": True}):
            with pytest.raises(OutputExistsError,
                               match="another 'tfopt convert' is writing there now"):
                tfopt.convert(src, out, workers=1, shards=8, **options)
        assert {path.name: path.read_bytes() for path in out.iterdir()} == during
    finally:
        os.killpg(process.pid, signal.SIGCONT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert tfopt.verify(out).ok
    assert not staging_folder(out).exists()


def test_a_truncated_npy_file_is_named_instead_of_failing_in_a_worker(tmp_path):
    src = tmp_path / "arrays"
    src.mkdir()
    np.save(src / "x.npy", np.ones((50, 8), np.float32))
    np.save(src / "label.npy", np.arange(50))
    data = (src / "x.npy").read_bytes()
    (src / "x.npy").write_bytes(data[: len(data) // 2])  # a copy cut short
    with pytest.raises(SourceError, match=r"x\.npy: truncated: .*\(1,600 bytes of data\), the file holds 736"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists()


def test_a_damaged_compressed_npz_member_is_named(tmp_path):
    src = tmp_path / "arrays.npz"
    rng = np.random.default_rng(0)
    np.savez_compressed(src, x=rng.random((50, 16)), label=np.arange(50))  # x: ~6 KB, first
    data = bytearray(src.read_bytes())
    data[1000:1010] = bytes(10)
    src.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"\[key 'x'\]: cannot be read, corrupt archive"):
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists()


def test_a_damaged_uncompressed_npz_member_is_named_before_anything_is_written(tmp_path):
    # uncompressed members are memory-mapped, past zipfile's CRC check: tfopt makes its own
    src = tmp_path / "arrays.npz"
    rng = np.random.default_rng(0)
    np.savez(src, x=rng.random((50, 16)), label=np.arange(50))  # x first: bytes ~200-6600
    data = bytearray(src.read_bytes())
    data[3000] ^= 0xFF  # one flipped byte in x's values: the file keeps its size
    src.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"\[key 'x'\]: damaged: its CRC-32 is "):
        tfopt.convert(src, tmp_path / "out", workers=1)
    assert not (tmp_path / "out").exists()


def test_a_conversion_interrupted_before_its_first_shard_is_called_incomplete(
        image_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    _interrupted(monkeypatch, image_folder, out, 0, shards=2)
    for command in (tfopt.verify, tfopt.inspect):
        with pytest.raises(DatasetError, match="incomplete dataset.*--resume"):
            command(out)


def _edit_manifest(dataset: Path, edit) -> None:
    import json

    path = dataset / MANIFEST_NAME
    data = json.loads(path.read_text())
    edit(data["splits"]["train"]["shards"])
    path.write_text(json.dumps(data))


@pytest.fixture
def dataset(image_folder, tmp_path) -> Path:
    return small_image_dataset(tmp_path, images=image_folder, shards=3)


def test_a_shard_listed_twice_is_a_problem(dataset):
    _edit_manifest(dataset, lambda shards: shards.append(dict(shards[0])))
    result = tfopt.verify(dataset)
    # the split's and the dataset's totals no longer add up either
    assert [(p.kind.value, Path(p.file).name) for p in result.problems] == [
        ("duplicate", "train-00000-of-00003.tfrecord")] + [("manifest", MANIFEST_NAME)] * 5
    assert "twice" in result.problems[0].detail


@pytest.mark.parametrize("field, value, expected", [
    ("file", "../elsewhere/train-00000-of-00003.tfrecord", "a file name in the dataset folder"),
    ("num_records", "ten", "expected an int >= 0"),
    ("sha256", None, "expected a string"),
])
def test_a_hand_edited_shard_entry_is_named_by_verify_and_inspect(dataset, field, value, expected):
    _edit_manifest(dataset, lambda shards: shards[0].update({field: value}))
    for command in (tfopt.verify, tfopt.inspect):
        with pytest.raises(DatasetError, match=f"unreadable manifest.*{field}.*{expected}"):
            command(dataset)


def test_a_folder_where_a_shard_should_be_is_reported_not_raised(dataset):
    shard = dataset / "train-00001-of-00003.tfrecord"
    shard.unlink()
    shard.mkdir()
    result = tfopt.verify(dataset)
    assert [(p.kind.value, Path(p.file).name) for p in result.problems] == [
        ("missing", shard.name)]
    with pytest.raises(DatasetError, match="missing"):
        tfopt.inspect(dataset)


def test_inspect_notes_a_count_that_differs_from_the_manifest(dataset):
    manifest = tfopt.read_manifest(dataset)
    (dataset / manifest.shards[2].file).write_bytes(b"")  # an empty file reads without an error
    info = tfopt.inspect(dataset)
    assert info.num_records == manifest.num_records - manifest.shards[2].num_records
    assert any(f"the manifest says {manifest.num_records}" in note and "tfopt verify" in note
               for note in info.notes)


def test_a_journal_left_beside_the_manifest_is_stale_not_a_problem(dataset, image_folder):
    # a kill between writing the manifest and removing the journal
    (dataset / JOURNAL_NAME).write_text('{"journal": 1, "fingerprint": "x"}\n')
    result = tfopt.verify(dataset)
    assert result.ok, result.problems
    assert any(JOURNAL_NAME in note and "complete" in note for note in result.notes)
    with pytest.raises(OutputExistsError, match="--overwrite") as refused:
        tfopt.convert(image_folder, dataset, workers=1, shards=3)
    assert "--resume" not in str(refused.value)


def test_a_stray_text_cell_in_a_column_of_numbers_is_named_in_a_warning(tmp_path, caplog):
    src = tmp_path / "table.csv"
    src.write_text("name,b,label\nann,2.5,0\nbob,n/a,1\ncid,4.5,0\n")
    result = tfopt.convert(src, tmp_path / "out", workers=1)
    assert result.manifest.feature("b").kind.value == "bytes"  # documented: inferred as text
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings  # not for 'name', text from its first cell
    assert f"{src}: column 'b' is read as text: line 3 holds 'n/a' after 1 number(s)" in warnings[0]


def test_entries_after_a_torn_journal_line_are_kept(image_folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    options = dict(shards=5, seed=1)
    _interrupted(monkeypatch, image_folder, out, 2, **options)
    journal = out / JOURNAL_NAME
    journal.write_bytes(journal.read_bytes()[:-30])  # killed while it wrote its last line
    with monkeypatch.context() as patch:  # a second interruption, one shard later
        interrupt_convert_after(patch, 1)
        with pytest.raises(KeyboardInterrupt):
            tfopt.convert(image_folder, out, workers=1, resume=True, **options)
    result = tfopt.convert(image_folder, out, workers=1, resume=True, **options)
    assert result.resumed_shards == 2  # the first untorn one and the one written after the tear
    assert tfopt.verify(out).ok
