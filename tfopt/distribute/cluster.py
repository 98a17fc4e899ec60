"""Cluster configuration: build and read ``TF_CONFIG`` and Slurm's environment.

One place answers "which worker am I, of how many": :func:`cluster_info` reads ``TF_CONFIG``
(or a cluster given directly), else a Slurm job step, else says "one local worker". Workers are
numbered as ``MultiWorkerMirroredStrategy`` numbers them (the chief first, then the workers);
evaluators and parameter servers hold no place. :func:`tf_config` and
:func:`cluster_tf_configs` build ``TF_CONFIG`` for a cluster. No TensorFlow is imported.

Raises:
    InvalidArgumentError: from :func:`cluster_info` and :func:`parse_tf_config` for a malformed
        ``TF_CONFIG`` (the message names it and says what is wrong), or a Slurm variable that
        is not a number.

Example:
    >>> info = cluster_info({"TF_CONFIG": json.dumps(tf_config(["a:1", "b:1"], 1))})
    >>> info.workers, info.index, info.source
    (2, 1, 'tf_config')
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import socket
from collections.abc import Mapping, Sequence

from tfopt._limits import ChildLimit, child_limits, over_limits
from tfopt._validate import is_int, require
from tfopt.errors import InvalidArgumentError

LOCALHOST = "localhost"

# TF_CONFIG task types that run the model (and so hold replicas and a worker place) under
# MultiWorkerMirroredStrategy, in the order it numbers them.
REPLICA_TASKS = ("chief", "worker")

# Set in each worker `tfopt launch` starts. The launcher watches its workers and stops the job
# when one exits, so a worker's heartbeats need not end it: its strategy's coordination service
# waits LAUNCHED_HEARTBEAT_S for them instead of TensorFlow's 10 s, which a worker starved of
# CPU by the other workers' input pipelines on a small machine can miss.
LAUNCHED_ENV = "TFOPT_LAUNCHED"
LAUNCHED_HEARTBEAT_S = 60.0

# The task types TensorFlow's cluster resolvers know.
TASK_TYPES = ("chief", "worker", "evaluator", "ps")

_TF_CONFIG_SHAPE = ('{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", '
                    '"index": 0}}')


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """Which training worker this process is, of how many, and where that was read.

    Attributes:
        workers: Training workers (chief and worker tasks) of the cluster; 1 outside one.
        index: This process's place among them, the chief first; None for an evaluator or a
            parameter server, or a ``TF_CONFIG`` without a task.
        source: "tf_config", "slurm", "resolver" (a cluster resolver given) or "local".
        task_type: The task type ("chief", "worker", "evaluator", "ps"); None when unknown.
            Defaults to None.
        addresses: The training workers' ``host:port`` in place order; () where the cluster
            does not list them (Slurm). Defaults to ().
        cluster: The cluster spec as read, task type to addresses. Defaults to {}.
    """

    workers: int
    index: int | None
    source: str
    task_type: str | None = None
    addresses: tuple[str, ...] = ()
    cluster: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict,
                                                               hash=False)

    def __post_init__(self):
        require(is_int(self.workers) and self.workers >= 1, "workers", self.workers,
                "an int >= 1")
        require(self.index is None or (is_int(self.index) and 0 <= self.index < self.workers),
                "index", self.index, f"None or an int from 0 to {self.workers - 1}")
        require(self.source in ("tf_config", "slurm", "resolver", "local"), "source",
                self.source, "one of tf_config, slurm, resolver, local")
        object.__setattr__(self, "addresses", tuple(self.addresses))

    @property
    def is_multi_worker(self) -> bool:
        """More than one training worker."""
        return self.workers > 1

    @property
    def is_chief(self) -> bool:
        """Place 0: the chief task, or worker 0 of a cluster without one."""
        return self.index == 0


# -- building TF_CONFIG -----------------------------------------------------------------------


def parse_hosts(hosts: str | Sequence[str]) -> list[str]:
    """``["host1:2222", "host2:2222"]`` from ``"host1:2222,host2:2222"`` (or a list), checked.

    Args:
        hosts: Comma-separated ``host:port`` addresses, or a list of them; IPv6 hosts in
            brackets (``[::1]:2222``).

    Raises:
        InvalidArgumentError: An address without a port, a port outside 1-65535, an empty
            list, or the same address twice.

    Example:
        >>> parse_hosts("10.0.0.1:2222,10.0.0.2:2222")
        ['10.0.0.1:2222', '10.0.0.2:2222']
    """
    items = hosts.split(",") if isinstance(hosts, str) else list(hosts)
    addresses = [item.strip() for item in items if item.strip()]
    require(bool(addresses), "hosts", hosts, "one or more host:port addresses, comma-separated")
    for address in addresses:
        host, _, port = address.rpartition(":")
        valid = bool(host) and port.isdigit() and 1 <= int(port) <= 65535
        require(valid, "hosts", address,
                "host:port with a port from 1 to 65535, e.g. worker0.example.com:2222")
    duplicates = sorted({a for a in addresses if addresses.count(a) > 1})
    require(not duplicates, "hosts", ",".join(duplicates), "each address once")
    return addresses


def free_ports(count: int, host: str = LOCALHOST) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` now.

    Each comes from binding a socket to port 0; all stay open until every port is found, so
    the ports differ. Free when returned, not reserved: :func:`tfopt.launch_workers` retries
    when a worker finds its port taken.

    Args:
        count: How many ports.
        host: The address to bind. Defaults to "localhost".

    Raises:
        InvalidArgumentError: ``count`` < 1, or more ports than can be held open at once here
            (the open-file limit, or the free ports of the ephemeral range; the message says
            how many were found).

    Example:
        >>> free_ports(2)
        [41263, 37811]
    """
    require(is_int(count) and count >= 1, "count", count, "an int >= 1")
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            try:
                sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                sock.bind((host, 0))
            except OSError as error:
                if error.errno not in (errno.EMFILE, errno.ENFILE, errno.EADDRINUSE,
                                       errno.ENOBUFS, errno.ENOMEM):
                    raise
                # out of descriptors or of ephemeral ports: the same error at any count above
                raise InvalidArgumentError(
                    f"count={count}: expected at most {len(ports)} here: {len(ports)} ports "
                    f"were found free on {host} before {error.strerror or error} (each held "
                    "open by a socket until all are found; see ulimit -n and "
                    "net.ipv4.ip_local_port_range)") from None
            ports.append(sock.getsockname()[1])
    return ports


