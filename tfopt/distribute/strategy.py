"""The distribution strategy for this machine or cluster: pick it, build it, say why.

:func:`plan_strategy` decides (pure: from the devices and the cluster it is shown) and
:func:`select_strategy` builds the ``tf.distribute.Strategy`` itself. "auto", first match wins:
a TPU -> ``TPUStrategy``; several workers (``TF_CONFIG`` or a Slurm step, read by
:mod:`tfopt.distribute.cluster`) -> ``MultiWorkerMirroredStrategy`` with the Keras 3 fix
applied; several GPUs -> ``MirroredStrategy`` (NCCL, else hierarchical copy); one GPU ->
``OneDeviceStrategy``; CPU only -> the default strategy. A name overrides the rules. The rules'
reasons are in ``docs/distribute.md``.

Raises:
    InvalidArgumentError: An unknown strategy name, a malformed ``TF_CONFIG``, a
        parameter-server cluster, or "tpu" where no TPU is found.

Example:
    >>> plan = plan_strategy()
    >>> strategy = select_strategy(plan)
    >>> print(plan.describe(strategy))
    >>> with strategy.scope():
    ...     model = build_model()
    >>> dataset = dataset.batch(plan.global_batch(64, strategy))
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from tfopt._internals.tf_runtime import configure_coordination_service, registered_kernel_devices
from tfopt._tf import import_tensorflow
from tfopt._validate import choice, is_int, require
from tfopt.distribute.cluster import (
    LAUNCHED_ENV,
    LAUNCHED_HEARTBEAT_S,
    REPLICA_TASKS,
    ClusterInfo,
    cluster_info,
    parse_tf_config,
)
from tfopt.distribute.keras_multi_worker import fix_keras_multi_worker
from tfopt.errors import InvalidArgumentError

logger = logging.getLogger("tfopt")


class StrategyKind(str, enum.Enum):
    """The strategy names :func:`select_strategy` accepts."""

    AUTO = "auto"
    DEFAULT = "default"
    ONE_DEVICE = "one_device"
    MIRRORED = "mirrored"
    MULTI_WORKER = "multi_worker"
    TPU = "tpu"


STRATEGY_NAMES = tuple(kind.value for kind in StrategyKind)

# Environment variables that name a TPU: Cloud TPU nodes set TPU_NAME, Colab COLAB_TPU_ADDR.
_TPU_ENV = ("TPU_NAME", "COLAB_TPU_ADDR")


@dataclasses.dataclass(frozen=True)
class StrategyPlan:
    """What :func:`plan_strategy` decided: the strategy to build, why, and its replicas.

    Attributes:
        kind: The strategy to build; never ``StrategyKind.AUTO``.
        reason: One line naming the fact behind the choice.
        devices: The devices the strategy runs on, e.g. ``("/gpu:0", "/gpu:1")``; empty for the
            default, multi-worker and TPU strategies, which find their own devices.
            Defaults to ().
        all_reduce: The cross-device all-reduce of a mirrored plan: "nccl",
            "hierarchical_copy" or "reduction_to_one_device"; None for the other kinds.
            Defaults to None.
        cluster_source: Where a multi-worker or TPU cluster came from: "tf_config", "slurm",
            "resolver", "environment", "devices" or "local"; None for single-machine plans.
            Defaults to None.
        workers: Training workers of the cluster (1 on one machine). Defaults to 1.
        replicas: Model copies that each take a per-replica batch per step, over all workers
            (the built strategy's ``num_replicas_in_sync``); None where only the built strategy
            knows (multi-worker: each worker's devices; TPU: its cores). Defaults to None
            (1 for the default and one-device plans, one per device for mirrored ones).
    """

    kind: StrategyKind
    reason: str
    devices: tuple[str, ...] = ()
    all_reduce: str | None = None
    cluster_source: str | None = None
    workers: int = 1
    replicas: int | None = None

    def __post_init__(self):
        if not isinstance(self.kind, StrategyKind):
            object.__setattr__(self, "kind", choice(StrategyKind, self.kind, "kind"))
        require(self.kind is not StrategyKind.AUTO, "kind", self.kind.value,
                "a concrete strategy, not 'auto'")
        object.__setattr__(self, "devices", tuple(self.devices))
        require(is_int(self.workers) and self.workers >= 1, "workers", self.workers,
                "an int >= 1")
        if self.replicas is None:
            known = {StrategyKind.DEFAULT: 1, StrategyKind.ONE_DEVICE: 1,
                     StrategyKind.MIRRORED: len(self.devices) or None}
            object.__setattr__(self, "replicas", known.get(self.kind))
        require(self.replicas is None or (is_int(self.replicas) and self.replicas >= 1),
                "replicas", self.replicas, "None or an int >= 1")

    @property
    def name(self) -> str:
        """The kind's name: "default", "one_device", "mirrored", "multi_worker" or "tpu"."""
        return self.kind.value

    def global_batch(self, per_replica_batch: int, strategy=None) -> int:
        """The batch one step consumes over all replicas: ``per_replica_batch * replicas``.

        Batch the dataset with this size; the strategy splits it into per-replica batches.

        Args:
            per_replica_batch: Examples each replica computes on per step.
            strategy: The built strategy, whose ``num_replicas_in_sync`` counts the replicas.
                Defaults to None (this plan's ``replicas``).

        Raises:
            InvalidArgumentError: ``per_replica_batch`` is not a positive integer, or the plan
                does not know its replicas (multi-worker, TPU) and no ``strategy`` is given.

        Example:
            >>> plan_strategy("mirrored").global_batch(32)  # on 4 GPUs
            128
        """
        require(is_int(per_replica_batch) and per_replica_batch >= 1, "per_replica_batch",
                per_replica_batch, "a positive integer (examples per replica per step)")
        replicas = (self.replicas if strategy is None
                    else int(strategy.num_replicas_in_sync))
        if replicas is None:
            raise InvalidArgumentError(
                f"global_batch({per_replica_batch}): a {self.name} plan does not know its "
                "replicas before the strategy is built. Hint: pass the strategy, "
                "plan.global_batch(64, strategy)")
        return per_replica_batch * replicas

    def replace(self, **changes) -> StrategyPlan:
        """A copy with ``changes`` applied (and validated)."""
        return dataclasses.replace(self, **changes)

    def describe(self, strategy=None) -> str:
        """Several lines: the strategy class, its replicas and devices, and the reason.

        Args:
            strategy: The built strategy, for its class and replica count. Defaults to None
                (what the plan knows).
        """
        public = (_PUBLIC_CLASS[self.kind] if strategy is None or self.kind in _NAMED_OTHERWISE
                  else type(strategy).__name__)
        replicas = self.replicas if strategy is None else int(strategy.num_replicas_in_sync)
        lines = [f"strategy     {self.name} ({public})",
                 f"replicas     {replicas if replicas is not None else 'known once built'}"]
        if self.workers > 1:
            lines.append(f"workers      {self.workers}")
        if self.devices:
            lines.append(f"devices      {', '.join(self.devices)}")
        if self.all_reduce:
            lines.append(f"all-reduce   {self.all_reduce}")
        lines.append(f"reason       {self.reason}")
        return "\n".join(lines)


# The tf.distribute names of the strategies: the multi-worker one is a
# CollectiveAllReduceStrategy and the default one a private class, so their own class names
# would mislead.
_PUBLIC_CLASS = {StrategyKind.DEFAULT: "tf.distribute.get_strategy()",
                 StrategyKind.ONE_DEVICE: "OneDeviceStrategy",
                 StrategyKind.MIRRORED: "MirroredStrategy",
                 StrategyKind.MULTI_WORKER: "MultiWorkerMirroredStrategy",
                 StrategyKind.TPU: "TPUStrategy"}
_NAMED_OTHERWISE = (StrategyKind.DEFAULT, StrategyKind.MULTI_WORKER)


# -- facts ----------------------------------------------------------------------------------


def _device_type_and_index(device) -> tuple[str, int]:
    """("GPU", 1) from "/device:GPU:1", "/physical_device:GPU:1", "/gpu:1", "GPU:1" or a
    ``tf.config.LogicalDevice``/``PhysicalDevice``."""
    name = getattr(device, "name", device)
    require(isinstance(name, str) and ":" in name, "devices", device,
            "device names such as '/device:GPU:0' or tf.config device objects")
    parts = name.strip("/").split(":")
    try:
        return parts[-2].upper(), int(parts[-1])
    except (IndexError, ValueError):
        raise InvalidArgumentError(
            f"devices: {device!r} is not a device name such as '/device:GPU:0'") from None


def _local_devices() -> list[str]:
    tf = import_tensorflow()
    # physical devices: TPU VMs list their TPUs here before the TPU system is initialised.
    # Neither call below initialises the runtime, so logical devices can still be configured
    # and the GPUs' memory growth set after a plan.
    found = [device.name for device in tf.config.list_physical_devices()]
    cpus = tf.config.list_physical_devices("CPU")
    # a CPU split into logical devices (tests, multi-device code on CPU) counts each one
    split = tf.config.get_logical_device_configuration(cpus[0]) if cpus else None
    if split and len(split) > 1:
        found = [name for name in found if "CPU" not in name.upper()]
        found += [f"/device:CPU:{index}" for index in range(len(split))]
    return found


def nccl_available(gpu_count: int | None = None) -> bool:
    """Whether ``MirroredStrategy`` can all-reduce with NCCL on this machine.

    The rule is TensorFlow's own (``cross_device_ops.select_cross_device_ops``): NCCL needs
    Linux (TensorFlow ships no NCCL for Windows or macOS), a registered ``NcclAllReduce``
    kernel (CPU-only and ROCm-less builds have none), and whole GPUs (NCCL refuses several
    logical GPUs split from one physical GPU).

    Args:
        gpu_count: Logical GPUs the strategy would use; compared with the physical GPUs.
            Defaults to None (do not compare).

    Example:
        >>> nccl_available()
        False
    """
    if not sys.platform.startswith("linux"):
        return False
    tf = import_tensorflow()
    if "GPU" not in (registered_kernel_devices("NcclAllReduce") or []):
        return False
    if gpu_count is not None and gpu_count > len(tf.config.list_physical_devices("GPU")):
        return False
    return True


def _is_tpu_resolver(cluster) -> bool:
    return type(cluster).__name__ == "TPUClusterResolver"


# -- the decision ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Facts:
    gpus: tuple[str, ...]
    cpus: tuple[str, ...]
    tpus: tuple[str, ...]


def _facts(devices) -> _Facts:
    names = _local_devices() if devices is None else list(devices)
    by_type: dict[str, list[tuple[int, str]]] = {"GPU": [], "CPU": [], "TPU": []}
    for device in names:
        kind, index = _device_type_and_index(device)
        if kind in by_type:
            by_type[kind].append((index, f"/{kind.lower()}:{index}"))
    # one name per index: physical and logical listings of one device must not count twice
    unique = {kind: tuple(name for _, name in sorted(set(found)))
              for kind, found in by_type.items()}
    return _Facts(gpus=unique["GPU"], cpus=unique["CPU"] or ("/cpu:0",), tpus=unique["TPU"])


def _cluster_fact(cluster, environ) -> tuple[ClusterInfo, str | None]:
    """The cluster given or found in the environment, and its source (None: one machine)."""
    info = cluster_info(environ, cluster=None if _is_tpu_resolver(cluster) else cluster)
    if info.cluster.get("ps"):
        raise InvalidArgumentError(
            f"TF_CONFIG names parameter servers (ps: {list(info.cluster['ps'])!r}); "
            "select_strategy builds MultiWorkerMirroredStrategy, which has none. Hint: use "
            "tf.distribute.ParameterServerStrategy for a ps cluster.")
    return info, None if info.source == "local" else info.source


def _tpu_source(cluster, environ, facts: _Facts) -> str | None:
    if _is_tpu_resolver(cluster):
        return "resolver"
    if any(environ.get(name) for name in _TPU_ENV):
        return "environment"
    if facts.tpus:
        return "devices"
    return None


def _mirrored_plan(facts: _Facts, nccl: bool | None, reason: str) -> StrategyPlan:
    if not facts.gpus:
        # NCCL and hierarchical copy are GPU all-reduces; CPUs reduce on one device
        return StrategyPlan(StrategyKind.MIRRORED, reason, facts.cpus, "reduction_to_one_device")
    if nccl is None:
        nccl = nccl_available(len(facts.gpus))
    return StrategyPlan(StrategyKind.MIRRORED,
                        reason + (", NCCL all-reduce" if nccl
                                  else "; NCCL not available: hierarchical copy all-reduce"),
                        facts.gpus, "nccl" if nccl else "hierarchical_copy")


def plan_strategy(name: str = "auto", *, devices: Sequence | None = None, cluster=None,
                  nccl: bool | None = None,
                  environ: Mapping[str, str] | None = None) -> StrategyPlan:
    """Decide which strategy :func:`select_strategy` builds, without building it.

    Pure given its arguments: pass ``devices``, ``cluster``, ``nccl`` and ``environ`` to decide
    for a machine other than this one (tests drive the GPU and TPU branches this way).

    Args:
        name: "auto" (the rules in this module's docstring) or a strategy name that
            overrides them. Defaults to "auto".
        devices: Device names ("/device:GPU:0", "/gpu:1", ...) or ``tf.config`` device
            objects. Defaults to None (TensorFlow's physical devices, logical CPUs when split).
        cluster: A ``TF_CONFIG`` dict or JSON string, a ``tf.distribute.cluster_resolver``
            resolver, or a ``TPUClusterResolver``. Defaults to None (``TF_CONFIG`` or Slurm
            from ``environ``).
        nccl: Whether NCCL all-reduce works here. Defaults to None (:func:`nccl_available`).
        environ: Environment variables to read. Defaults to None (``os.environ``).

    Raises:
        InvalidArgumentError: An unknown ``name`` (the message lists the valid ones), a
            malformed ``TF_CONFIG``, a parameter-server cluster, or ``name="tpu"`` where no TPU
            is found.

    Example:
        >>> plan_strategy(devices=["/device:CPU:0", "/device:GPU:0", "/device:GPU:1"], nccl=True)
        StrategyPlan(kind=<StrategyKind.MIRRORED: 'mirrored'>, reason='2 local GPUs, NCCL all-reduce', devices=('/gpu:0', '/gpu:1'), all_reduce='nccl', cluster_source=None, workers=1, replicas=2)
    """
    kind = choice(StrategyKind, name, "strategy")
    environ = os.environ if environ is None else environ
    return _PLANNERS[kind](devices, cluster, nccl, environ)


def _plan_auto(devices, cluster, nccl, environ) -> StrategyPlan:
    if _is_tpu_resolver(cluster) or any(environ.get(env) for env in _TPU_ENV):
        return _plan_tpu(devices, cluster, nccl, environ)
    info, source = _cluster_fact(cluster, environ)
    if info.workers > 1:
        return StrategyPlan(StrategyKind.MULTI_WORKER,
                            f"{_WHERE[source]} names {info.workers} workers",
                            cluster_source=source, workers=info.workers)
    facts = _facts(devices)
    if facts.tpus:
        return _plan_tpu(devices, cluster, nccl, environ)
    if len(facts.gpus) > 1:
        return _mirrored_plan(facts, nccl, f"{len(facts.gpus)} local GPUs")
    if facts.gpus:
        return StrategyPlan(StrategyKind.ONE_DEVICE, "one GPU", facts.gpus[:1])
    return StrategyPlan(StrategyKind.DEFAULT,
                        "no GPU or TPU: the default strategy (a strategy over CPU devices "
                        "adds copies, not compute)")


def _plan_default(devices, cluster, nccl, environ) -> StrategyPlan:
    return StrategyPlan(StrategyKind.DEFAULT, "asked for by name")


def _plan_one_device(devices, cluster, nccl, environ) -> StrategyPlan:
    facts = _facts(devices)
    device = facts.gpus[0] if facts.gpus else facts.cpus[0]
    return StrategyPlan(StrategyKind.ONE_DEVICE, f"asked for by name, on {device}", (device,))


def _plan_mirrored(devices, cluster, nccl, environ) -> StrategyPlan:
    facts = _facts(devices)
    local = facts.gpus or facts.cpus
    return _mirrored_plan(facts, nccl, f"asked for by name, over {len(local)} "
                          f"{'GPU' if facts.gpus else 'CPU'} device(s)")


def _plan_multi_worker(devices, cluster, nccl, environ) -> StrategyPlan:
    info, source = _cluster_fact(cluster, environ)
    return StrategyPlan(StrategyKind.MULTI_WORKER,
                        f"asked for by name; {_WHERE[source]}: {info.workers} worker(s)",
                        cluster_source=source or "local", workers=info.workers)


_WHERE = {"tf_config": "TF_CONFIG", "slurm": "the Slurm job step",
          "resolver": "the cluster resolver", None: "no TF_CONFIG or Slurm step"}


def _plan_tpu(devices, cluster, nccl, environ) -> StrategyPlan:
    named = _is_tpu_resolver(cluster) or any(environ.get(env) for env in _TPU_ENV)
    # a named TPU is remote or not initialised yet: none of its cores is listed here
    facts = _Facts((), (), ()) if named else _facts(devices)
    source = _tpu_source(cluster, environ, facts)
    if source is None:
        raise InvalidArgumentError(
            "strategy='tpu': no TPU found (no TPU devices, no TPU_NAME or COLAB_TPU_ADDR, no "
            "TPUClusterResolver passed as cluster). Hint: pass cluster=tf.distribute."
            "cluster_resolver.TPUClusterResolver(tpu=...) for a remote TPU.")
    detail = {"resolver": "the TPUClusterResolver given",
              "environment": "a TPU named in the environment",
              "devices": f"{len(facts.tpus)} local TPU cores"}[source]
    return StrategyPlan(StrategyKind.TPU, detail, facts.tpus, cluster_source=source)


_PLANNERS = {
    StrategyKind.AUTO: _plan_auto,
    StrategyKind.DEFAULT: _plan_default,
    StrategyKind.ONE_DEVICE: _plan_one_device,
    StrategyKind.MIRRORED: _plan_mirrored,
    StrategyKind.MULTI_WORKER: _plan_multi_worker,
    StrategyKind.TPU: _plan_tpu,
}


# -- building -------------------------------------------------------------------------------


def _build_default(tf, plan, cluster):
    return tf.distribute.get_strategy()


def _build_one_device(tf, plan, cluster):
    return tf.distribute.OneDeviceStrategy(plan.devices[0])


_ALL_REDUCE = {
    "nccl": lambda tf: tf.distribute.NcclAllReduce(),
    "hierarchical_copy": lambda tf: tf.distribute.HierarchicalCopyAllReduce(),
    "reduction_to_one_device": lambda tf: tf.distribute.ReductionToOneDevice(),
}


def _build_mirrored(tf, plan, cluster):
    return tf.distribute.MirroredStrategy(
        devices=list(plan.devices), cross_device_ops=_ALL_REDUCE[plan.all_reduce](tf))


def _slurm_resolver(tf):
    kwargs = {}
    if "CUDA_VISIBLE_DEVICES" not in os.environ and shutil.which("nvidia-smi") is None:
        # the resolver counts GPUs with nvidia-smi and fails on CPU nodes without it
        kwargs["gpus_per_node"] = 0
    return tf.distribute.cluster_resolver.SlurmClusterResolver(**kwargs)


def _build_multi_worker(tf, plan, cluster):
    if plan.cluster_source == "resolver":
        resolver = cluster
    elif plan.cluster_source == "slurm":
        resolver = _slurm_resolver(tf)
    elif plan.cluster_source == "tf_config" and cluster is not None:
        # an injected TF_CONFIG: a SimpleClusterResolver holds it without touching os.environ
        config = parse_tf_config(cluster)
        task = config.get("task", {})
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(config.get("cluster", {})),
            task_type=task.get("type", "worker"), task_id=int(task.get("index", 0)),
            rpc_layer="grpc")
    else:
        resolver = None  # TensorFlow reads TF_CONFIG itself (or runs as a single worker)
    if os.environ.get(LAUNCHED_ENV) == "1":
        # the launcher stops the job when a worker exits: heartbeats late from a busy worker
        # must not end it first (cluster.LAUNCHED_ENV)
        spec = (resolver or tf.distribute.cluster_resolver.TFConfigClusterResolver()).cluster_spec()
        configure_coordination_service(spec, LAUNCHED_HEARTBEAT_S, REPLICA_TASKS)
    # Keras 3 fit/evaluate/predict fail under this strategy without it (keras-team/keras#20585)
    fix_keras_multi_worker()
    # CommunicationOptions AUTO: TensorFlow picks NCCL for GPUs and ring all-reduce for CPUs
    return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


# A process configures its collective ops once, before its first TensorFlow op: the strategy
# built first for a cluster is the one every later call for that cluster gets (so a script
# that builds it at its top, before its datasets, and tfopt.Run share it)
_MULTI_WORKER_BUILT: dict = {}


def _multi_worker_once(tf, plan, cluster):
    if plan.cluster_source == "resolver":
        key = ("resolver", id(cluster))
    elif cluster is not None:
        key = ("tf_config", json.dumps(parse_tf_config(cluster), sort_keys=True))
    else:
        key = (plan.cluster_source, os.environ.get("TF_CONFIG"))
    if key not in _MULTI_WORKER_BUILT:
        try:
            _MULTI_WORKER_BUILT[key] = _build_multi_worker(tf, plan, cluster)
        except RuntimeError as error:
            if "must be configured at program startup" not in str(error):
                raise
            raise InvalidArgumentError(
                "strategy: a multi-worker strategy must be built before the process's first "
                "TensorFlow op, and this script ran one first (a tf.data.Dataset or a tensor "
                "made before tfopt.Run): call tfopt.select_strategy() at the top of the script, "
                "before making any data; tfopt.Run then uses that strategy") from error
    return _MULTI_WORKER_BUILT[key]


def _build_tpu(tf, plan, cluster):
    if plan.cluster_source == "resolver":
        resolver = cluster
    else:
        # tpu=None reads TPU_NAME/COLAB_TPU_ADDR; "local" is a TPU VM's own chips
        tpu = None if plan.cluster_source == "environment" else "local"
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    if plan.cluster_source != "devices":
        tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


_BUILDERS = {
    StrategyKind.DEFAULT: _build_default,
    StrategyKind.ONE_DEVICE: _build_one_device,
    StrategyKind.MIRRORED: _build_mirrored,
    StrategyKind.MULTI_WORKER: _build_multi_worker,
    StrategyKind.TPU: _build_tpu,
}


def select_strategy(name: str | StrategyPlan = "auto", *, devices: Sequence | None = None,
                    cluster=None):
    """The ``tf.distribute.Strategy`` for this machine or cluster, built.

    "auto" follows the rules in this module's docstring; any other name overrides them:
    "default", "one_device" (the first GPU, else the CPU), "mirrored" (all GPUs, else all
    logical CPUs), "multi_worker" (as ``TF_CONFIG`` or Slurm say, else one worker) and "tpu".
    The reason and the replica count are :func:`plan_strategy`'s: plan first and pass the
    plan here to print why. Building a multi-worker strategy applies
    :func:`~tfopt.distribute.keras_multi_worker.fix_keras_multi_worker`.

    Args:
        name: A strategy name ("auto", "default", "one_device", "mirrored", "multi_worker",
            "tpu") or a :class:`StrategyPlan` to build as planned. Defaults to "auto".
        devices: The devices to decide from (see :func:`plan_strategy`); unused with a plan.
            Defaults to None (what TensorFlow lists).
        cluster: A ``TF_CONFIG`` dict or JSON string, or a cluster resolver; pass the same one
            as to :func:`plan_strategy` with a plan. Defaults to None (``TF_CONFIG``, then
            Slurm, from the environment).

    Returns:
        The ``tf.distribute.Strategy``: ``with select_strategy().scope():`` builds the model
        under it.

    Raises:
        InvalidArgumentError: An unknown ``name`` (the message lists the valid ones), a
            malformed ``TF_CONFIG``, or ``name="tpu"`` where no TPU is found.

    Example:
        >>> strategy = select_strategy()
        >>> with strategy.scope():
        ...     model = build_model()
        >>> dataset = dataset.batch(64 * strategy.num_replicas_in_sync)
    """
    plan = name if isinstance(name, StrategyPlan) else plan_strategy(
        name, devices=devices, cluster=cluster)
    tf = import_tensorflow()
    if plan.kind is StrategyKind.MULTI_WORKER:
        strategy = _multi_worker_once(tf, plan, cluster)
    else:
        strategy = _BUILDERS[plan.kind](tf, plan, cluster)
    logger.info("strategy %s with %d replica(s): %s", plan.name,
                int(strategy.num_replicas_in_sync), plan.reason)
    return strategy
