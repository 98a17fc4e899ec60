"""The child-process supervisor with real processes: grace then SIGKILL, death with the parent,
signal forwarding, exit codes, nothing left behind.

Children are short Python one-liners that say "ready" once their signal handlers are set; every
wait is on a condition with a generous timeout, never on a timing.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tfopt._supervisor import Supervisor, exit_code
from tfopt.errors import InvalidArgumentError

PY = sys.executable
TIMEOUT = 30  # seconds for anything to happen on a loaded 2-core machine

SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
IGNORES_SIGTERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ready', flush=True); time.sleep(60)")

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the parent-death signal is Linux's prctl")


def read_line(pipe, timeout: float = TIMEOUT) -> str:
    ready, _, _ = select.select([pipe], [], [], timeout)
    assert ready, f"no line within {timeout} s"
    line = pipe.readline()
    return line.decode() if isinstance(line, bytes) else line


def pid_and_ready(pipe) -> int:
    """The pid a parent prints and the "ready" its child prints, in whichever order they come."""
    lines = sorted(read_line(pipe).strip() for _ in range(2))
    assert lines[1] == "ready", lines
    return int(lines[0].split()[-1])


def is_gone(pid: int) -> bool:
    """No such process, or only its zombie (dead, not yet reaped by its new parent)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def wait_until(condition, timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def start_ready(supervisor: Supervisor, code: str) -> subprocess.Popen:
    process = supervisor.start([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    assert read_line(process.stdout).strip() == "ready"
    return process


# -- exit codes ---------------------------------------------------------------------------------


def test_exit_codes_are_the_shells_death_by_signal_included():
    with Supervisor() as supervisor:
        supervisor.start([PY, "-c", "pass"])
        supervisor.start([PY, "-c", "import sys; sys.exit(3)"])
        supervisor.start([PY, "-c", "import os; os.kill(os.getpid(), 9)"])
        assert supervisor.wait(TIMEOUT)
    assert supervisor.exit_codes() == [0, 3, 128 + 9]
    assert supervisor.first_failure() == 1
    assert [exit_code(code) for code in (0, 1, -2, -15)] == [0, 1, 130, 143]


def test_a_missing_program_is_oserror_as_popen_raises_it(tmp_path):
    with Supervisor() as supervisor:
        with pytest.raises(FileNotFoundError):
            supervisor.start(["no-such-program-tfopt"])
        not_executable = tmp_path / "script"
        not_executable.write_text("#!/bin/sh\n")
        with pytest.raises(PermissionError):
            supervisor.start([str(not_executable)])
        no_shebang = tmp_path / "no-shebang"
        no_shebang.write_text("echo hi\n")
        no_shebang.chmod(0o755)
        with pytest.raises(OSError) as raised:  # Popen's own "Exec format error"
            supervisor.start([str(no_shebang)])
        assert raised.value.errno == errno.ENOEXEC
    assert supervisor.processes == ()


def test_a_relative_program_path_is_found_from_the_childs_cwd(tmp_path):
    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "hello"
    script.write_text("#!/bin/sh\necho hello from $(pwd)\n")
    script.chmod(0o755)
    with Supervisor() as supervisor:
        process = supervisor.start(["./bin/hello"], cwd=tmp_path, stdout=subprocess.PIPE,
                                   text=True)
        out, _ = process.communicate(timeout=30)
    assert process.returncode == 0 and out.strip() == f"hello from {tmp_path}"


def test_bad_arguments_are_named():
    with pytest.raises(InvalidArgumentError, match="grace_seconds=-1"):
        Supervisor(grace_seconds=-1)
    with pytest.raises(InvalidArgumentError, match="command=\\[\\]"):
        Supervisor().start([])
    for bad in ("5", True, float("nan")):
        with pytest.raises(InvalidArgumentError, match="grace_seconds="):
            Supervisor(grace_seconds=bad)
    with pytest.raises(InvalidArgumentError, match="grace=-2"):
        Supervisor().stop(grace=-2)
    # infinity: wait as long as the children take (tfopt launch --grace inf)
    assert Supervisor(grace_seconds=float("inf")).grace_seconds == float("inf")


def test_the_command_sees_its_own_argv_and_environment():
    code = "import os, sys; print(sys.argv[1:], os.environ['TFOPT_TEST'])"
    with Supervisor() as supervisor:
        process = supervisor.start([PY, "-c", code, "a", "--b"], stdout=subprocess.PIPE,
                                   text=True, env={**os.environ, "TFOPT_TEST": "x"})
        out, _ = process.communicate(timeout=TIMEOUT)
    assert out.strip() == "['a', '--b'] x"


# -- stopping -----------------------------------------------------------------------------------


def test_stop_sends_sigterm_and_kills_a_child_that_ignores_it_after_the_grace():
    with Supervisor(grace_seconds=0.3) as supervisor:
        polite = start_ready(supervisor, SLEEPER)
        stubborn = start_ready(supervisor, IGNORES_SIGTERM)
        supervisor.stop()
        # stop returns with both reaped: one died of the SIGTERM, the other of the SIGKILL
        assert polite.returncode == -signal.SIGTERM
        assert stubborn.returncode == -signal.SIGKILL
        assert supervisor.running() == []


def test_a_child_that_handles_sigterm_gets_the_grace_to_finish(tmp_path):
    done = tmp_path / "saved"
    code = textwrap.dedent(f"""
        import signal, sys, time
        def save(signum, frame):
            time.sleep(0.2)  # some work to finish
            open({str(done)!r}, "w").close()
            sys.exit(0)
        signal.signal(signal.SIGTERM, save)
        print("ready", flush=True)
        time.sleep(60)
    """)
    with Supervisor(grace_seconds=TIMEOUT) as supervisor:
        child = start_ready(supervisor, code)
        supervisor.stop()
    assert child.returncode == 0 and done.exists()


def test_signals_reach_the_childs_own_children():
    # the child's process group gets the signal: a grandchild is stopped too
    grandchild = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    code = ("import subprocess, sys, time; "
            f"p = subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(60)")
    with Supervisor(grace_seconds=TIMEOUT) as supervisor:
        child = supervisor.start([PY, "-c", code], stdout=subprocess.PIPE, text=True)
        pid = int(read_line(child.stdout))  # the grandchild's line: it is up
        supervisor.stop()
    assert child.returncode == -signal.SIGTERM
    assert wait_until(lambda: is_gone(pid)), f"grandchild {pid} outlived the stop"


# A child that starts a grandchild ignoring SIGTERM (it prints its pid once its handler is set),
# then does what argv[1] says: "exit" (0 at once) or "stay" (handle SIGTERM by exiting 0).
LEAVES_A_GRANDCHILD = textwrap.dedent("""
    import signal, subprocess, sys, time
    grandchild = ("import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "print(os.getpid(), flush=True); time.sleep(60)")
    subprocess.Popen([sys.executable, "-c", grandchild])
    if sys.argv[1] == "stay":
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        time.sleep(60)
""")


def start_leaving_a_grandchild(supervisor: Supervisor, mode: str) -> tuple[subprocess.Popen,
                                                                           int]:
    child = supervisor.start([PY, "-c", LEAVES_A_GRANDCHILD, mode], stdout=subprocess.PIPE,
                             text=True)
    return child, int(read_line(child.stdout))  # the grandchild's pid: it ignores SIGTERM now


def group_members(pgid: int) -> list[int]:
    """Pids of the processes of group ``pgid`` that are not zombies."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                members.append(int(entry))
    return members


@linux_only
def test_a_grandchild_left_by_an_exited_child_is_stopped_on_leaving_the_block():
    # the child is gone before the block ends; its group is not, and is stopped whole:
    # SIGTERM (ignored), then SIGKILL after the grace
    with Supervisor(grace_seconds=0.3) as supervisor:
        child, grandchild = start_leaving_a_grandchild(supervisor, "exit")
        assert supervisor.wait(TIMEOUT) and child.returncode == 0
        assert not is_gone(grandchild)  # waiting is for the child, not its group
    assert group_members(child.pid) == []
    assert is_gone(grandchild)
    assert child.returncode == 0  # its own exit code is kept


@linux_only
def test_stop_lasts_until_the_group_is_empty_and_then_kills_what_ignores_sigterm():
    # the child ends at SIGTERM; its grandchild ignores it and is killed after the grace
    with Supervisor(grace_seconds=0.5) as supervisor:
        child, grandchild = start_leaving_a_grandchild(supervisor, "stay")
        started = time.monotonic()
        supervisor.stop()
        assert time.monotonic() - started >= 0.5  # the grace was given to the group
        assert child.returncode == 0
        assert is_gone(grandchild) and group_members(child.pid) == []


def test_no_child_is_left_behind_when_an_exception_leaves_the_block():
    saved = signal.getsignal(signal.SIGINT)
    with pytest.raises(RuntimeError, match="boom"):
        with Supervisor(grace_seconds=TIMEOUT) as supervisor:
            stubborn = start_ready(supervisor, IGNORES_SIGTERM)
            raise RuntimeError("boom")
    # SIGKILL at once, not the 30 s grace, and reaped
    assert stubborn.returncode == -signal.SIGKILL
    assert signal.getsignal(signal.SIGINT) is saved  # the handlers are put back


def test_leaving_the_block_normally_stops_what_still_runs_with_sigterm():
    with Supervisor(grace_seconds=TIMEOUT) as supervisor:
        child = start_ready(supervisor, SLEEPER)
    assert child.returncode == -signal.SIGTERM


# -- the parent's signals -----------------------------------------------------------------------


PARENT = textwrap.dedent("""
    import os, sys
    from tfopt._supervisor import Supervisor
    child = sys.argv[1]
    with Supervisor(grace_seconds=float(sys.argv[2])) as supervisor:
        process = supervisor.start([sys.executable, "-c", child])
        print("child", process.pid, flush=True)
        supervisor.wait()
    print("received", list(supervisor.received), "codes", supervisor.exit_codes(), flush=True)
    sys.exit(supervisor.exit_codes()[0])
""")

FORWARD_CHILD = textwrap.dedent("""
    import signal, sys, time
    def note(signum, frame):
        print("child got", signal.Signals(signum).name, flush=True)
        sys.exit(7)
    signal.signal(signal.SIGINT, note)
    signal.signal(signal.SIGTERM, note)
    print("ready", flush=True)
    time.sleep(60)
""")

# notes the signal and carries on (time.sleep resumes after a handler)
IGNORING_CHILD = textwrap.dedent("""
    import signal, time
    signal.signal(signal.SIGINT, lambda signum, frame: print("child got SIGINT", flush=True))
    print("ready", flush=True)
    time.sleep(60)
""")


def start_parent(child: str, grace: float = TIMEOUT) -> subprocess.Popen:
    # SIGINT must not start ignored (as in a background job): set it to default first
    code = "import signal; signal.signal(signal.SIGINT, signal.SIG_DFL)\n" + PARENT
    parent = subprocess.Popen([PY, "-c", code, child, str(grace)], stdout=subprocess.PIPE,
                              text=True)
    return parent


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_parents_sigint_and_sigterm_are_forwarded_and_the_code_propagates(signum):
    parent = start_parent(FORWARD_CHILD)
    try:
        pid_and_ready(parent.stdout)  # the child shares the parent's stdout
        parent.send_signal(signum)
        out, _ = parent.communicate(timeout=TIMEOUT)
    finally:
        parent.kill()
    name = signal.Signals(signum).name
    assert f"child got {name}" in out
    assert f"received [{int(signum)}] codes [7]" in out
    assert parent.returncode == 7


def test_a_second_signal_kills_a_child_that_ignores_the_first():
    parent = start_parent(IGNORING_CHILD)
    try:
        child = pid_and_ready(parent.stdout)
        parent.send_signal(signal.SIGINT)
        # forwarded: the child notes it and lives on, and the parent keeps waiting
        assert read_line(parent.stdout).strip() == "child got SIGINT"
        assert parent.poll() is None and not is_gone(child)
        parent.send_signal(signal.SIGINT)
        out, _ = parent.communicate(timeout=TIMEOUT)
    finally:
        parent.kill()
    assert "received [2, 2] codes [137]" in out and parent.returncode == 137


# -- death of the parent ------------------------------------------------------------------------


def assert_child_dies_with_killed_parent(code: str) -> None:
    """Run ``code`` as a parent that prints its child's pid, SIGKILL the parent, and wait for
    the child to go: nothing in a SIGKILLed parent can stop it, only the parent-death signal."""
    parent = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid = pid_and_ready(parent.stdout)  # the child is up, its handlers set
        parent.kill()
        parent.wait(timeout=TIMEOUT)
        assert wait_until(lambda: is_gone(pid)), f"child {pid} outlived its parent"
    finally:
        parent.kill()


@linux_only
@pytest.mark.parametrize("death_signal, child", [(signal.SIGTERM, SLEEPER),
                                                 (signal.SIGKILL, IGNORES_SIGTERM)])
def test_a_child_dies_when_its_parent_is_killed(death_signal, child):
    # grandparent (this test) -> parent (a supervisor) -> child; the parent gets SIGKILL, so
    # nothing in it can stop the child: only the parent-death signal does
    code = textwrap.dedent(f"""
        import sys, time
        from tfopt._supervisor import Supervisor
        supervisor = Supervisor(death_signal={int(death_signal)}, forward_signals=False)
        process = supervisor.start([sys.executable, "-c", {child!r}])
        print(process.pid, flush=True)
        time.sleep(60)
    """)
    assert_child_dies_with_killed_parent(code)


@linux_only
def test_die_with_parent_serves_children_started_elsewhere():
    # a child started by plain Popen (as multiprocessing does) sets the signal itself
    child = ("import os, sys, time; from tfopt._supervisor import die_with_parent; "
             "die_with_parent(int(sys.argv[1])); print('ready', flush=True); time.sleep(60)")
    code = textwrap.dedent(f"""
        import os, subprocess, sys, time
        process = subprocess.Popen([sys.executable, "-c", {child!r}, str(os.getpid())])
        print(process.pid, flush=True)
        time.sleep(60)
    """)
    assert_child_dies_with_killed_parent(code)


@linux_only
def test_die_with_parent_exits_at_once_when_the_parent_is_already_gone():
    # the race between fork and prctl: the parent named is not the parent any more
    code = ("from tfopt._supervisor import die_with_parent; "
            f"die_with_parent({os.getpid() + 1_000_000}); print('still here')")
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 128 + signal.SIGKILL and "still here" not in done.stdout


def _ignore_sigterm_and_sleep():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(60)


def _sleep_briefly():
    time.sleep(0.1)


def test_stop_processes_waits_then_terminates_then_kills_multiprocessing_children():
    import multiprocessing

    from tfopt._supervisor import stop_processes

    # fork: the targets are plain sleeps, and spawn would re-import this test module
    context = multiprocessing.get_context("fork")
    finishing = context.Process(target=_sleep_briefly)
    stubborn = context.Process(target=_ignore_sigterm_and_sleep)
    sleeping = context.Process(target=time.sleep, args=(60,))
    for process in (finishing, stubborn, sleeping):
        process.start()
    time.sleep(0.3)  # the stubborn one has set its handler
    started = time.monotonic()
    stop_processes([finishing, stubborn, sleeping], grace_seconds=0.5)
    assert not any(p.is_alive() for p in (finishing, stubborn, sleeping))
    assert finishing.exitcode == 0  # it had the grace to end by itself
    assert sleeping.exitcode == -signal.SIGTERM
    assert stubborn.exitcode == -signal.SIGKILL
    assert time.monotonic() - started < 30
    with pytest.raises(InvalidArgumentError, match="grace_seconds=-1"):
        stop_processes([], grace_seconds=-1)