# Where Linux says which ports binding to port 0 picks from, and which of them it skips.
_PORT_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_RESERVED_PORTS = "/proc/sys/net/ipv4/ip_local_reserved_ports"
_TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def port_limit() -> ChildLimit | None:
    """The limit :func:`free_port_count` sets on workers given a port each; None where the
    system does not say."""
    counted = free_port_count()
    if counted is None:
        return None
    ports, where = counted
    return ChildLimit("free ports", ports,
                      f"each worker takes a free port and {ports} are free ({where})",
                      "widen the range (sysctl -w net.ipv4.ip_local_port_range) or start fewer")


def free_port_count() -> tuple[int, str] | None:
    """How many ports :func:`free_ports` can find now, at most, and where that was read.

    Binding to port 0 takes a port of the kernel's ephemeral range
    (``net.ipv4.ip_local_port_range``, 32768-60999 by default: 28232 ports) that is neither
    reserved (``net.ipv4.ip_local_reserved_ports``) nor held by a TCP socket now.

    Returns:
        ``(ports, description)``, e.g. ``(28190, "net.ipv4.ip_local_port_range 32768-60999, 42
        in use")``; None where the system does not say (not Linux).

    Example:
        >>> free_port_count()[0]
        28190
    """
    try:
        with open(_PORT_RANGE) as handle:
            low, high = (int(part) for part in handle.read().split())
    except (OSError, ValueError):
        return None
    taken: set[int] = set()
    with contextlib.suppress(OSError, ValueError):
        with open(_RESERVED_PORTS) as handle:
            for part in handle.read().strip().split(","):
                if part:
                    first, _, last = part.partition("-")
                    taken.update(range(int(first), int(last or first) + 1))
    for table in _TCP_TABLES:
        with contextlib.suppress(OSError):
            with open(table) as handle:
                next(handle, None)  # the header
                for line in handle:
                    # "sl local_address:port(hex) rem_address ...": the local port
                    with contextlib.suppress(IndexError, ValueError):
                        taken.add(int(line.split()[1].rsplit(":", 1)[1], 16))
    in_use = sum(low <= port <= high for port in taken)
    return (max(0, high - low + 1 - in_use),
            f"net.ipv4.ip_local_port_range {low}-{high}, {in_use} in use or reserved")


def tf_config(workers: Sequence[str], index: int, task_type: str = "worker") -> dict:
    """The ``TF_CONFIG`` of task ``index`` in a cluster of ``workers``.

    Args:
        workers: Every worker's ``host:port``, in task order.
        index: This task's position in ``workers``.
        task_type: The task type. Defaults to "worker" (worker 0 is the chief under
            ``MultiWorkerMirroredStrategy``).

    Raises:
        InvalidArgumentError: ``index`` is outside ``workers``.

    Example:
        >>> tf_config(["localhost:2222", "localhost:2223"], 1)
        {'cluster': {'worker': ['localhost:2222', 'localhost:2223']}, 'task': {'type': 'worker', 'index': 1}}
    """
    require(is_int(index) and 0 <= index < len(workers), "index", index,
            f"a task index from 0 to {len(workers) - 1}")
    return {"cluster": {task_type: list(workers)}, "task": {"type": task_type, "index": index}}


