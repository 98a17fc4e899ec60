"""tf.data service: a dispatcher and workers that run a pipeline's preprocessing elsewhere.

A training host whose CPUs cannot keep the accelerator fed hands its input pipeline to
worker processes (on this machine or others): the pipeline builder sends the dataset graph
to a dispatcher (``PipelineConfig(service="grpc://host:port")``), the dispatcher assigns
work to the registered workers, and the trainer only receives finished batches.

Servers advertise ``localhost`` unless a host is given, but TensorFlow's servers listen on every
interface and the service has no authentication: anyone who reaches a port can run any dataset
graph in the server's process (read and write files as its user). Each server logs a warning
naming its port when it starts; see ``docs/data.md`` before running them on a machine reachable
from an untrusted network. A worker waits for its dispatcher to answer, saying so, for at most
``dispatcher_timeout`` seconds. TensorFlow is imported by the functions that start
servers, not by this module.

Raises:
    tfopt.errors.InvalidArgumentError: A malformed address, host, port or work folder.
    tfopt.TfoptError: A server did not start, or a worker's dispatcher did not answer.

Example:
    >>> dispatcher = start_dispatcher()
    >>> worker = start_worker(dispatcher.address)
    >>> PipelineBuilder("shards/", batch_size=64, service=dispatcher.address)
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import NoReturn

from tfopt._internals.tf_runtime import service_worker_address, stop_service_server
from tfopt._validate import number, whole_number
from tfopt.errors import InvalidArgumentError, TfoptError

logger = logging.getLogger("tfopt")

DEFAULT_HOST = "localhost"  # advertised address; see docs/data.md for the bind address
STOP_GRACE = 5.0  # seconds a server gets to stop cleanly after Ctrl-C or SIGTERM
PROTOCOL = "grpc"  # the only protocol TensorFlow's data service ships with
# seconds a worker waits for its dispatcher to answer: TensorFlow's worker retries a dead
# dispatcher for ever, silently
DISPATCHER_TIMEOUT = 60.0
_PROBE_INTERVAL = 1.0  # seconds between attempts to reach a dispatcher not yet there
_GET_VERSION = "/tensorflow.data.DispatcherService/GetVersion"  # every dispatcher answers it
_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})$")
# a host name's label (RFC 1123, and the underscores of container service names)
_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


def check_host(host, argument: str = "host") -> str:
    """Check a host name or IP address; return it as it goes before ``:port`` (IPv6 in
    brackets).

    Args:
        host: ``localhost``, ``node1.example.org``, ``10.0.0.5``, ``::1`` or ``[::1]``.
        argument: The argument's name, for the error message. Defaults to "host".

    Raises:
        tfopt.errors.InvalidArgumentError: Neither a host name nor an IP address.

    Example:
        >>> check_host("::1")
        '[::1]'
    """
    text = host.strip() if isinstance(host, str) else ""
    bare = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        ip = None
    if ip is not None:
        return f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    name = text.removesuffix(".")
    if name and len(name) <= 253 and all(_HOST_LABEL.match(label) for label in name.split(".")):
        return name
    raise InvalidArgumentError(
        f"{argument}={host!r}: expected a host name or an IP address, e.g. localhost, "
        "node1.example.org, 10.0.0.5 or [::1]")


def parse_address(address: str, argument: str = "service") -> str:
    """Check a dispatcher address and return it as ``grpc://host:port``.

    Args:
        address: ``grpc://host:port`` or ``host:port``.
        argument: The argument's name, for the error message. Defaults to "service".

    Raises:
        tfopt.errors.InvalidArgumentError: Not a ``host:port`` address with a port in 1-65535.

    Example:
        >>> parse_address("localhost:5050")
        'grpc://localhost:5050'
    """
    match = _ADDRESS.match(str(address).strip()) if address is not None else None
    try:
        host = check_host(match["host"]) if match else None
    except InvalidArgumentError:
        host = None
    if host is None or not 0 < int(match["port"]) < 65536:
        raise InvalidArgumentError(
            f"{argument}={address!r}: expected a dispatcher address such as "
            "'grpc://localhost:5050' (the first line 'tfopt data-service dispatcher' prints)")
    return f"{PROTOCOL}://{host}:{int(match['port'])}"


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
        stop_service_server(self.server)  # the public API has no stop; tests need one


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
        tfopt.errors.InvalidArgumentError: ``port`` outside 0-65535.
        tfopt.errors.InvalidArgumentError: ``work_dir`` cannot be created.
        tfopt.TfoptError: The server did not start (the port is in use).

    Example:
        >>> dispatcher = start_dispatcher()
        >>> dispatcher.address
        'grpc://localhost:40123'
    """
    _check_port(port)
    host = check_host(host)
    import tensorflow as tf

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
    _warn_open_port("dispatcher", _port_of(server.target))
    return ServiceServer("dispatcher", address, server)


