"""Hostile launches, each met by a real ``tfopt launch`` process: more workers than the machine
can start, and workers whose own children ignore SIGTERM.

What holds for each: no traceback; a refusal is one ``tfopt: error:`` line with exit code 1,
given before any worker starts; and when the launcher has exited, no process of the job is
left (the workers, their children, anything in their process groups), found through ``/proc``
by the pids the workers wrote, never by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HANG_S = 90  # far beyond any case's run on a busy 2-core machine

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="processes are looked up in /proc")

# Runs the CLI as `python -m tfopt` does, after setting the launcher's soft open-file limit
# (argv[1]; "-" leaves it) and SIGINT to its default: a test runner's background process may
# start with SIGINT ignored, and the launcher then rightly keeps ignoring it.
TFOPT = textwrap.dedent("""
    import resource, runpy, signal, sys
    if sys.argv[1] != "-":
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.argv = ["tfopt", *sys.argv[2:]]
    runpy.run_module("tfopt", run_name="__main__", alter_sys=True)
""")


def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONSTARTUP", None)
    return env


def start_tfopt(*args: str, open_files: int | None = None) -> subprocess.Popen:
    # its own session: a signal the test sends reaches the launcher alone, as from `kill`
    return subprocess.Popen(
        [sys.executable, "-c", TFOPT, str(open_files or "-"), *args], env=_env(), text=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True)


def finish(process: subprocess.Popen) -> tuple[str, str]:
    try:
        return process.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        pytest.fail(f"tfopt hung for {HANG_S} s")


def assert_one_line_refusal(returncode: int, stdout: str, stderr: str, *needles: str) -> None:
    assert "Traceback" not in stdout + stderr, stderr
    assert returncode == 1, (returncode, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfopt: error: "), stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- more workers than the machine can start ----------------------------------------------


def writes(marker: Path) -> list[str]:
    """A worker command that leaves ``marker`` behind: it shows whether any worker started."""
    return [sys.executable, "-c", f"open({str(marker)!r}, 'a').close()"]


@pytest.mark.parametrize("args", [
    ["launch", "-n", "100000"],
    ["launch", "--grace", "1", "-n", "100000", "--"],
])
def test_a_hundred_thousand_workers_are_refused_at_once(tmp_path, args):
    # there are fewer ports than that on any machine, and fewer open files here: before this,
    # 26 s of starts ending in "OSError: Too many open files"
    marker = tmp_path / "started"
    started = time.monotonic()
    process = start_tfopt(*args, *writes(marker))
    stdout, stderr = finish(process)
    seconds = time.monotonic() - started
    assert_one_line_refusal(process.returncode, stdout, stderr,
                            "workers=100000: expected at most ", " here: ")
    assert not marker.exists()  # refused before any worker started
    # the refusal reads limits, it starts nothing: this is Python's start-up and the CLI's
    # import, under a second on an idle machine, whatever the load far below the 26 s it took
    assert seconds < 20, seconds


def test_print_tf_config_of_a_hundred_thousand_workers_is_refused_at_once():
    process = start_tfopt("launch", "--print-tf-config", "-n", "100000")
    stdout, stderr = finish(process)
    assert_one_line_refusal(process.returncode, stdout, stderr, "workers=100000: expected at most")
    assert stdout == ""


@linux_only
def test_more_workers_than_the_open_file_limit_allows_are_refused_naming_it(tmp_path):
    # 200 workers under a soft limit of 256 open files (2 pipes each): the line names the
    # limit and the ulimit -n that would do
    marker = tmp_path / "started"
    process = start_tfopt("launch", "-n", "200", *writes(marker), open_files=256)
    stdout, stderr = finish(process)
    assert_one_line_refusal(process.returncode, stdout, stderr, "workers=200: expected at most",
                            "open-file limit (ulimit -n) is 256", "ulimit -n ")
    assert not marker.exists()


# -- a worker's children that ignore SIGTERM -----------------------------------------------------


# A worker that writes its pid to PIDS/w<INDEX>, starts a grandchild that ignores SIGTERM and
# SIGINT and writes its own pid to PIDS/g<INDEX>, waits until both workers' have, says "ready", then ends
# as argv[2] says: exit 0, exit 3 (worker 1 only; worker 0 sleeps), or sleep until the
# launcher's signal.
WORKER = textwrap.dedent("""
    import json, os, subprocess, sys, time
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    pids, end = sys.argv[1], sys.argv[2]
    def note(name, pid):
        path = os.path.join(pids, name)
        with open(path + ".tmp", "w") as handle:
            handle.write(str(pid))
        os.replace(path + ".tmp", path)
    note(f"w{index}", os.getpid())
    grandchild = (
        "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "signal.signal(signal.SIGINT, signal.SIG_IGN); "
        "path = sys.argv[1]; open(path + '.tmp', 'w').write(str(os.getpid())); "
        "os.replace(path + '.tmp', path); time.sleep(120)")
    subprocess.Popen([sys.executable, "-c", grandchild, os.path.join(pids, f"g{index}")])
    # both workers' grandchildren, not only this one's: worker 1 failing stops worker 0, which
    # must have started its grandchild by then for the test to look for it
    deadline = time.monotonic() + 60
    while (not all(os.path.exists(os.path.join(pids, f"g{other}")) for other in (0, 1))
           and time.monotonic() < deadline):
        time.sleep(0.02)
    print("ready", flush=True)
    if end == "exit":
        sys.exit(0)
    if end == "fail":
        sys.exit(3) if index == 1 else time.sleep(120)
    time.sleep(120)
