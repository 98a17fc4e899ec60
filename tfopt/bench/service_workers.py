"""Local tf.data service servers for ``tfopt bench pipeline --service-workers``.

For each worker count N the benchmark asks for, one dispatcher and N workers run as separate
processes on localhost (``python -m tfopt.bench.service_workers dispatcher|worker``, which runs
``tfopt.data.service.serve_main``, the serve loop of ``tfopt data-service``), so that a pipeline built with ``service=`` runs its
preprocessing outside the benchmark's process: servers inside it would share its interpreter
lock and thread pools with the client, which is not how the service is used. Each count gets
its own dispatcher because a job spreads over every worker its dispatcher knows, and a worker
cannot be taken out of a dispatcher without waiting for its heartbeat to time out.

On one machine the workers still share the benchmark's cores: the figures show what the
service costs and how it scales on this host, not the speed-up of workers on other hosts.

Every server is stopped on every way out of :func:`local_services` (an exception, Ctrl-C,
SIGTERM): workers first (a worker whose dispatcher is gone can hang while stopping), SIGKILL
after a grace period. The servers are children of :class:`tfopt._supervisor.Supervisor`: each
runs in its own session, so a Ctrl-C in the terminal reaches only the benchmark, which then
stops them, and on Linux they die with it if it is killed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tfopt._signals import PendingSignal, signals_raise
from tfopt._supervisor import Supervisor
from tfopt.data import service
from tfopt.errors import TfoptError

logger = logging.getLogger("tfopt")

MAX_SERVICE_WORKERS = 8  # per count: each worker is a whole TensorFlow process, even idle
START_TIMEOUT = 120.0  # seconds for a server to import TensorFlow and print its address: far
#                        beyond one start, which slows while several start at once
# seconds between SIGTERM and SIGKILL: a server gives itself service.STOP_GRACE to stop
STOP_GRACE = service.STOP_GRACE + 3.0


@dataclasses.dataclass(frozen=True)
class _Server:
    role: str  # "dispatcher" or "worker"
    workers: int  # the worker count of the service it belongs to
    process: subprocess.Popen
    log: Path  # its stderr


class LocalServices:
    """Dispatchers and workers started by :func:`local_services`; see the module docstring."""

    def __init__(self, workdir: Path, signals: PendingSignal | None = None):
        self._workdir = workdir
        self._signals = signals
        self._addresses: dict[int, str] = {}
        self._servers: list[_Server] = []
        # one supervisor a role: workers are stopped before their dispatchers; SIGKILL when
        # the benchmark dies (a server that may ignore SIGTERM must not outlive it); no
        # forwarding: the benchmark answers Ctrl-C itself and then stops them
        self._supervisors = {role: Supervisor(STOP_GRACE, death_signal=signal.SIGKILL,
                                              forward_signals=False)
                             for role in ("worker", "dispatcher")}

    def address(self, workers: int) -> str:
        """The dispatcher address (``grpc://localhost:PORT``) of the ``workers``-worker service."""
        return self._addresses[workers]

    def check_signals(self) -> None:
        """Raise SIGTERM's SystemExit or Ctrl-C's KeyboardInterrupt if one came and its first
        raise was swallowed (in a ``__del__``): a safe point between runs, so that a long
        benchmark stops within one run."""
        if self._signals is not None:
            self._signals.check()

    def pids(self) -> list[int]:
        """Process ids of every server started (running or not)."""
        return [server.process.pid for server in self._servers]

    def cpu_seconds(self, workers: int) -> float | None:
        """User + system CPU seconds used so far by the ``workers``-worker service's processes.

        None where ``/proc`` cannot tell (not Linux).
        """
        try:
            return sum(_proc_cpu_seconds(server.process.pid) for server in self._servers
                       if server.workers == workers)
        except OSError:
            return None

    def _start(self, role: str, args: list[str], workers: int) -> _Server:
        log = self._workdir / f"{role}-{len(self._servers)}.log"
        with open(log, "wb") as stderr:  # the child keeps its own descriptor
            process = self._supervisors[role].start(
                [sys.executable, "-m", __name__, role, *args],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True,
                # no GPU for the servers: they decode on CPUs, and a TensorFlow process that
                # sees a GPU reserves most of its memory, which the benchmark needs
                env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        server = _Server(role, workers, process, log)
        self._servers.append(server)
        return server

    @staticmethod
    def _address_of(server: _Server, timeout: float) -> str:
        """The first stdout line of a server: its address."""
        process = server.process
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        line = process.stdout.readline().strip() if ready else ""
        if not line.startswith("grpc://"):
            tail = server.log.read_text(errors="replace").strip().splitlines()[-3:]
            state = (f"exit code {process.poll()}" if process.poll() is not None
                     else f"no address within {timeout:.0f} s")
            raise TfoptError(f"the local tf.data service {server.role} did not start ({state}): "
                             + (" | ".join(tail) or "no output"))
        return line

    def _stop(self) -> None:
        """SIGTERM the workers, then the dispatchers; SIGKILL what is left after the grace
        (a worker that ran a job sometimes ignores SIGTERM: see tfopt/data/service.py)."""
        for role in ("worker", "dispatcher"):
            self._supervisors[role].stop()
        for server in self._servers:
            server.process.stdout.close()


@contextlib.contextmanager
def local_services(worker_counts, progress=None,
                   start_timeout: float = START_TIMEOUT) -> Iterator[LocalServices]:
    """Start, for each count, a dispatcher and that many workers on localhost; stop them after.

    Args:
        worker_counts: Worker counts (0 is skipped: it means no service).
        progress: Called with a line once the servers are up. Defaults to None.
        start_timeout: Seconds each server may take to print its address. Defaults to 120.

    Raises:
        tfopt.TfoptError: A server did not start (the message quotes its last log lines).

    Example:
        >>> with local_services([1, 2]) as services:
        ...     builder = PipelineBuilder("shards/", batch_size=64, service=services.address(2))
    """
    counts = sorted({count for count in worker_counts if count > 0})
    with tempfile.TemporaryDirectory(prefix="tfopt-service-") as workdir, \
            signals_raise(_SIGNAL_EXITS) as signals:
        services = LocalServices(Path(workdir), signals)
        try:
            # dispatchers first, then every worker at once: they import TensorFlow in parallel
            dispatchers = [services._start("dispatcher", ["--port", "0"], count)
                           for count in counts]
            for server in dispatchers:
                services._addresses[server.workers] = services._address_of(server, start_timeout)
            workers = [services._start("worker", ["--dispatcher", services.address(count)],
                                       count)
                       for count in counts for _ in range(count)]
            for server in workers:
                services._address_of(server, start_timeout)
            if progress and counts:
                progress(f"tf.data service: {len(counts)} local dispatcher(s) and "
                         f"{sum(counts)} worker process(es) up")
            yield services
        finally:
            services._stop()


# SIGTERM exits 143 (128 + 15); Ctrl-C stays KeyboardInterrupt, and both stop the servers
# first, even where TensorFlow swallows the first raise (see tfopt/_signals.py)
_SIGNAL_EXITS = {signal.SIGTERM: lambda: SystemExit(128 + signal.SIGTERM),
                 signal.SIGINT: KeyboardInterrupt}


def _proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process from ``/proc/PID/stat``, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the name in (...) may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":  # a server process: python -m tfopt.bench.service_workers ROLE ...
    service.serve_main(sys.argv[1:])
