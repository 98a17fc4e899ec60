"""Hostile moments of a conversion, met by real ``tfopt convert`` processes: a CSV rewritten in
place with its size kept and its modification time put back, Ctrl-C twice (while the workers
stop, while they start, during the scan), SIGTERM then Ctrl-C, an error while the worker
processes start, Ctrl-C as the process exits after a conversion.

Each ends in one line and the shell's status, with no traceback from the main process or from
a worker (the output is read to its end, which every worker holding stderr must reach: a
worker's traceback would be in it), and nothing half-written: no temporary file, and every
shard in the folder journaled (an interruption keeps those for ``--resume``) or no folder at
all (an error keeps nothing)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_image_folder, one_error_line, spawned_children

import tfopt
from tfopt._files import is_temp_file
from tfopt.records.convert.journal import Journal
from tfopt.records.manifest import JOURNAL_NAME

pytestmark = pytest.mark.alone  # each catches a process at a moment: a busy neighbour shifts it

INTERRUPTED = "tfopt: WARNING: interrupted: finished shards are kept; run again with --resume"
CTRL_C = 128 + signal.SIGINT  # 130: the shell's status of a process that Ctrl-C ended


def csv_source(tmp_path: Path, rows: int = 120_000) -> Path:
    src = tmp_path / "table.csv"
    src.write_text("a,b,label\n" + "".join(f"{i},{i % 1000}.5,{i % 3}\n" for i in range(rows)))
    return src


def start(src: Path, dst: Path, *options: str, workers: int) -> subprocess.Popen:
    """``tfopt convert`` in its own process group, which a test's Ctrl-C reaches whole, as a
    terminal's does."""
    label = ["--label", "label"] if src.suffix == ".csv" else []
    return subprocess.Popen(
        [sys.executable, "-m", "tfopt", "convert", str(src), str(dst), "-q", "--workers",
         str(workers), *label, *options],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for(process: subprocess.Popen, condition, what: str) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert process.poll() is None, f"the conversion ended before {what}"
        assert time.monotonic() < deadline, f"no {what} after 60 s"
        time.sleep(0.002)


def writing(dst: Path):
    """Whether a shard is being written into ``dst`` (a temporary file or a shard there)."""
    return lambda: dst.is_dir() and any(is_temp_file(path) or path.suffix == ".tfrecord"
                                        for path in dst.iterdir())


def ctrl_c(process: subprocess.Popen, times: int = 1, gap: float = 0.0) -> None:
    for index in range(times):
        time.sleep(gap if index else 0.0)
        try:
            os.killpg(process.pid, signal.SIGINT)
        except ProcessLookupError:  # it had ended already
            return


def finish(process: subprocess.Popen) -> tuple[int, str]:
    """The status and stderr, read to its end: every worker that holds stderr has exited."""
    _, err = process.communicate(timeout=120)
    assert "Traceback" not in err and "Exception ignored" not in err, err[-4000:]
    return process.returncode, err


def assert_interrupted_cleanly(dst: Path, err: str) -> None:
    assert err.strip().splitlines() == [INTERRUPTED], err[-4000:]
    files = list(dst.iterdir())
    assert not [path.name for path in files if is_temp_file(path)]
    _, journaled = Journal(dst / JOURNAL_NAME).read()
    assert {path.name for path in files if ".tfrecord" in path.name} == set(journaled)


def rewrite_in_place(path: Path, old: bytes, new: bytes, start: int = 0, end: int | None = None):
    """Replace ``old`` by ``new`` (as long) between ``start`` and ``end``, the file's size kept
    and its modification time put back, as an editor or a copy that keeps times would."""
    assert len(old) == len(new)
    status = path.stat()
    data = path.read_bytes()
    end = len(data) if end is None else end
    data = data[:start] + data[start:end].replace(old, new) + data[end:]
    with open(path, "r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))


# -- a source rewritten in place --------------------------------------------------------------


@pytest.mark.parametrize("where, told", [
    # the first row: in a block that the snapshot samples, compared before the manifest
    ("first row", "its bytes differ, though its size and modification time do not"),
    # rows at the middle of the file, between sampled blocks: the workers' check of each row
    ("middle rows", "is no longer the row the scan read"),
])
def test_a_csv_rewritten_in_place_with_its_time_put_back_is_refused(tmp_path, where, told):
    src = csv_source(tmp_path)
    dst = tmp_path / "out"
    size = src.stat().st_size
    process = start(src, dst, "--shard-size", "256KB", workers=2)
    wait_for(process, writing(dst), "shard")
    if where == "first row":
        rewrite_in_place(src, b"0,0.5,0", b"0,9.5,0", end=20)
    else:  # 2 KB at the middle: its rows are in shards not written yet
        rewrite_in_place(src, b".5,", b".7,", size // 2 - 1000, size // 2 + 1000)
    code, err = finish(process)
    assert code == 1, err
    line = one_error_line(subprocess.CompletedProcess([], code, "", err))
    assert "the source changed while it was converted" in line and told in line, line
    assert not dst.exists()  # nothing of it kept: the folder it made is gone


def test_an_error_while_the_workers_start_stops_them_silently(tmp_path):
    # every row rewritten as the first shard starts: this process's own writer meets a changed
    # row at once, while the worker processes (5, on the test machine's 2 cores) still start
    src = csv_source(tmp_path)
    dst = tmp_path / "out"
    process = start(src, dst, "--shard-size", "256KB", workers=6)
    wait_for(process, writing(dst), "shard")
    rewrite_in_place(src, b".5,", b".7,", start=10)
    starting = spawned_children(process.pid)
    code, err = finish(process)
    assert code == 1, err
    assert "the source changed while it was converted" in one_error_line(
        subprocess.CompletedProcess([], code, "", err))
    assert starting, "no worker process was starting"
    assert not dst.exists()


# -- Ctrl-C, twice ----------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["csv", "images"])
def test_ctrl_c_twice_while_convert_stops_is_one_line_and_status_130(tmp_path, source):
    # images downscaled: this process's writer thread and the workers import TensorFlow to
    # decode, seconds that the stop does not wait for, and the import silences stderr (fd 2)
    # meanwhile; the one line must show all the same
    if source == "csv":
        src, options = csv_source(tmp_path), ("--shard-size", "256KB")
    else:
        src = make_image_folder(tmp_path / "images", per_class=40)
        options = ("--max-size", "16", "--shards", "12")
    dst = tmp_path / "out"
    process = start(src, dst, *options, workers=3)
    wait_for(process, writing(dst), "shard")
    ctrl_c(process, times=3, gap=0.3)  # the second and third while the workers stop
    code, err = finish(process)
    assert code == CTRL_C, err
    assert_interrupted_cleanly(dst, err)


def test_ctrl_c_twice_while_the_workers_start_is_one_line(tmp_path):
    src = csv_source(tmp_path)
    dst = tmp_path / "out"
    process = start(src, dst, "--shard-size", "256KB", workers=8)
    wait_for(process, lambda: spawned_children(process.pid), "worker process")
    ctrl_c(process, times=2, gap=0.2)
    code, err = finish(process)
    assert code == CTRL_C, err
    assert_interrupted_cleanly(dst, err)


def test_ctrl_c_twice_during_the_scan_is_one_line(tmp_path):
    src = csv_source(tmp_path, rows=400_000)
    dst = tmp_path / "out"
    process = start(src, dst, workers=2)
    fds = Path(f"/proc/{process.pid}/fd")

    def reading_the_source() -> bool:  # the snapshot, then the scan, hold the CSV open
        for fd in fds.iterdir():
            try:
                target = os.readlink(fd)
            except FileNotFoundError:  # closed between the listing and the look
                continue
            if target == str(src.resolve()):
                return True
        return False

    wait_for(process, reading_the_source, "read of the source")
    ctrl_c(process, times=2, gap=0.1)
    code, err = finish(process)
    assert code == CTRL_C, err
    assert err.strip().splitlines() == ["tfopt: interrupted"], err
    assert not dst.exists()


def test_sigterm_then_ctrl_c_is_one_line_and_status_143(tmp_path):
    src = csv_source(tmp_path)
    dst = tmp_path / "out"
    process = start(src, dst, "--shard-size", "256KB", workers=3)
    wait_for(process, writing(dst), "shard")
    os.killpg(process.pid, signal.SIGTERM)  # a service manager's stop, to the whole group
    time.sleep(0.2)  # apart: two signals pending at once are handled by number, SIGINT first
    ctrl_c(process, times=2, gap=0.2)
    code, err = finish(process)
    assert code == 128 + signal.SIGTERM, err
    assert err.strip().splitlines() == [
        "tfopt: WARNING: stopped by SIGTERM: finished shards are kept; run again with --resume"]
    assert not [path.name for path in dst.iterdir() if is_temp_file(path)]


def test_ctrl_c_as_the_process_exits_after_a_conversion_prints_no_traceback(tmp_path):
    # 7 worker processes for 8 small shards: some still start when the others have written
    # every shard, and the pool is stopped with them starting
    src = csv_source(tmp_path, rows=20_000)
    dst = tmp_path / "out"
    process = start(src, dst, "--shards", "8", workers=8)
    wait_for(process, lambda: (dst / "manifest.json").exists(), "manifest")
    ctrl_c(process, times=2, gap=0.05)
    code, err = finish(process)
    # 0: it ended first; 130: the interruption answered; -2: the second Ctrl-C came as the
    # interpreter exited, where Python's default handler is back (a shell shows 130 for it too)
    assert code in (0, CTRL_C, -signal.SIGINT), err
    assert len(err.strip().splitlines()) <= 1, err  # "interrupted", if it came before the end
    assert tfopt.verify(dst).ok
