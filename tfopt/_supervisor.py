"""Child processes that never outlive their parent: start, forward signals, stop, exit codes.

A :class:`Supervisor` starts children that Linux kills when the parent dies (even by SIGKILL),
each in its own session (a terminal's Ctrl-C reaches the parent alone); forwards SIGINT and
SIGTERM received by the parent to them (a second one kills them); stops them with a signal,
then SIGKILL after a grace period; and on leaving its ``with`` block stops whatever still runs
(SIGKILL at once when an exception leaves it). Each of these reaches a child's whole process
group, and keeps reaching it after the child itself has exited: a grandchild left running
(one that ignores SIGTERM included) is stopped with it. :func:`exit_code` is the shell's code
of a return code (128 + N for death by signal N). No TensorFlow is imported.

The parent-death signal is set by a tiny Python program that runs first in the child and then
executes the command (``prctl(PR_SET_PDEATHSIG)`` survives ``execve``), not by ``preexec_fn``:
Python code between fork and exec is unsafe in a parent with threads (TensorFlow's, output
readers). A child started by someone else (a ``multiprocessing`` pool, from
:func:`tfopt._spawn.worker_context`) calls :func:`die_with_parent` itself, and is stopped by
:func:`stop_processes`. How many children the machine lets this process start is
:mod:`tfopt._limits`' answer.

Example:
    >>> with Supervisor(grace_seconds=5) as supervisor:
    ...     supervisor.start(["python", "train.py"])
    ...     supervisor.wait()
    >>> exit_code(supervisor.processes[0].returncode)
    0
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from tfopt._system import parent_death_signal
from tfopt._validate import fail, number

logger = logging.getLogger("tfopt")

# Seconds a stopped child gets between the signal and SIGKILL when the owner does not say:
# enough for a Python worker to unwind and flush, short enough that a failed job ends promptly.
DEFAULT_GRACE_SECONDS = 10.0

# A child killed by signal N reports -N to Python; shells report 128 + N.
SIGNAL_EXIT_BASE = 128

# The signals a supervisor forwards from its parent to the children.
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

# How often, in seconds, waiting checks for exited children.
POLL_SECONDS = 0.05

# Seconds to reap a child after SIGKILL: only an unkillable (D-state) process takes longer.
_REAP_SECONDS = 5.0

# Runs in the child before the command: asks Linux for the parent-death signal, leaves if the
# parent died before that took effect, then becomes the command. Standard library only (-I -S:
# no site, no PYTHON* variables), so that each start adds a bare interpreter's start-up, never a
# package import.
_BOOTSTRAP = """\
import ctypes, os, sys
signum, parent, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signum)
except (OSError, AttributeError):
    pass
if os.getppid() != parent:
    os._exit(128 + signum)
try:
    os.execv(path, sys.argv[4:])
except OSError as error:
    sys.stderr.write(f"cannot execute {path}: {error.strerror}\\n")
    os._exit(127)