def cluster_tf_configs(workers: int | None = None, hosts: str | Sequence[str] | None = None,
                       host: str = LOCALHOST) -> list[dict]:
    """The ``TF_CONFIG`` of every worker of a cluster, without starting anything.

    Give ``hosts`` for a real cluster (one address per worker), or ``workers`` for that many
    free ports on ``host``.

    Args:
        workers: Worker count; must equal the number of ``hosts`` when both are given.
            Defaults to None (the number of ``hosts``).
        hosts: ``host:port`` addresses, comma-separated or a list. Defaults to None (free
            ports on ``host``).
        host: The host of found ports. Defaults to "localhost" (servers bind to localhost
            unless addresses are given).

    Raises:
        InvalidArgumentError: Neither ``workers`` nor ``hosts``, a bad address, a count that
            does not match ``hosts``, or more free ports than this machine has (or can hold
            open at once: the message names the limit).

    Example:
        >>> for config in cluster_tf_configs(hosts="node1:2222,node2:2222"):
        ...     print(json.dumps(config))
    """
    if hosts is not None:
        addresses = parse_hosts(hosts)
        require(workers is None or workers == len(addresses), "workers", workers,
                f"the number of hosts ({len(addresses)}) or nothing")
    else:
        require(is_int(workers) and workers >= 1, "workers", workers,
                "an int >= 1 (or hosts)")
        # refused at once: binding ever more sockets to port 0 slows as the range fills (long
        # before a large open-file limit is reached) before failing anyway; each port found
        # holds a socket (an open file) until all are
        limits = child_limits(workers, files_per_child=1, tasks_per_child=0, noun="port")
        ports = port_limit()
        refusal = over_limits(workers, limits if ports is None else [*limits, ports], "workers")
        if refusal is not None:
            raise InvalidArgumentError(refusal)
        addresses = [f"{host}:{port}" for port in free_ports(workers, host)]
    return [tf_config(addresses, index) for index in range(len(addresses))]


# -- reading TF_CONFIG and Slurm --------------------------------------------------------------


def _bad(what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"TF_CONFIG: {what}; expected {_TF_CONFIG_SHAPE}")


def parse_tf_config(raw: str | Mapping) -> dict:
    """``TF_CONFIG`` (a JSON string or a dict) as ``{"cluster": {...}, "task": {...}}``, checked.

    A bare cluster spec (``{"worker": [...]}``, no "cluster" or "task" key) is read as the
    cluster. Addresses become tuples; a task without an index gets index 0.

    Args:
        raw: The value of ``TF_CONFIG``, or the dict it holds.

    Raises:
        InvalidArgumentError: Not JSON, not an object, a cluster that does not map task types
            to lists of "host:port" strings, a task that is not an object, an unknown task
            type, or a task index outside its task type's list.

    Example:
        >>> parse_tf_config('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}}')
        {'cluster': {'worker': ('a:1',)}, 'task': {'type': 'worker', 'index': 0}}
    """
    if isinstance(raw, Mapping):
        config = dict(raw)
    else:
        require(isinstance(raw, str), "TF_CONFIG", raw, "a JSON string or a dict")
        try:
            config = json.loads(raw)
        except ValueError as error:
            raise InvalidArgumentError(
                f"TF_CONFIG is not valid JSON ({error}): {raw[:200]!r}; expected "
                f"{_TF_CONFIG_SHAPE}") from None
        if not isinstance(config, dict):
            raise _bad(f"{raw[:200]!r} is not a JSON object")
    bare = "cluster" not in config and "task" not in config
    spec = config if bare else config.get("cluster") or {}
    if not isinstance(spec, Mapping):
        raise _bad(f"cluster={spec!r} is not an object mapping task types to 'host:port' lists")
    cluster = {}
    for task_type, addresses in spec.items():
        if isinstance(addresses, Mapping):  # ClusterSpec's sparse form {index: address}
            addresses = [addresses[key] for key in sorted(addresses, key=int)]
        if (not isinstance(addresses, (list, tuple))
                or not all(isinstance(address, str) and address for address in addresses)):
            raise _bad(f"cluster[{task_type!r}]={addresses!r} is not a list of 'host:port' "
                       "strings")
        cluster[str(task_type)] = tuple(addresses)
    parsed = {"cluster": cluster}
    task = None if bare else config.get("task")
    if task:
        if not isinstance(task, Mapping):
            raise _bad(f"task={task!r} is not an object")
        task_type, index = task.get("type"), task.get("index", 0)
        if task_type not in TASK_TYPES:
            raise _bad(f"task type {task_type!r} is not one of {', '.join(TASK_TYPES)}")
        if isinstance(index, str) and index.isdigit():
            index = int(index)  # TensorFlow's resolver accepts "1" too
        if not is_int(index) or index < 0:
            raise _bad(f"task index {index!r} is not an int >= 0")
        listed = cluster.get(task_type, ())
        if cluster and task_type != "evaluator" and not 0 <= index < len(listed):
            raise _bad(f"task {task_type} {index} is not in the cluster, which lists "
                       f"{len(listed)} {task_type} task(s)")
        parsed["task"] = {"type": task_type, "index": int(index)}
    return parsed