def start_worker(dispatcher: str, port: int = 0, host: str = DEFAULT_HOST, *,
                 dispatcher_timeout: float | None = DISPATCHER_TIMEOUT) -> ServiceServer:
    """Start a tf.data service worker in this process and register it with a dispatcher.

    A dispatcher that does not answer yet is waited for (a warning says so), up to
    ``dispatcher_timeout`` seconds (:func:`wait_for_dispatcher`).

    Args:
        dispatcher: The dispatcher's address, ``grpc://host:port`` or ``host:port``.
        port: Port to listen on; 0 picks a free one. Defaults to 0.
        host: Address the dispatcher gives clients to fetch this worker's data (listening is
            on all interfaces; see the module docstring). Defaults to "localhost": only
            clients on this machine can use the worker.
        dispatcher_timeout: Seconds to wait for the dispatcher, or None to wait as long as it
            takes. Defaults to 60.

    Raises:
        tfopt.errors.InvalidArgumentError: A malformed ``dispatcher`` address, ``host``, ``port`` or
            ``dispatcher_timeout``.
        tfopt.TfoptError: No dispatcher answered in time, or the server there is none, or the
            worker did not start (the port is in use).

    Example:
        >>> worker = start_worker("grpc://localhost:40123")
    """
    _check_port(port)
    host = check_host(host)
    address = parse_address(dispatcher, "dispatcher")
    if dispatcher_timeout is not None:
        dispatcher_timeout = number(dispatcher_timeout, "dispatcher_timeout", low=0.0,
                                    open_low=True, expected="seconds > 0, or None")
    wait_for_dispatcher(address, dispatcher_timeout)
    import tensorflow as tf

    target = address.split("://", 1)[1]
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=target, worker_address=f"{host}:%port%", port=port,
        protocol=PROTOCOL, data_transfer_address=f"{host}:%dts_port%")
    # registers with the dispatcher before it returns; the one that answered above
    server = _started("worker", port, lambda: tf.data.experimental.service.WorkerServer(config))
    worker_port = _port_of(service_worker_address(server))
    logger.info("tf.data service worker at %s://%s:%d, dispatcher %s", PROTOCOL, host,
                worker_port, target)
    _warn_open_port("worker", worker_port)
    return ServiceServer("worker", f"{PROTOCOL}://{host}:{worker_port}", server)


def wait_for_dispatcher(address: str, timeout: float | None = DISPATCHER_TIMEOUT) -> None:
    """Return once a tf.data service dispatcher answers at ``address``; until then ask once a
    second, with one warning saying what is waited for. TensorFlow-free (grpcio's client).

    TensorFlow's worker retries a dispatcher that is not there for ever without a word, and
    its constructor holds Python's interpreter lock meanwhile (no signal handler, no timeout
    runs), so :func:`start_worker` asks first: the dispatcher's version call, which tells a
    dispatcher from a server that is none (a worker's address given by mistake, another
    program's port).

    Args:
        address: ``grpc://host:port``, as :func:`parse_address` returns it.
        timeout: Seconds to give up after, or None (never). Defaults to 60.

    Raises:
        tfopt.TfoptError: No dispatcher answered within ``timeout``, or the server there is
            not a dispatcher.
    """
    try:
        import grpc
    except ImportError as error:
        raise TfoptError(f"a tf.data service worker needs TensorFlow and its grpcio, which "
                         f"cannot be imported here ({error})") from None
    deadline = None if timeout is None else time.monotonic() + timeout
    warned = False
    with grpc.insecure_channel(address.split("://", 1)[1]) as channel:
        get_version = channel.unary_unary(_GET_VERSION, request_serializer=bytes,
                                          response_deserializer=bytes)
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            try:
                get_version(b"", timeout=2.0 if left is None else min(2.0, max(left, 0.1)))
            except grpc.RpcError as error:
                code = error.code()
                if code == grpc.StatusCode.UNIMPLEMENTED:
                    raise TfoptError(
                        f"{address} is a gRPC server but not a tf.data service dispatcher (a "
                        "worker's address?); give the dispatcher's address, the first line "
                        "'tfopt data-service dispatcher' prints") from None
                reason = ("it accepts connections but does not answer as a dispatcher"
                          if code == grpc.StatusCode.DEADLINE_EXCEEDED
                          else (error.details() or str(code)).rsplit(": ", 1)[-1].strip(" []"))
            else:
                if warned:
                    logger.warning("the dispatcher at %s answers; registering with it", address)
                return
            if left is not None and left <= 0:
                raise TfoptError(
                    f"no tf.data service dispatcher answered at {address} within {timeout:g} s "
                    f"({reason}); start 'tfopt data-service dispatcher' first and give its "
                    "address (the first line it prints), or wait longer (--dispatcher-timeout)")
            if not warned:
                limit = "as long as it takes" if deadline is None else f"up to {timeout:g} s"
                logger.warning("waiting for the tf.data service dispatcher at %s (%s), %s",
                               address, reason, limit)
                warned = True
            time.sleep(_PROBE_INTERVAL if left is None else max(0.0, min(_PROBE_INTERVAL, left)))


def _warn_open_port(role: str, port: int) -> None:
    """Say, where a server starts, what TensorFlow's servers do not let tfopt change."""
    logger.warning(
        "the tf.data service %s listens on port %d of every network interface of this machine, "
        "without authentication: anyone who can reach the port can run any dataset graph in "
        "this process, reading and writing files as this user (TensorFlow's servers have no "
        "listen-address setting). Unless every machine that can reach it is trusted, block the "
        "port to other machines, e.g. iptables -I INPUT -p tcp --dport %d ! -i lo -j DROP "
        "(servers and trainer on this machine), or allow only the training hosts; see "
        "docs/data.md", role, port, port)


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
        tfopt.errors.InvalidArgumentError: An unknown role or option, or a malformed value.
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
