"""tf.data service: a dispatcher and workers that run a pipeline's preprocessing elsewhere.

A training host whose CPUs cannot keep the accelerator fed hands its input pipeline to
worker processes (on this machine or others): the pipeline builder sends the dataset graph
to a dispatcher (``PipelineConfig(service="grpc://host:port")``), the dispatcher assigns
work to the registered workers, and the trainer only receives finished batches.

Servers advertise ``localhost`` unless a host is given, but TensorFlow's servers listen on every
interface and the service has no authentication: see ``docs/data.md`` before running them on a
machine reachable from an untrusted network. TensorFlow is imported by the functions that
start servers, not by this module.

Raises:
    tfopt.InvalidArgumentError: A malformed address, port or work folder.
    tfopt.TfoptError: A server did not start.

Example:
    >>> dispatcher = start_dispatcher()
    >>> worker = start_worker(dispatcher.address)
    >>> PipelineBuilder("shards/", batch_size=64, service=dispatcher.address)
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn

from tfopt._validate import whole_number
from tfopt.errors import InvalidArgumentError, TfoptError

logger = logging.getLogger("tfopt")

DEFAULT_HOST = "localhost"  # advertised address; see docs/data.md for the bind address
STOP_GRACE = 5.0  # seconds a server gets to stop cleanly after Ctrl-C or SIGTERM
PROTOCOL = "grpc"  # the only protocol TensorFlow's data service ships with
_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")


def parse_address(address: str, argument: str = "service") -> str:
    """Check a dispatcher address and return it as ``grpc://host:port``.

    Args:
        address: ``grpc://host:port`` or ``host:port``.
        argument: The argument's name, for the error message. Defaults to "service".

    Raises:
        tfopt.InvalidArgumentError: Not a ``host:port`` address with a port in 1-65535.

    Example:
        >>> parse_address("localhost:5050")
        'grpc://localhost:5050'
    """
    match = _ADDRESS.match(str(address).strip()) if address is not None else None
    if not match or not 0 < int(match["port"]) < 65536:
        raise InvalidArgumentError(
            f"{argument}={address!r}: expected a dispatcher address such as "
            "'grpc://localhost:5050' (the first line 'tfopt data-service dispatcher' prints)")
    return f"{PROTOCOL}://{match['host']}:{int(match['port'])}"


@dataclasses.dataclass
class ServiceServer:
    """A running dispatcher or worker: its server object and the address it advertises.

    Attributes:
        role: ``"dispatcher"`` or ``"worker"``.
        address: ``grpc://host:port``; for a dispatcher, the address to give to workers and
            to ``PipelineConfig(service=...)``.
        server: The ``tf.data.experimental.service`` server object.
    """

    role: str
    address: str
    server: object

    def join(self) -> None:
        """Block until the server stops (it serves until the process ends)."""
        self.server.join()

    def stop(self) -> None:
        """Stop serving (dispatcher state kept in ``work_dir`` survives)."""
        self.server._stop()  # noqa: SLF001  (the public API has no stop; tests need one)


def _port_of(target: str) -> int:
    return int(target.rsplit(":", 1)[1])


def start_dispatcher(port: int = 0, host: str = DEFAULT_HOST,
                     work_dir: str | None = None) -> ServiceServer:
    """Start a tf.data service dispatcher in this process.

    Args:
        port: Port to listen on; 0 picks a free one. Defaults to 0.
        host: Address advertised in the returned ``address`` (the listening socket is on all
            interfaces whatever this says; see the module docstring). Defaults to "localhost".
        work_dir: Folder for the dispatcher's journal: with it, a restarted dispatcher
            recovers its jobs and workers (fault-tolerant mode). Defaults to None (state in
            memory only).

    Raises:
        tfopt.InvalidArgumentError: ``port`` outside 0-65535.
        tfopt.InvalidArgumentError: ``work_dir`` cannot be created.
        tfopt.TfoptError: The server did not start (the port is in use).

    Example:
        >>> dispatcher = start_dispatcher()
        >>> dispatcher.address
        'grpc://localhost:40123'
    """
    import tensorflow as tf

    _check_port(port)
    if work_dir is not None:
        # TensorFlow reports a folder it cannot create as a bare RuntimeError
        try:
            os.makedirs(work_dir, exist_ok=True)
        except OSError as error:
            raise InvalidArgumentError(f"work_dir={str(work_dir)!r}: cannot create the folder "
                                       f"({error.strerror})") from None
    config = tf.data.experimental.service.DispatcherConfig(
        port=port, protocol=PROTOCOL, work_dir=work_dir,
        fault_tolerant_mode=work_dir is not None)
    server = _started("dispatcher", port, lambda: tf.data.experimental.service.DispatchServer(config))
    address = f"{PROTOCOL}://{host}:{_port_of(server.target)}"
    logger.info("tf.data service dispatcher at %s", address)
    return ServiceServer("dispatcher", address, server)


def start_worker(dispatcher: str, port: int = 0, host: str = DEFAULT_HOST) -> ServiceServer:
    """Start a tf.data service worker in this process and register it with a dispatcher.

    Args:
        dispatcher: The dispatcher's address, ``grpc://host:port`` or ``host:port``.
        port: Port to listen on; 0 picks a free one. Defaults to 0.
        host: Address the dispatcher gives clients to fetch this worker's data (listening is
            on all interfaces; see the module docstring). Defaults to "localhost": only
            clients on this machine can use the worker.

    Raises:
        tfopt.InvalidArgumentError: A malformed ``dispatcher`` address or ``port``.
        tfopt.TfoptError: The server did not start (the port is in use).

    Example:
        >>> worker = start_worker("grpc://localhost:40123")
    """
    import tensorflow as tf

    _check_port(port)
    target = parse_address(dispatcher, "dispatcher").split("://", 1)[1]
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=target, worker_address=f"{host}:%port%", port=port,
        protocol=PROTOCOL, data_transfer_address=f"{host}:%dts_port%")
    server = _started("worker", port, lambda: tf.data.experimental.service.WorkerServer(config))
    address = f"{PROTOCOL}://{host}:{_port_of(server._address)}"  # noqa: SLF001
    logger.info("tf.data service worker at %s, dispatcher %s", address, target)
    return ServiceServer("worker", address, server)


def _started(role: str, port: int, start):
    """``start()``, with TensorFlow's bare RuntimeError (a port in use) as one line."""
    try:
        return start()
    except RuntimeError as error:
        raise TfoptError(f"the tf.data service {role} did not start on port {port} ({error}); "
                         "the port may be in use: choose another, or 0 for a free one") from None