def _place(cluster: Mapping[str, Sequence[str]], task_type: str | None,
           index: int | None) -> int | None:
    """The chief first, then the workers: MultiWorkerMirroredStrategy's numbering."""
    if task_type == "chief":
        return 0
    if task_type == "worker" and index is not None:
        return len(cluster.get("chief", ())) + index
    return None


def _from_spec(cluster: Mapping, task_type: str | None, index: int | None,
               source: str) -> ClusterInfo:
    addresses = tuple(address for task in REPLICA_TASKS for address in cluster.get(task, ()))
    workers = max(1, len(addresses))
    place = _place(cluster, task_type, index) if addresses else None
    if place is not None and place >= workers:
        place = None  # a task named outside an (empty) cluster: one local worker
    return ClusterInfo(workers, place, source, task_type, addresses,
                       {name: tuple(tasks) for name, tasks in cluster.items()})


def _slurm_number(environ: Mapping[str, str], name: str, default: str) -> int:
    raw = environ.get(name) or default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgumentError(
            f"{name}={raw!r}: expected an int >= 0 (Slurm sets it); unset it outside Slurm")
    return value


def _slurm(environ: Mapping[str, str]) -> ClusterInfo | None:
    """The current Slurm job step; None outside Slurm or in a step of one task.

    Inside ``srun`` the step's own count (``SLURM_STEP_NUM_TASKS``) is what the resolver reads;
    a batch script's step has one task even in a job of many, and must not be taken for a
    multi-worker cluster.
    """
    if not environ.get("SLURM_JOB_NODELIST"):
        return None
    name = "SLURM_STEP_NUM_TASKS" if environ.get("SLURM_STEP_NUM_TASKS") else "SLURM_NTASKS"
    tasks = _slurm_number(environ, name, "0")
    if tasks <= 1:
        return None
    rank = _slurm_number(environ, "SLURM_PROCID", "0")
    if rank >= tasks:
        raise InvalidArgumentError(
            f"SLURM_PROCID={rank}: expected a rank from 0 to {tasks - 1} ({name}={tasks})")
    return ClusterInfo(tasks, rank, "slurm", "worker")


def cluster_info(environ: Mapping[str, str] | None = None, *, cluster=None) -> ClusterInfo:
    """Which training worker this process is, of how many.

    Read from ``cluster`` when given, else ``TF_CONFIG``, else a Slurm job step of several
    tasks (``SLURM_JOB_NODELIST`` with ``SLURM_STEP_NUM_TASKS`` or ``SLURM_NTASKS`` > 1, the
    rank from ``SLURM_PROCID``), else one local worker (index 0). Pure given its arguments.

    Args:
        environ: The environment to read. Defaults to None (``os.environ``).
        cluster: A ``TF_CONFIG`` dict or JSON string, or a ``tf.distribute.cluster_resolver``
            resolver (anything with ``cluster_spec()``). Defaults to None (the environment).

    Returns:
        A :class:`ClusterInfo`.

    Raises:
        InvalidArgumentError: A malformed ``TF_CONFIG`` (see :func:`parse_tf_config`) or Slurm
            variable.

    Example:
        >>> cluster_info({}).workers
        1
    """
    environ = os.environ if environ is None else environ
    if cluster is not None and hasattr(cluster, "cluster_spec"):
        spec = cluster.cluster_spec().as_dict()
        task_type = getattr(cluster, "task_type", None)
        task_id = getattr(cluster, "task_id", None)
        return _from_spec(parse_tf_config({"cluster": spec})["cluster"], task_type,
                          task_id, "resolver")
    raw = cluster if cluster is not None else environ.get("TF_CONFIG")
    if cluster is not None or raw:  # an empty TF_CONFIG is no TF_CONFIG, as for TensorFlow
        config = parse_tf_config(raw)
        task = config.get("task", {})
        return _from_spec(config["cluster"], task.get("type"), task.get("index"), "tf_config")
    return _slurm(environ) or ClusterInfo(1, 0, "local")
