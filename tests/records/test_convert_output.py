"""The output folder of convert (records/convert/output.py): existing data refused without
overwrite, files tfopt did not write never removed; --overwrite keeps the old dataset until the
new one is complete; nested folders are refused; a Ctrl-C in a terminal ends with one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    interrupt_convert_after,
    make_image_folder,
    small_image_dataset,
    spawned_children,
)

import tfopt
from tfopt.errors import DatasetError, InvalidArgumentError, OutputExistsError, SourceError
from tfopt.records.convert import output
from tfopt.records.convert.output import staging_folder
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME, read_manifest


def _files(folder: Path) -> dict:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


def _hidden_siblings(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.parent.iterdir() if path.name.startswith("."))


@pytest.fixture
def old_dataset(image_folder, tmp_path) -> Path:
    return small_image_dataset(tmp_path, images=image_folder, shards=2)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:200])


def test_an_overwrite_that_fails_on_a_bad_image_keeps_the_old_dataset(old_dataset, tmp_path):
    before = _files(old_dataset)
    bad = make_image_folder(tmp_path / "bad", per_class=4)
    _truncate(bad / "dog" / "002.jpg")
    with pytest.raises(SourceError, match="002.jpg"):
        tfopt.convert(bad, old_dataset, workers=1, shards=3, overwrite=True)
    assert _files(old_dataset) == before
    assert tfopt.verify(old_dataset).ok
    assert _hidden_siblings(old_dataset) == []  # the staging folder is gone


def _interrupted_overwrite(monkeypatch, src, out, **options) -> None:
    with monkeypatch.context() as patch:
        interrupt_convert_after(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            tfopt.convert(src, out, workers=1, overwrite=True, **options)


def test_an_interrupted_overwrite_keeps_the_old_dataset_and_resumes(
        old_dataset, image_folder, tmp_path, monkeypatch):
    before = _files(old_dataset)
    new = dict(shards=4, seed=5)
    _interrupted_overwrite(monkeypatch, image_folder, old_dataset, **new)
    assert _files(old_dataset) == before and tfopt.verify(old_dataset).ok
    staging = staging_folder(old_dataset)
    assert (staging / JOURNAL_NAME).exists() and len(list(staging.glob("*.tfrecord"))) == 2
    # a plain run neither deletes the staged work nor mixes with it
    with pytest.raises(OutputExistsError, match="interrupted --overwrite.*--resume"):
        tfopt.convert(image_folder, old_dataset, workers=1, **new)
    result = tfopt.convert(image_folder, old_dataset, workers=1, resume=True, **new)
    assert result.resumed_shards == 2
    reference = tfopt.convert(image_folder, tmp_path / "reference", workers=1, **new)
    assert ([shard.sha256 for shard in tfopt.read_manifest(old_dataset).shards]
            == [shard.sha256 for shard in reference.manifest.shards])
    assert sorted(_files(old_dataset)) == sorted(_files(tmp_path / "reference"))
    assert tfopt.verify(old_dataset).ok
    assert _hidden_siblings(old_dataset) == []


def test_an_overwrite_after_an_interrupted_one_starts_again(
        old_dataset, image_folder, monkeypatch, caplog):
    _interrupted_overwrite(monkeypatch, image_folder, old_dataset, shards=4, seed=5)
    result = tfopt.convert(image_folder, old_dataset, workers=1, overwrite=True, shards=3)
    assert result.resumed_shards == 0 and len(result.manifest.shards) == 3
    assert any("removed" in record.getMessage() and "interrupted --overwrite" in record.getMessage()
               for record in caplog.records)
    assert tfopt.verify(old_dataset).ok and _hidden_siblings(old_dataset) == []


@pytest.mark.parametrize("killed_at", ["moving-old-out", "moving-new-in", "cleaning-up"])
def test_a_kill_during_the_swap_is_set_right_by_the_next_run(
        old_dataset, image_folder, monkeypatch, killed_at):
    before = _files(old_dataset)
    new = dict(shards=4, seed=5)
    real_move = output._move_all
    calls = []

    def move_then_die(source, target, names):
        calls.append(source)
        names = list(names)
        if (killed_at, len(calls)) in (("moving-old-out", 1), ("moving-new-in", 2)):
            real_move(source, target, names[:2])  # killed after two files
            raise KeyboardInterrupt
        real_move(source, target, names)

    def remove_then_die(folder):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(output, "_move_all", move_then_die)
        if killed_at == "cleaning-up":
            patch.setattr(output, "_remove_ours", remove_then_die)
        with pytest.raises(KeyboardInterrupt):
            tfopt.convert(image_folder, old_dataset, workers=1, overwrite=True, **new)
    if killed_at != "cleaning-up":
        with pytest.raises(DatasetError, match="killed while it replaced"):
            tfopt.read_manifest(old_dataset)
    # the next run, even one that is refused, first puts the folder right
    with pytest.raises(OutputExistsError):
        tfopt.convert(image_folder, old_dataset, workers=1, **new)
    assert tfopt.verify(old_dataset).ok
    if killed_at == "cleaning-up":  # the new dataset was complete
        assert tfopt.read_manifest(old_dataset).options["seed"] == 5
        assert _hidden_siblings(old_dataset) == []
        return
    assert _files(old_dataset) == before
    result = tfopt.convert(image_folder, old_dataset, workers=1, resume=True, **new)
    assert result.resumed_shards == 4
    assert tfopt.verify(old_dataset).ok and _hidden_siblings(old_dataset) == []


@pytest.mark.parametrize("layout", ["dst-in-src", "src-in-dst", "same", "dst-in-src-by-link"])
def test_a_destination_inside_the_source_or_around_it_is_refused(image_folder, tmp_path, layout):
    link = tmp_path / "link"
    link.symlink_to(image_folder)
    src, dst = {
        "dst-in-src": (image_folder, image_folder / "out"),
        "src-in-dst": (image_folder / "cat", image_folder),
        "same": (image_folder, link),
        "dst-in-src-by-link": (link, image_folder / "out"),
    }[layout]
    with pytest.raises(InvalidArgumentError) as refused:
        tfopt.convert(src, dst, workers=1)
    message = str(refused.value)
    assert str(src) in message and str(dst) in message and "\n" not in message
    assert message.startswith("source" if layout == "src-in-dst" else "destination")
    assert not (image_folder / "out").exists()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker process in /proc")
@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_an_interrupted_overwrite_process_keeps_the_old_dataset(tmp_path, how):
    src = tmp_path / "images"
    tfopt.make_demo_data(src, count=400, classes=4, min_size=40, max_size=56, workers=1)
    out = tmp_path / "out"
    tfopt.convert(src, out, workers=1, shards=2)
    before = _files(out)
    new = ["--shards", "8", "--seed", "3"]
    # its own process group: a terminal sends Ctrl-C's SIGINT to every process of the group
    process = subprocess.Popen(
        [sys.executable, "-m", "tfopt", "convert", str(src), str(out), "--overwrite",
         "--workers", "2", "-q", *new],
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    # Ctrl-C while the worker process still imports TensorFlow; kill -9 once shards are in
    journal = staging_folder(out) / JOURNAL_NAME
    while not (spawned_children(process.pid) if how == "ctrl-c"
               else journal.exists() and journal.read_text().count("\n") >= 3):
        assert process.poll() is None and time.monotonic() < deadline, "too late to interrupt"
        time.sleep(0.005)
    if how == "ctrl-c":
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=60)
    if how == "ctrl-c":
        assert process.returncode == 128 + signal.SIGINT, stderr  # 130, as a shell reports it
        assert "Traceback" not in stderr and "Aborted" not in stderr, stderr
        assert stderr.strip().splitlines()[-1].startswith(
            "tfopt: WARNING: interrupted: finished shards are kept; run again with --resume")
    assert _files(out) == before
    assert tfopt.verify(out).ok
    result = tfopt.convert(src, out, workers=1, resume=True, shards=8, seed=3)
    assert tfopt.read_manifest(out).options["seed"] == 3 and len(result.manifest.shards) == 8
    assert tfopt.verify(out).ok and _hidden_siblings(out) == []


def test_a_mount_point_destination_keeps_the_staging_folder_inside(
        old_dataset, image_folder, tmp_path, monkeypatch):
    # a rename cannot leave a file system, so beside a mount point would not do
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount",
                        lambda path: Path(path) == old_dataset or real_ismount(path))
    before = _files(old_dataset)
    _interrupted_overwrite(monkeypatch, image_folder, old_dataset, shards=4, seed=5)
    assert staging_folder(old_dataset) == old_dataset / ".tfopt-new"
    # every shard checks out, and verify notes the staging folder instead of calling it extra
    report = tfopt.verify(old_dataset)
    assert report.problems == [] and any(".tfopt-new" in note for note in report.notes)
    assert _files(old_dataset) == before
    result = tfopt.convert(image_folder, old_dataset, workers=1, resume=True, shards=4, seed=5)
    assert result.resumed_shards == 2
    assert sorted(path.name for path in old_dataset.iterdir()) == sorted(
        [MANIFEST_NAME, *(shard.file for shard in result.manifest.shards)])
    assert tfopt.verify(old_dataset).ok and _hidden_siblings(old_dataset) == []


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_a_second_run_is_refused_while_one_writes_the_staging_folder(
        old_dataset, image_folder, monkeypatch):
    import fcntl

    _interrupted_overwrite(monkeypatch, image_folder, old_dataset, shards=4, seed=5)
    staging = staging_folder(old_dataset)
    staged = _files(staging)
    holder = os.open(staging, os.O_RDONLY)  # as a running conversion holds it
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        for options in ({"overwrite": True}, {"resume": True}):
            with pytest.raises(OutputExistsError, match="another 'tfopt convert"):
                tfopt.convert(image_folder, old_dataset, workers=1, shards=4, seed=5, **options)
        assert _files(staging) == staged
    finally:
        os.close(holder)
    result = tfopt.convert(image_folder, old_dataset, workers=1, shards=4, seed=5, resume=True)
    assert result.resumed_shards == 2 and tfopt.verify(old_dataset).ok


def test_existing_output_is_refused_then_replaced_with_overwrite(image_folder, tmp_path):
    out = tmp_path / "out"
    first = tfopt.convert(image_folder, out, workers=1, shards=2)
    with pytest.raises(OutputExistsError, match="--overwrite"):
        tfopt.convert(image_folder, out, workers=1, shards=2)
    assert read_manifest(out) == first.manifest  # untouched by the refusal
    second = tfopt.convert(image_folder, out, workers=1, shards=3, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MANIFEST_NAME] + [s.file for s in second.manifest.shards])


def test_overwrite_never_deletes_files_tfopt_did_not_write(image_folder, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    for kwargs in ({}, {"overwrite": True}):
        with pytest.raises(OutputExistsError, match="thesis.tex"):
            tfopt.convert(image_folder, out, workers=1, **kwargs)
    assert (out / "thesis.tex").read_text() == "precious"
