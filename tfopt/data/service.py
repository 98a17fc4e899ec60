"""tf.data service: a dispatcher and workers that run a pipeline's preprocessing elsewhere.

A training host whose CPUs cannot keep the accelerator fed hands its input pipeline to
worker processes (on this machine or others): the pipeline builder sends the dataset graph
to a dispatcher (``PipelineConfig(service="grpc://host:port")``), the dispatcher assigns
work to the registered workers, and the trainer only receives finished batches.

Addresses. ``host`` is the address a server *advertises*: the dispatcher's address that
workers and clients dial, and the worker's address that the dispatcher hands to clients.
It defaults to ``localhost``, so nothing outside this machine is told where to connect.
TensorFlow 2.21's servers, however, always *listen* on every interface (the C++ server binds
``[::]:port``; ``DispatcherConfig`` and ``WorkerConfig`` have no bind-address field, checked
with ``ss -ltn``: ``*:PORT``), and the service has no authentication. On a machine reachable
from an untrusted network, block the ports with a firewall or run the servers in a private
network namespace; tfopt cannot restrict the listening socket itself.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re

import tensorflow as tf

from tfopt.errors import InvalidArgumentError, TfoptError

logger = logging.getLogger("tfopt")

DEFAULT_HOST = "localhost"  # advertised address; see the module docstring for the bind address
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
    if not isinstance(port, int) or not 0 <= port < 65536:
        raise InvalidArgumentError(f"port={port!r}: expected 0 (any free port) to 65535")
