"""convert against hostile file-system entries: named pipes, sockets, devices, links that loop or
point nowhere, folders it may not read or write, and SIGTERM. Each is one `tfopt: error:` line
naming the path (or, with --on-error skip, a skipped item with its reason), nothing left written,
never a traceback or a hang; SIGTERM is answered as Ctrl-C is.

Runs convert as a real TensorFlow-free process where a regression would hang (a pipe blocks
open() for good), with a timeout that turns the hang into a failure.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from conftest import one_error_line

import tfopt
from tfopt.records.manifest import JOURNAL_NAME, MANIFEST_NAME, read_manifest
from tfopt.records.sources import BadItem, SourceKind, open_reader
from tfopt.records.sources.paths import UnreadableFile, read_regular_file

RUN_TIMEOUT = 60  # seconds; a convert that blocks on a pipe would otherwise hang the suite
REPO = Path(__file__).resolve().parents[2]


def png(side: int, value: int = 0) -> bytes:
    """A one-colour RGB PNG, written without TensorFlow."""
    raw = (b"\0" + bytes([value]) * (side * 3)) * side

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def image_folder(root: Path, classes=("a", "b"), per_class: int = 3, side: int = 8) -> Path:
    data = png(side)
    for name in classes:
        (root / name).mkdir(parents=True)
        for index in range(per_class):
            (root / name / f"{index}.png").write_bytes(data)
    return root


def run_convert(*args, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tfopt", "convert", *map(str, args), "--workers", "1", "-q"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}, **popen)


def error_line(result: subprocess.CompletedProcess) -> str:
    """The message of the run's single `tfopt: error:` line, without that prefix."""
    return one_error_line(result).removeprefix("tfopt: error: ")


def skipped_reasons(dataset: Path) -> dict[str, str]:
    return {item.path: item.reason for item in read_manifest(dataset).skipped}


# -- special files among the images -----------------------------------------------------------


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "is a named pipe (FIFO), not a regular file"


def _socket(path: Path) -> str:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # the socket file stays
    return "is a socket, not a regular file"


def _device(path: Path) -> str:
    path.symlink_to("/dev/null")  # the link is followed: what it names is a device
    return "is a character device, not a regular file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes and Unix sockets")
@pytest.mark.parametrize("make", [_fifo, _socket, _device], ids=["fifo", "socket", "device"])
def test_a_special_file_among_the_images_is_refused_named_or_skipped(tmp_path, make):
    src = image_folder(tmp_path / "images")
    special = src / "a" / "pipe.jpg"
    expected = make(special)
    refused = run_convert(src, tmp_path / "out")
    assert error_line(refused).startswith(f"{special}: {expected}")
    assert not (tmp_path / "out").exists()

    skipped = run_convert(src, tmp_path / "out", "--on-error", "skip")
    assert skipped.returncode == 0, skipped.stderr
    assert skipped_reasons(tmp_path / "out")[str(special)].startswith(expected)
    assert read_manifest(tmp_path / "out").num_records == 6
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_pipe_put_in_place_of_an_image_after_the_scan_is_a_bad_item_not_a_hang(tmp_path):
    src = image_folder(tmp_path / "images", per_class=1)
    target = src / "a" / "0.png"
    target.unlink()
    os.mkfifo(target)  # a worker reads what the scan saw as a regular file
    read = open_reader(SourceKind.IMAGES, {"root": str(src), "max_size": None, "quality": 90,
                                           "check": "structure",
                                           "max_pixels": None})
    with pytest.raises(BadItem) as bad:
        read(("a/0.png", 0))
    assert bad.value.where == str(target) and "named pipe (FIFO)" in bad.value.reason
    with pytest.raises(UnreadableFile, match="named pipe"):
        read_regular_file(target)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_pipe_among_npy_files_is_refused_named(tmp_path):
    import numpy as np

    src = tmp_path / "arrays"
    src.mkdir()
    np.save(src / "x.npy", np.zeros((4, 2), dtype=np.float32))
    np.save(src / "y.npy", np.arange(4))
    os.mkfifo(src / "z.npy")
    assert error_line(run_convert(src, tmp_path / "out")).startswith(
        f"{src / 'z.npy'}: is a named pipe (FIFO)")
    assert not (tmp_path / "out").exists()


# -- links that loop or point nowhere, and devices as the source ------------------------------


def test_a_class_entry_that_links_to_itself_is_named_and_skippable(tmp_path):
    src = image_folder(tmp_path / "images")
    loop = src / "loop"
    loop.symlink_to("loop")
    assert error_line(run_convert(src, tmp_path / "out")) == (
        f"{loop}: is a symbolic link that loops (it points back at itself, directly or "
        "through other links); point it at a real file or folder")
    assert not (tmp_path / "out").exists()

    skipped = run_convert(src, tmp_path / "out", "--on-error", "skip")
    assert skipped.returncode == 0, skipped.stderr
    assert "symbolic link that loops" in skipped_reasons(tmp_path / "out")[str(loop)]
    assert read_manifest(tmp_path / "out").class_names == ["a", "b"]


def test_an_image_link_that_loops_is_named(tmp_path):
    src = image_folder(tmp_path / "images")
    loop = src / "b" / "x.png"
    loop.symlink_to("y.png")
    (src / "b" / "y.png").symlink_to("x.png")
    assert error_line(run_convert(src, tmp_path / "out")).startswith(
        f"{loop}: is a symbolic link that loops")


