"""A local multi-worker launcher: what torchrun is to PyTorch, for ``tf.distribute``.

:func:`launch_workers` starts N copies of a command on this machine, each with a ``TF_CONFIG``
naming all N workers on free localhost ports (:func:`tfopt.distribute.cluster.tf_config`),
streams their output line by line to a callback, and ends the job as a whole: the first worker
to fail stops the others and its exit code is the job's; SIGINT/SIGTERM to the launcher are
forwarded to every worker. The processes are run by :class:`tfopt._supervisor.Supervisor`,
each worker in its own process group, which is stopped whole when the job ends (normally, at a
failure, or at a signal): a worker's own children do not outlive the launcher. A job larger
than the machine can start (open files, processes, free ports) is refused before any worker
starts. No TensorFlow (or Keras) is imported: the launcher only starts processes.

TensorFlow's C++ start-up lines are kept out of the workers' output by default: each worker gets
``TF_CPP_MIN_LOG_LEVEL=1`` unless its environment sets the variable, and the INFO lines that
TensorFlow prints before it reads the variable (oneDNN, the CUDA stub) are held back at the
level the worker has (INFO at 1; INFO and WARNING at 2 or more). Errors, tracebacks and
everything else pass.

Example:
    >>> result = launch_workers(["python", "train.py"], 2)
    >>> sys.exit(result.exit_code)
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import json
import logging
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from tfopt._limits import child_limits, over_limits
from tfopt._signals import PREEMPTED_EXIT
from tfopt._supervisor import (
    DEFAULT_GRACE_SECONDS,
    POLL_SECONDS,
    SIGNAL_EXIT_BASE,
    Supervisor,
    exit_code,
)
from tfopt._validate import flag, require, whole_number
from tfopt.distribute.cluster import (
    LAUNCHED_ENV,
    LOCALHOST,
    free_ports,
    port_limit,
    tf_config,
)
from tfopt.errors import InvalidArgumentError, WorkerStartError

logger = logging.getLogger("tfopt")

# Launch attempts when a worker cannot bind its port: the port found free can be taken by
# another process before the worker binds it (a race no reservation closes, since the worker
# is a separate process).
DEFAULT_ATTEMPTS = 3

# Lines of each worker's output kept to recognise a port clash after it exits.
_TAIL_LINES = 50
MAX_LINE_BYTES = 64 << 10  # a worker's line is handed on up to this; the rest is dropped

# What gRPC and Python print when a port is taken (TensorFlow's server start-up goes through
# gRPC: "Address already in use", "Failed to add port to server", "Could not start gRPC server").
_PORT_CLASH = re.compile(
    r"address already in use|errno 98|failed to add port|could not start grpc server|"
    r"unable to bind|failed to bind", re.IGNORECASE)

# The TF_CPP_MIN_LOG_LEVEL a worker gets unless its environment sets one: TensorFlow's INFO
# lines are hidden, its warnings and errors are not.
DEFAULT_TF_LOG_LEVEL = "1"

# A line of TensorFlow's C++ logging: absl's format ("I0000 00:00:1796134142.057280   14344
# port.cc:153] ...") or TensorFlow's older own ("2024-05-01 12:00:00.000000: I
# tensorflow/core/platform/cpu_feature_guard.cc:182] ..."), from a C/C++ source file (absl's
# Python logging writes the same prefix, naming a .py file, and is not TensorFlow's).
_TF_CPP_LOG = re.compile(
    r"(?:(?P<absl>[IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<tsl>[IWEF]) )"
    r"[\w./-]+\.(?:cc|cpp|c|h):\d+\] ")
# What absl prints before the first of the lines TensorFlow logs before setting up logging
_ABSL_PRE_INIT_NOTICE = ("WARNING: All log messages before absl::InitializeLog() is called are "
                         "written to STDERR")

OnLine = Callable[[int, str, str], None]

# What each worker costs the launcher while it runs: the read ends of its stdout and stderr
# pipes, and a task for the worker process plus one output-reading thread per pipe here (the
# worker's own threads come on top: TensorFlow starts dozens, which no limit read here knows).
_FILES_PER_WORKER = 2
_TASKS_PER_WORKER = 3

# errno values of a start that failed for want of a resource, not for a bad command: too many
# open files (the process's, the system's), no task left (EAGAIN: RLIMIT_NPROC, pids.max), no
# memory for the new process
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    """How a launched job ended.

    Attributes:
        exit_code: 0 when every worker succeeded; else the first failing worker's code (128 + N
            for a worker killed by signal N), or 128 + N when the launcher got signal N, but
            75 (``PREEMPTED_EXIT``) when every worker then stopped as a preempted training
            does: its backup written, the same command to be run again.
        failed_worker: Index of the first worker that failed; None when none failed first.
        signal: The signal (SIGINT/SIGTERM) that stopped the job; None otherwise.
        attempts: Launch attempts made (more than one after a port clash).
        workers: The worker addresses of the last attempt.
    """

    exit_code: int
    failed_worker: int | None
    signal: int | None
    attempts: int
    workers: tuple[str, ...]

    def describe(self) -> str:
        """One line: how the job ended."""
        preempted = ("every worker stopped at one step, its backup written: run the same "
                     "command again to resume")
        if self.signal is not None:
            return (f"stopped by {signal.Signals(self.signal).name}; exit code "
                    f"{self.exit_code}"
                    f"{'; ' + preempted if self.exit_code == PREEMPTED_EXIT else ''}")
        if self.exit_code == PREEMPTED_EXIT and self.failed_worker is None:
            return f"exit code {self.exit_code}: {preempted}"
        if self.failed_worker is not None:
            return (f"worker {self.failed_worker} failed with exit code {self.exit_code}; "
                    "the other workers were stopped")
        return f"all {len(self.workers)} workers finished"


class _PortClash(Exception):
    pass


def _hidden_tf_severities(level: str | None) -> frozenset[str]:
    """The severities of TensorFlow's C++ lines that ``TF_CPP_MIN_LOG_LEVEL=level`` hides, as
    the launcher applies them to what TensorFlow prints before it reads the variable: "I" at 1,
    "I" and "W" at 2 and above; never "E" or "F", which the launcher always passes on. Nothing
    for None, 0 or a value that is not an integer (TensorFlow reads that as 0)."""
    try:
        value = int(level) if level is not None else 0
    except ValueError:
        return frozenset()
    return frozenset("IW"[:max(0, min(value, 2))])


def _is_hidden_tf_line(line: str, hidden: frozenset[str]) -> bool:
    """Whether ``line``, from a worker's stderr, is a TensorFlow C++ log line of a ``hidden``
    severity (or absl's notice that such lines go to stderr, when INFO lines are hidden)."""
    if not hidden:
        return False
    if line == _ABSL_PRE_INIT_NOTICE:
        return "I" in hidden
    match = _TF_CPP_LOG.match(line)
    return match is not None and (match.group("absl") or match.group("tsl")) in hidden


def _read_lines(pipe, worker: int, stream: str, lines: queue.Queue) -> None:
    """Hand on each line of ``pipe``; a line longer than :data:`MAX_LINE_BYTES` is handed on
    cut there, and the rest of it read and dropped: a worker printing one endless line (a
    progress bar without newlines, an array printed whole) cannot fill the launcher's memory."""
    cutting, dropped = False, 0  # in a line past its cut, and the bytes dropped of it
    with pipe:
        for raw in iter(lambda: pipe.readline(MAX_LINE_BYTES), b""):
            ended = raw.endswith(b"\n")
            if cutting:
                dropped += len(raw)
                if ended:
                    lines.put((worker, stream, f"[tfopt launch: {dropped:,} more bytes of the "
                                               "line above not shown]"))
                    cutting, dropped = False, 0
                continue
            lines.put((worker, stream, raw.decode("utf-8", errors="replace").rstrip("\r\n")))
            cutting = not ended and len(raw) >= MAX_LINE_BYTES
    lines.put((worker, stream, None))  # end of this stream


class _Job:
    """One attempt: N worker processes of ``supervisor`` and their output readers."""

    def __init__(self, supervisor: Supervisor, command, addresses, env, on_line: OnLine,
                 hidden: frozenset[str] = frozenset()):
        self.supervisor = supervisor
        self.addresses = addresses
        self.on_line = on_line
        self.hidden = hidden  # severities of TensorFlow's C++ stderr lines not handed on
        self.lines: queue.Queue = queue.Queue()
        self.tails = [collections.deque(maxlen=_TAIL_LINES) for _ in addresses]
        self.open_streams = [0] * len(addresses)  # per worker: its pipes not yet at EOF
        self.processes = []
        try:
            for index in range(len(addresses)):
                worker_env = dict(env)
                worker_env["TF_CONFIG"] = json.dumps(tf_config(addresses, index))
                worker_env[LAUNCHED_ENV] = "1"  # its strategy leaves a dead peer to us
                # Python block-buffers a pipe: without this a worker's lines would arrive
                # only when its buffer fills or it exits
                worker_env.setdefault("PYTHONUNBUFFERED", "1")
                # its own session (the supervisor's default): signals reach the worker's
                # children too, and a terminal's Ctrl-C reaches the launcher alone, which
                # forwards it once; it gets SIGTERM if the launcher dies, so that no worker
                # waits for its peers forever
                process = supervisor.start(list(command), env=worker_env,
                                           stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                self.processes.append(process)
                for stream, pipe in (("stdout", process.stdout), ("stderr", process.stderr)):
                    threading.Thread(target=_read_lines, args=(pipe, index, stream, self.lines),
                                     daemon=True).start()
                    self.open_streams[index] += 1
        except (OSError, RuntimeError) as error:
            supervisor.stop(signal.SIGKILL)
            started = len(self.processes)
            if isinstance(error, RuntimeError) or error.errno in _OUT_OF_RESOURCES:
                # a limit the check before the start did not foresee (another process took
                # what was left meanwhile, a limit not read); RuntimeError: "can't start new
                # thread"
                raise WorkerStartError(
                    f"workers={len(addresses)}: worker {started} could not start "
                    f"({getattr(error, 'strerror', None) or error}) after {started} started; "
                    "they were stopped. Hint: start fewer, or raise the limit it met "
                    "(ulimit -n, ulimit -u)") from None
            raise InvalidArgumentError(
                f"command={list(command)!r}: cannot start it ({error.strerror or error}). "
                "Hint: give the program and its arguments, e.g. python train.py") from None

    def pump(self, timeout: float) -> None:
        """Hand the output that arrives within ``timeout`` seconds to ``on_line``."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                item = self.lines.get(timeout=max(remaining, 0)) if remaining > 0 \
                    else self.lines.get_nowait()
            except queue.Empty:
                return
            worker, stream, line = item
            if line is None:
                self.open_streams[worker] -= 1
                continue
            self.tails[worker].append(line)  # every line: a port clash is recognised in them
            if stream == "stderr" and _is_hidden_tf_line(line, self.hidden):
                continue
            self.on_line(worker, stream, line)

    def stop(self, signum: int | None = signal.SIGTERM) -> None:
        """``signum`` to every running worker, SIGKILL after the grace period; output read."""
        self.supervisor.stop(signum, tick=self.pump)

    def finish_output(self, worker: int | None = None) -> None:
        """Hand on what the workers (or one ``worker``) printed last, up to their pipes' end."""
        workers = range(len(self.processes)) if worker is None else [worker]
        deadline = time.monotonic() + 5  # a worker's child may hold a pipe open: don't hang
        while (any(self.open_streams[index] > 0 for index in workers)
               and time.monotonic() < deadline):
            self.pump(POLL_SECONDS)
        self.pump(0)


def _run_attempt(job: _Job, may_retry: bool) -> LaunchResult | None:
    supervisor = job.supervisor
    while True:
        job.pump(POLL_SECONDS)
        if supervisor.received:
            signum = supervisor.received[0]
            logger.info("got %s: stopping the workers", signal.Signals(signum).name)
            # the supervisor forwarded the signal itself (a Python worker turns SIGINT into
            # KeyboardInterrupt and can unwind); SIGKILL after the grace period, or at once
            # at a second Ctrl-C
            job.stop(None)
            job.finish_output()
            codes = [process.poll() for process in job.processes]
            # every worker stopped at one step boundary with its backup: the job is to be
            # run again, as each of its workers says (tfopt.train.preemption)
            code = (PREEMPTED_EXIT if all(c == PREEMPTED_EXIT for c in codes)
                    else SIGNAL_EXIT_BASE + signum)
            return LaunchResult(code, None, signum, 0, tuple(job.addresses))
        codes = [process.poll() for process in job.processes]
        failed = next((index for index, code in enumerate(codes) if code not in (None, 0)),
                      None)
        if failed is not None and codes[failed] == PREEMPTED_EXIT and _all_preempted(job):
            # a signal to one worker: they agreed on a step and each stopped there
            logger.info("every worker stopped as a preempted training: exit code %d",
                        PREEMPTED_EXIT)
            job.stop(signal.SIGTERM)  # what they left running in their process groups
            job.finish_output()
            return LaunchResult(PREEMPTED_EXIT, None, None, 0, tuple(job.addresses))
        if failed is not None:
            code = exit_code(codes[failed])
            logger.info("worker %d exited with code %d: stopping the others", failed, code)
            # every worker's group is stopped before its output is read to the end: a
            # grandchild that holds the failed worker's pipes open (and the others') is gone
            # then, so the last lines, a port clash's sign among them, arrive at once
            job.stop(signal.SIGTERM)
            job.finish_output()
            if may_retry and any(_PORT_CLASH.search(line) for line in job.tails[failed]):
                raise _PortClash()
            return LaunchResult(code, failed, None, 0, tuple(job.addresses))
        if all(code == 0 for code in codes):
            # every worker is done; what they started and left running (in their process
            # groups) is stopped like a worker: SIGTERM, SIGKILL after the grace period
            job.stop(signal.SIGTERM)
            job.finish_output()
            return LaunchResult(0, None, None, 0, tuple(job.addresses))


def _all_preempted(job: _Job) -> bool:
    """Whether every worker exits as a preempted training does, given the grace period to
    finish its backup: a training stopped by a signal stops every worker at one step
    (:mod:`tfopt.train.preemption`), so one worker's 75 is soon everyone's."""
    deadline = time.monotonic() + job.supervisor.grace_seconds
    while time.monotonic() < deadline:
        codes = [process.poll() for process in job.processes]
        if any(code not in (None, PREEMPTED_EXIT) for code in codes):
            return False
        if all(code == PREEMPTED_EXIT for code in codes):
            return True
        job.pump(POLL_SECONDS)
    return False


def launch_workers(command: Sequence[str], workers: int, *, on_line: OnLine | None = None,
                   host: str = LOCALHOST, env: Mapping[str, str] | None = None,
                   grace_seconds: float = DEFAULT_GRACE_SECONDS,
                   attempts: int = DEFAULT_ATTEMPTS,
                   quiet_tensorflow: bool = True) -> LaunchResult:
    """Run ``command`` as ``workers`` local worker processes of one ``TF_CONFIG`` cluster.

    Worker ``i`` gets ``TF_CONFIG={"cluster": {"worker": [host:P0, ...]}, "task": {"type":
    "worker", "index": i}}`` with free ports on ``host``, and ``PYTHONUNBUFFERED=1`` so that
    its lines arrive as printed. Each line a worker writes is passed to ``on_line(index,
    "stdout" | "stderr", line)`` in the calling thread, except, with ``quiet_tensorflow``,
    TensorFlow's C++ start-up lines: the workers get ``TF_CPP_MIN_LOG_LEVEL=1`` unless the
    environment sets it, and the stderr lines in TensorFlow's C++ log format that this level
    hides (INFO at 1; INFO and WARNING at 2 or more) are not passed on, because TensorFlow
    prints some (oneDNN, the CUDA stub) before it reads the variable. ERROR and FATAL lines,
    tracebacks and everything else always are. The job ends when every worker has
    exited 0, or at the first failure: the other workers get SIGTERM, then SIGKILL after
    ``grace_seconds``. SIGINT or SIGTERM sent to the launcher goes to every worker the same
    way (a second one kills them at once). When a worker fails because its port was taken
    (gRPC's "Address already in use"), the whole job restarts on new ports, up to
    ``attempts`` times. Each worker runs in its own process group, and the job's end stops
    every group whole (SIGTERM, SIGKILL after ``grace_seconds``), its leader's exit
    notwithstanding: a process a worker started does not outlive the launcher.

    Args:
        command: The program and its arguments, e.g. ``["python", "train.py"]``.
        workers: How many worker processes.
        on_line: Called with each output line. Defaults to None (output is dropped).
        host: The address the workers' servers bind to. Defaults to "localhost".
        env: The workers' environment. Defaults to None (this process's environment).
        grace_seconds: Seconds a stopped worker gets before SIGKILL. Defaults to 10.0.
        attempts: Launches tried when a port is taken. Defaults to 3.
        quiet_tensorflow: Hold back TensorFlow's C++ INFO lines as described above. Defaults
            to True; False leaves the environment's ``TF_CPP_MIN_LOG_LEVEL`` as it is and
            passes every line on.

    Returns:
        A :class:`LaunchResult`; its ``exit_code`` is the job's.

    Raises:
        InvalidArgumentError: An empty command, ``workers`` < 1, or a command that cannot be
            started (not found, not executable).
        tfopt.errors.WorkerStartError: More workers than this machine lets the launcher
            start (the open-file limit against 2 pipes each, the process and thread limits
            against 3 tasks each, the free ports): refused before any starts, naming the
            limit and what to do; or a start that failed for want of one of these.

    Example:
        >>> result = launch_workers(["python", "train.py"], 2,
        ...                         on_line=lambda i, stream, line: print(f"[worker {i}] {line}"))
        >>> sys.exit(result.exit_code)
    """
    require(bool(command), "command", command, "a program and its arguments, e.g. python train.py")
    whole_number(workers, "workers", 1, "an integer >= 1")
    whole_number(attempts, "attempts", 1, "an integer >= 1")
    quiet_tensorflow = flag(quiet_tensorflow, "quiet_tensorflow")
    # grace_seconds is checked by the supervisor (math.inf: wait as long as the workers take)
    _refuse_beyond_the_machine(workers)
    on_line = on_line or (lambda worker, stream, line: None)
    env = dict(os.environ if env is None else env)
    hidden = frozenset()
    if quiet_tensorflow:
        # a level the user set wins, and the lines are held back at that level
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", DEFAULT_TF_LOG_LEVEL)
        hidden = _hidden_tf_severities(env["TF_CPP_MIN_LOG_LEVEL"])
    # the supervisor forwards SIGINT/SIGTERM to the workers and, on any way out of this
    # block, stops those still running (SIGKILL at once after an exception)
    with Supervisor(grace_seconds, death_signal=signal.SIGTERM) as supervisor:
        for attempt in range(1, attempts + 1):
            addresses = [f"{host}:{port}" for port in free_ports(workers, host)]
            logger.info("launch attempt %d: %d workers on %s", attempt, workers,
                        ", ".join(addresses))
            job = _Job(supervisor, command, addresses, env, on_line, hidden)
            try:
                result = _run_attempt(job, may_retry=attempt < attempts)
            except _PortClash:
                logger.warning("a worker could not bind its port; relaunching on new ports "
                               "(attempt %d of %d)", attempt + 1, attempts)
                continue
            return dataclasses.replace(result, attempts=attempt)
    raise AssertionError("unreachable: the last attempt returns")


def _refuse_beyond_the_machine(workers: int) -> None:
    """Refuse ``workers`` before anything starts when this machine's limits (open files,
    tasks, free ports) allow fewer: the alternative is one start after another until one
    fails, ending in "Too many open files" after a long wait."""
    limits = child_limits(workers, files_per_child=_FILES_PER_WORKER,
                          tasks_per_child=_TASKS_PER_WORKER, noun="worker")
    ports = port_limit()
    if ports is not None:
        limits.append(ports)
    refusal = over_limits(workers, limits, "workers")
    if refusal is not None:
        raise WorkerStartError(refusal)