def _check_port(port: int) -> None:
    whole_number(port, "port", minimum=0, maximum=65535,
                 expected="0 (any free port) to 65535")


def serve(server: ServiceServer, on_stop: Callable[[str], object] | None = None,
          on_ready: Callable[[], object] | None = None) -> NoReturn:
    """Serve until Ctrl-C or SIGTERM, then exit the process with code 0.

    For a process that runs one server (``tfopt data-service``, the benchmark's local
    services): it installs SIGTERM and SIGINT handlers and never returns.

    Known issue: a worker that has run a job sometimes does not react to SIGTERM at all (seen
    in the tests on TensorFlow 2.21, one worker of two; cause not yet found); SIGKILL stops it.

    Args:
        server: The server to keep running.
        on_stop: Called with a one-line message once the server stopped, before the exit.
            Defaults to None (the message is logged at INFO level).
        on_ready: Called once the signal handlers are in place (announce the address here:
            a parent that signals the process as soon as it reads the address would
            otherwise kill it before the handlers exist, with exit code -15). Defaults to
            None.
    """
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if on_ready is not None:
        on_ready()
    # wait on an Event instead of server.join(): join() blocks in C++ and never lets the
    # Python signal handlers run
    while not stop.wait(0.5):
        pass
    # a worker whose dispatcher is already gone can block in stop() and in the server's
    # destructor at interpreter shutdown (its gRPC threads retry the dispatcher; seen in the
    # tests when both got SIGTERM at once), so stopping gets STOP_GRACE seconds and the
    # process then leaves without the interpreter's shutdown
    stopper = threading.Thread(target=server.stop, daemon=True)
    stopper.start()
    stopper.join(STOP_GRACE)
    message = f"tfopt: {server.role} at {server.address} stopped"
    if on_stop is None:
        logger.info("%s", message)
    else:
        on_stop(message)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def serve_main(argv: Sequence[str], stdout=None, stderr=None) -> NoReturn:
    """A server process's main: start the server ``argv`` names, write its address, serve.

    ``argv`` is ``dispatcher [--port P] [--host H] [--work-dir D]`` or
    ``worker --dispatcher ADDRESS [--port P] [--host H]``, as for ``tfopt data-service``. The
    first line on ``stdout`` is the server's address (a parent process waits for it); the
    stop message goes to ``stderr``. For processes started by other tfopt code (the
    benchmark's local services); people use the CLI.

    Args:
        argv: The role and its options.
        stdout: Where the address goes. Defaults to None (``sys.stdout``).
        stderr: Where the stop message goes. Defaults to None (``sys.stderr``).

    Raises:
        tfopt.InvalidArgumentError: An unknown role or option, or a malformed value.
        tfopt.TfoptError: The server did not start.
    """
    parser = argparse.ArgumentParser(prog="tfopt data-service", add_help=False,
                                     exit_on_error=False)
    parser.add_argument("role", choices=("dispatcher", "worker"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--dispatcher", default=None)
    try:
        args = parser.parse_args(list(argv))
    except (argparse.ArgumentError, SystemExit) as error:
        raise InvalidArgumentError(f"argv={list(argv)!r}: {error}; expected dispatcher "
                                   "[--port P] [--host H] [--work-dir D] or worker "
                                   "--dispatcher ADDRESS [--port P] [--host H]") from None
    if args.role == "dispatcher":
        server = start_dispatcher(port=args.port, host=args.host, work_dir=args.work_dir)
    else:
        if args.dispatcher is None:
            raise InvalidArgumentError("dispatcher=None: a worker needs --dispatcher ADDRESS")
        server = start_worker(args.dispatcher, port=args.port, host=args.host)
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr

    def announce():
        out.write(server.address + "\n")
        out.flush()  # a parent process reads this line before the server ever exits

    serve(server, on_stop=lambda message: err.write(message + "\n"), on_ready=announce)