""")


def live_processes_of(pgids: set[int]) -> list[int]:
    """Pids of processes that are not zombies and belong to one of the groups ``pgids``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) in pgids and fields[0] not in ("Z", "X"):
                found.append(int(entry))
    return found


def is_gone(pid: int) -> bool:
    """No such process, or only its zombie (dead, not yet reaped by its new parent)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@linux_only
@pytest.mark.parametrize("end, signum, code", [
    ("exit", None, 0),  # every worker ends well, their children do not
    ("fail", None, 3),  # worker 1 fails: the others are stopped, and every child
    ("sleep", signal.SIGTERM, 143),  # the launcher is told to stop
    ("sleep", signal.SIGINT, 130),  # Ctrl-C
])
def test_no_process_of_the_job_outlives_the_launcher(tmp_path, end, signum, code):
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "worker.py").write_text(WORKER)
    process = start_tfopt("launch", "-n", "2", "--grace", "1", sys.executable,
                          str(tmp_path / "worker.py"), str(pids), end)
    try:
        if signum is not None:
            ready = 0
            deadline = time.monotonic() + HANG_S
            while ready < 2 and time.monotonic() < deadline:
                line = process.stdout.readline()
                if not line:
                    break
                ready += line.strip().endswith("] ready")
            assert ready == 2, process.stderr.read()
            process.send_signal(signum)
        stdout, stderr = finish(process)
        # the launcher's own lines: a worker's KeyboardInterrupt at Ctrl-C is the worker's
        own = [line for line in (stdout + stderr).splitlines()
               if not line.startswith("[worker ")]
        assert not any("Traceback" in line for line in own), stderr
        assert process.returncode == code, stderr
        workers = {int((pids / f"w{index}").read_text()) for index in range(2)}
        grandchildren = [int((pids / f"g{index}").read_text()) for index in range(2)]
        # what is left the moment the launcher has exited: nothing of the workers' groups
        assert live_processes_of(workers) == []
        assert [pid for pid in grandchildren if not is_gone(pid)] == []
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
        for name in os.listdir(pids):  # a failed run must not leave its sleepers here either
            if not name.endswith(".tmp"):
                pid = int((pids / name).read_text())
                if not is_gone(pid):
                    os.kill(pid, signal.SIGKILL)


def _peak_rss_kib(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines()
                 if line.startswith("VmHWM:")), 0)


@linux_only
def test_a_worker_printing_one_endless_line_does_not_fill_the_launchers_memory(tmp_path):
    # 300 MB on one line, written a megabyte at a time (the worker holds none of it whole)
    script = tmp_path / "loud.py"
    script.write_text("import sys\nfor _ in range(300):\n    sys.stdout.write('x' * 1_000_000)\n"
                      "sys.stdout.write('\\nafter\\n')\n")
    process = start_tfopt("launch", "-n", "1", "--", sys.executable, str(script))
    peak, chunks = 0, []
    reader = threading.Thread(
        target=lambda: chunks.append(process.stdout.read()), daemon=True)
    reader.start()
    deadline = time.monotonic() + HANG_S
    while process.poll() is None and time.monotonic() < deadline:
        peak = max(peak, _peak_rss_kib(process.pid))
        time.sleep(0.05)
    _, stderr = finish(process)
    reader.join(10)
    assert process.returncode == 0, stderr[-2000:]
    out = chunks[0] if chunks else ""
    assert "more bytes of the line above not shown" in out and "after" in out
    assert len(out) < 1_000_000  # cut, not relayed whole
    assert peak < 200 * 1024, f"the launcher peaked at {peak / 1024:.0f} MiB"