@pytest.mark.parametrize("which", ["source", "destination"])
def test_a_self_referential_source_or_destination_link_is_one_line(tmp_path, which):
    src = image_folder(tmp_path / "images")
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    args = (loop, tmp_path / "out") if which == "source" else (src, loop)
    line = error_line(run_convert(*args))
    assert line.startswith(f"{loop}: is a symbolic link that loops"), line
    assert not (tmp_path / "out").exists()


def test_a_dangling_source_link_says_where_it_points(tmp_path):
    link = tmp_path / "photos"
    link.symlink_to(tmp_path / "moved-away")
    assert error_line(run_convert(link, tmp_path / "out")) == (
        f"{link}: is a symbolic link to '{tmp_path / 'moved-away'}', which does not exist")


@pytest.mark.parametrize("kind", [None, "images", "numpy", "csv"])
def test_a_device_as_the_source_is_refused_before_anything_is_written(tmp_path, kind):
    result = run_convert("/dev/zero", tmp_path / "D", *(["--from", kind] if kind else []))
    assert error_line(result) == (
        "/dev/zero: is a character device, neither a regular file nor a folder; a source is a "
        "folder, or a .npz, .npy, .csv or .tsv file")
    assert not (tmp_path / "D").exists()


# -- folders this user may not read or write --------------------------------------------------


def _permissions_apply(tmp_path: Path) -> bool:
    """Whether file permissions hold this process, tried on a file made unreadable."""
    probe = tmp_path / "probe"
    probe.write_text("")
    probe.chmod(0)
    try:
        with open(probe):
            return False
    except PermissionError:
        return True
    finally:
        probe.chmod(0o600)
        probe.unlink()


@pytest.fixture
def permissions(tmp_path):
    """Skip where permissions do not hold: as root (os.geteuid() == 0), which reads and writes
    anything. Tried rather than taken from the user id alone, so that a root without that power
    (its capabilities dropped, as in a hardened container) runs the tests too."""
    if not _permissions_apply(tmp_path):
        pytest.skip(f"file permissions do not apply to this process (euid {os.geteuid()})")


def test_an_unreadable_class_folder_is_said_to_be_unreadable_not_empty(tmp_path, permissions):
    src = image_folder(tmp_path / "images")
    locked = src / "b"
    locked.chmod(0)
    try:
        assert error_line(run_convert(src, tmp_path / "out")) == (
            f"{locked}: cannot be read (Permission denied)")
        assert not (tmp_path / "out").exists()
        skipped = run_convert(src, tmp_path / "out", "--on-error", "skip")
        assert skipped.returncode == 0, skipped.stderr
        assert skipped_reasons(tmp_path / "out") == {
            str(locked): "cannot be read (Permission denied)"}
    finally:
        locked.chmod(0o755)


def test_an_existing_destination_this_user_cannot_write_is_one_line(tmp_path, permissions):
    src = image_folder(tmp_path / "images")
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        assert error_line(run_convert(src, out)) == (
            f"{out}: cannot write the dataset there (no write permission for this user); "
            "choose a folder you can write to, or change its permissions")
        assert list(out.iterdir()) == []
    finally:
        out.chmod(0o755)


def test_a_journal_this_user_cannot_read_is_one_line(tmp_path, permissions):
    src = image_folder(tmp_path / "images")
    out = tmp_path / "out"
    out.mkdir()
    journal = out / JOURNAL_NAME
    journal.write_text(json.dumps({"journal": 1, "fingerprint": "f"}) + "\n")
    journal.chmod(0)
    try:
        line = error_line(run_convert(src, out, "--resume"))
        assert line.startswith(f"{journal}: cannot read convert's journal (Permission denied)")
        assert sorted(p.name for p in out.iterdir()) == [JOURNAL_NAME]
    finally:
        journal.chmod(0o644)


# -- SIGTERM ----------------------------------------------------------------------------------

SHARDS = 20


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")
@pytest.mark.parametrize("to", ["process", "group"])
def test_sigterm_mid_convert_keeps_the_finished_shards_for_resume(tmp_path, to):
    # large one-colour PNGs: a few KB each, but their check inflates megabytes, so that the
    # conversion is still running when the signal comes
    src = image_folder(tmp_path / "images", classes=("a", "b", "c", "d"), per_class=25,
                       side=800)
    out = tmp_path / "out"
    # a group of its own: "group" signals the whole of it, as a service manager stops a job
    process = subprocess.Popen(
        [sys.executable, "-m", "tfopt", "convert", str(src), str(out), "--shards", str(SHARDS),
         "--workers", "2", "-q", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    journal = out / JOURNAL_NAME
    deadline = time.monotonic() + RUN_TIMEOUT
    while not (journal.exists() and journal.read_text().count("\n") >= 3):  # 2 shards in
        assert process.poll() is None and time.monotonic() < deadline, "too late to signal"
        time.sleep(0.005)
    (os.killpg if to == "group" else os.kill)(process.pid, signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=RUN_TIMEOUT)

    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert stderr.splitlines() == [
        "tfopt: WARNING: stopped by SIGTERM: finished shards are kept; run again with --resume"]
    assert json.loads(stdout) == {
        "error": "stopped by SIGTERM: finished shards are kept; run again with --resume",
        "exit_code": 143}
    journaled = len(journal.read_text().splitlines()) - 1
    assert 2 <= journaled < SHARDS
    names = {path.name for path in out.iterdir()}
    assert MANIFEST_NAME not in names
    assert not [name for name in names if name.startswith(".") and name != JOURNAL_NAME]

    result = tfopt.convert(src, out, workers=1, shards=SHARDS, resume=True)
    assert result.resumed_shards >= 2 and result.num_records == 100
    assert tfopt.verify(out).ok