"""


def exit_code(returncode: int) -> int:
    """The shell's exit code of a child's ``returncode``: 128 + N for death by signal N."""
    return SIGNAL_EXIT_BASE - returncode if returncode < 0 else returncode


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> bool:
    """In a child: have Linux send ``signum`` when the parent dies; exit now if it is gone.

    For children started by someone else (a ``multiprocessing`` initializer: convert's shard
    writers); :meth:`Supervisor.start` does this for its own children.

    Args:
        parent_pid: The parent's pid, passed down by it (``os.getppid()`` changes once the
            parent dies, so it cannot be read here).
        signum: The signal. Defaults to SIGKILL.

    Returns:
        True when the signal is set; False where Linux's ``prctl`` is not available.

    Example:
        >>> die_with_parent(int(sys.argv[1]))
        True
    """
    set_signal = parent_death_signal(signum)
    if set_signal is not None:
        set_signal()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(SIGNAL_EXIT_BASE + int(signum))
    return set_signal is not None


def _grace(value, name: str = "grace_seconds") -> float:
    """Seconds >= 0, infinity included (wait as long as the children take)."""
    if value == math.inf:
        return math.inf
    return number(value, name, low=0.0, expected="a number of seconds >= 0 (or math.inf)")


def stop_processes(processes: Sequence, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> None:
    """Stop ``multiprocessing`` children the way :meth:`Supervisor.stop` stops its own.

    For a pool whose workers were already asked to stop (an event, a sentinel): each gets
    ``grace_seconds`` to finish on its own, then SIGTERM, then SIGKILL after ``grace_seconds``
    more; every one is reaped before this returns (an unkillable one after 5 s more).

    Args:
        processes: ``multiprocessing.Process`` objects (anything with ``is_alive``, ``join``,
            ``terminate`` and ``kill``).
        grace_seconds: Seconds each step waits. Defaults to 10.0.
    """
    grace = _grace(grace_seconds)
    for signal_step in ("none", "terminate", "kill"):
        deadline = time.monotonic() + (_REAP_SECONDS if signal_step == "kill" else grace)
        for process in processes:
            if signal_step != "none" and process.is_alive():
                getattr(process, signal_step)()
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        if not any(process.is_alive() for process in processes):
            return
        if signal_step == "terminate":
            logger.info("%d worker process(es) still running %.1f s after SIGTERM: killing "
                        "them", sum(process.is_alive() for process in processes), grace)


def start_failure(processes: Sequence) -> int | None:
    """The exit code of the first of these stopped pool workers that ended by itself, or None.

    A pool's worker ends by itself only when it could not start working: its interpreter did
    not start, or not as Python (``multiprocessing.set_executable``, an embedded interpreter),
    an import failed, or the pool's initializer raised. An exception in the work comes back as
    the task's result instead, and a worker killed (the OOM killer, ``kill``, this process
    stopping it) reports a signal (a negative code). So a code >= 0 means that workers cannot
    start here, and None that one was killed.

    Args:
        processes: ``multiprocessing.Process`` objects, every one stopped (joined).
    """
    for process in processes:
        code = process.exitcode
        if code is not None and code >= 0:
            return code
    return None


def _resolve(program: str, env: Mapping[str, str] | None, cwd=None) -> str:
    """The executable ``program`` names, found as ``execvp`` would (a relative path from
    ``cwd``, as Popen runs it); the OSError Popen would raise for one it cannot execute."""
    if os.sep in program and not os.path.isabs(program) and cwd is not None:
        program = os.path.join(os.fspath(cwd), program)
    path = (env if env is not None else os.environ).get("PATH", os.defpath)
    found = shutil.which(program, path=path)
    if found is None:
        if os.sep in program and os.path.exists(program):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    # the bootstrap's exec would fail on a file that is neither a script nor a binary (a
    # script without "#!"): refuse it here, where Popen itself would have raised
    try:
        with open(found, "rb") as handle:
            magic = handle.read(4)
    except OSError:  # executable but unreadable: only exec can tell
        return found
    if not (magic.startswith(b"#!") or magic == b"\x7fELF"):
        raise OSError(errno.ENOEXEC, os.strerror(errno.ENOEXEC), program)
    return found


# -- process groups ---------------------------------------------------------------------------


def _groups_with_live_members(pgids: set[int]) -> set[int]:
    """Those of ``pgids`` (process groups of children that have exited) that still hold a
    process that is not a zombie: the ones left to stop.

    ``killpg(pgid, 0)`` answers for most (no such group); a group it finds may hold only
    zombies (dead, waiting for a parent that does not reap them, as a container's init may
    not), which ``/proc`` tells apart. A group of processes this user may not signal is not
    one to stop.
    """
    found = set()
    for pgid in pgids:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            continue
        found.add(pgid)
    if not found:
        return found
    try:
        entries = os.listdir("/proc")
    except OSError:  # no /proc (not Linux): zombies count as members
        return found
    live = set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        with contextlib.suppress(IndexError, ValueError):
            if int(fields[2]) in found and fields[0] not in (b"Z", b"X"):
                live.add(int(fields[2]))
    return live


class Supervisor:
    """Starts, signals, stops and reaps child processes; see the module docstring.

    Args:
        grace_seconds: Seconds a stopped child gets before SIGKILL. Defaults to 10.0.
        death_signal: The signal a child gets when this process dies; None for none.
            Defaults to SIGTERM (a Python child unwinds; pass SIGKILL for servers that may
            ignore it).
        forward_signals: Forward SIGINT/SIGTERM to the children while the ``with`` block runs
            (main thread only; a signal ignored on entry stays ignored). Defaults to True.
        own_session: Start each child in its own session and signal its whole process group
            (its children too), until no process of the group is left: a group whose child
            has exited is still stopped on :meth:`stop` and on leaving the ``with`` block.
            Defaults to True.

    Raises:
        InvalidArgumentError: ``grace_seconds`` is not a number >= 0.
    """

    def __init__(self, grace_seconds: float = DEFAULT_GRACE_SECONDS, *,
                 death_signal: int | None = signal.SIGTERM, forward_signals: bool = True,
                 own_session: bool = True):
        self.grace_seconds = _grace(grace_seconds)
        self.death_signal = death_signal
        self.forward_signals = forward_signals
        self.own_session = own_session
        self._processes: list[subprocess.Popen] = []
        # process groups (the child's pid: each child leads its own session) not yet seen
        # empty; a group seen empty is forgotten, never signalled again, since its number
        # may then be given to an unrelated process (Linux keeps it while a member lives)
        self._groups: set[int] = set()
        self._received: list[int] = []
        self._saved_handlers: dict[int, object] = {}

    # -- the with block ---------------------------------------------------------------------

    def __enter__(self) -> Supervisor:
        if self.forward_signals and threading.current_thread() is threading.main_thread():
            for signum in FORWARDED_SIGNALS:
                current = signal.getsignal(signum)
                if current == signal.SIG_IGN:
                    continue  # a background job's SIGINT: the user asked for no Ctrl-C
                self._saved_handlers[signum] = current
                signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        try:
            if self._pending():
                # an exception (Ctrl-C without forwarding included): no waiting
                self.stop(signal.SIGKILL if exc_type is not None else signal.SIGTERM)
        finally:
            for signum, previous in self._saved_handlers.items():
                signal.signal(signum, previous)
            self._saved_handlers.clear()

    def _on_signal(self, signum, frame) -> None:
        self._received.append(signum)
        # the first is forwarded as it is (a Python child turns SIGINT into KeyboardInterrupt
        # and can save its work); a second one means "now"
        self.send(signum if len(self._received) == 1 else signal.SIGKILL)

    # -- children ---------------------------------------------------------------------------

    @property
    def processes(self) -> tuple[subprocess.Popen, ...]:
        """Every child started, running or not, in start order."""
        return tuple(self._processes)

    @property
    def received(self) -> tuple[int, ...]:
        """The signals forwarded so far, in order of arrival."""
        return tuple(self._received)

    def start(self, command: Sequence[str], *, env: Mapping[str, str] | None = None,
              **popen_kwargs) -> subprocess.Popen:
        """Start ``command`` as a child; ``popen_kwargs`` go to ``subprocess.Popen``.

        Args:
            command: The program and its arguments; the program is looked up on ``env``'s
                PATH.
            env: The child's environment. Defaults to None (this process's).
            **popen_kwargs: ``stdin``, ``stdout``, ``stderr``, ``text``, ``cwd``, ...; not
                ``preexec_fn`` or ``start_new_session``, which the supervisor sets.

        Returns:
            The ``subprocess.Popen`` of the child.

        Raises:
            InvalidArgumentError: An empty ``command``.
            OSError: The program cannot be found or executed (as Popen raises it).
        """
        command = [os.fspath(part) for part in command]
        if not command:
            raise fail("command", command, "a program and its arguments")
        argv = command
        if self.death_signal is not None and sys.executable \
                and parent_death_signal(self.death_signal) is not None:
            program = _resolve(command[0], env, popen_kwargs.get("cwd"))
            argv = [sys.executable, "-I", "-S", "-c", _BOOTSTRAP, str(int(self.death_signal)),
                    str(os.getpid()), program, *command]
        process = subprocess.Popen(argv, env=None if env is None else dict(env),
                                   start_new_session=self.own_session, **popen_kwargs)
        self._processes.append(process)
        if self.own_session:
            self._groups.add(process.pid)
        if self._received:  # a signal came while it started: it gets it too
            self._signal(process, self._received[0] if len(self._received) == 1
                         else signal.SIGKILL)
        return process

    def running(self) -> list[subprocess.Popen]:
        """The children that have not exited (reaping those that have)."""
        return [process for process in self._processes if process.poll() is None]

    def exit_codes(self) -> list[int | None]:
        """Each child's :func:`exit_code`, None while it runs, in start order."""
        return [None if process.poll() is None else exit_code(process.returncode)
                for process in self._processes]

    def first_failure(self) -> int | None:
        """The index (start order) of the first child that exited non-zero; None if none."""
        for index, code in enumerate(self.exit_codes()):
            if code not in (None, 0):
                return index
        return None

    def _pending(self) -> list[subprocess.Popen]:
        """The children still running, and (with ``own_session``) those that have exited but
        whose process group still holds a live process (a grandchild left running)."""
        running, exited = [], {}
        for process in self._processes:
            if process.poll() is None:
                running.append(process)
            elif process.pid in self._groups:
                exited[process.pid] = process
        live = _groups_with_live_members(set(exited))
        self._groups.difference_update(set(exited) - live)
        return running + [exited[pgid] for pgid in live]

    def _signal(self, process: subprocess.Popen, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.own_session:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)

    def send(self, signum: int) -> None:
        """Send ``signum`` to every running child (its process group with ``own_session``,
        also once the child itself has exited, while a process of the group is left)."""
        for process in self._pending():
            self._signal(process, signum)

    def _settle(self, timeout: float, tick: Callable[[float], object] | None) -> bool:
        """Wait until no child and no process of their groups is left; False at the timeout."""
        deadline = time.monotonic() + timeout
        while self._pending():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            (tick or time.sleep)(min(POLL_SECONDS, left))
        return True

    def wait(self, timeout: float | None = None, *,
             tick: Callable[[float], object] | None = None) -> bool:
        """Wait until every child has exited.

        Args:
            timeout: Seconds to wait at most. Defaults to None (no limit).
            tick: Called with a number of seconds to spend (e.g. reading the children's
                output) instead of sleeping between checks. Defaults to None (sleep).

        Returns:
            True when every child has exited, False at the timeout.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            step = POLL_SECONDS if left is None else min(POLL_SECONDS, left)
            (tick or time.sleep)(step)
        return True

    def stop(self, signum: int | None = signal.SIGTERM, *, grace: float | None = None,
             tick: Callable[[float], object] | None = None) -> None:
        """Send ``signum`` to the running children, then SIGKILL what is left after ``grace``.

        With ``own_session`` both reach each child's whole process group, and the grace lasts
        until the groups are empty: a grandchild that ignores the signal is killed with its
        parent, and so is one left running by a child that has exited already. Returns once
        every child is reaped and every process of their groups is gone (or, for an
        unkillable one, after 5 s more).

        Args:
            signum: The first signal; None to send none (one was already forwarded).
                Defaults to SIGTERM.
            grace: Seconds before SIGKILL. Defaults to None (``grace_seconds``).
            tick: As for :meth:`wait`. Defaults to None.
        """
        grace = self.grace_seconds if grace is None else _grace(grace, "grace")
        pending = self._pending()
        orphaned = sum(process.returncode is not None for process in pending)
        if orphaned:
            logger.info("%d exited child process(es) left processes running in their process "
                        "group: stopping those too", orphaned)
        if signum is not None:
            self.send(signum)
        if signum != signal.SIGKILL and not self._settle(grace, tick):
            logger.info("%d child process group(s) still running %.1f s after the stop signal: "
                        "killing them", len(self._pending()), grace)
        self.send(signal.SIGKILL)
        for process in self._processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=_REAP_SECONDS)
        # a killed grandchild is gone once the kernel has run its exit, a moment after the
        # signal: wait for that, so that nothing of the children runs when this returns
        self._settle(_REAP_SECONDS, tick)
