"""Private TensorFlow names: datasets' graphs, op and kernel registries, the default strategy,
op determinism, and the tf.data service's servers (listed in ``INTERNALS``)."""

from __future__ import annotations

from tfopt._internals import InternalsChangedError, attribute, module


def variant_tensor(dataset):
    """The dataset's variant tensor: the handle its graph is serialised from."""
    return attribute(dataset, "_variant_tensor", "tf.data.Dataset._variant_tensor")


def is_stateful_op(op: str) -> bool:
    """Whether TensorFlow registers ``op`` as stateful (False for an op it does not know, such
    as a function called by its name)."""
    registry = module("tensorflow.python.framework.op_def_registry",
                      "tensorflow.python.framework.op_def_registry.get")
    op_def = registry.get(op)
    return bool(op_def is not None and op_def.is_stateful)


def op_determinism_enabled() -> bool:
    """Whether ``tf.config.experimental.enable_op_determinism()`` is in force (TensorFlow
    exports only the setter)."""
    config = module("tensorflow.python.framework.config",
                    "tensorflow.python.framework.config.is_op_determinism_enabled")
    return bool(config.is_op_determinism_enabled())


def is_default_strategy(strategy) -> bool:
    """Whether ``strategy`` is TensorFlow's default one (what ``get_strategy()`` returns outside
    every scope): no distribution at all. Its class is private and has no public test."""
    name = "tensorflow.python.distribute.distribute_lib._DefaultDistributionStrategy"
    distribute_lib = module("tensorflow.python.distribute.distribute_lib", name)
    return isinstance(strategy, attribute(distribute_lib, "_DefaultDistributionStrategy", name))


def per_replica_specs(spec) -> list | None:
    """The per-replica specs of a distributed dataset's element spec part, or None for a part
    that is not per replica."""
    return getattr(spec, "_value_specs", None)


def registered_kernel_devices(op: str) -> list[str] | None:
    """The device types this TensorFlow build has kernels of ``op`` for (the registry
    TensorFlow's own strategy choice reads), or None where the registry cannot say."""
    name = "tensorflow.python.framework.kernels.get_registered_kernels_for_op"
    try:
        kernels = module("tensorflow.python.framework.kernels", name)
        registered = attribute(kernels, "get_registered_kernels_for_op", name)(op).kernel
    except InternalsChangedError:
        return None
    except Exception:  # an op unknown to this build
        return None
    return [kernel.device_type for kernel in registered]


def stop_service_server(server) -> None:
    """Stop a tf.data service dispatcher or worker server (the public API has no stop)."""
    stop = attribute(server, "_stop", f"tf.data.experimental.service.{type(server).__name__}._stop")
    stop()


def service_worker_address(server) -> str:
    """The ``host:port`` a tf.data service worker server listens on (it may be given port 0)."""
    return attribute(server, "_address", "tf.data.experimental.service.WorkerServer._address")


_COORDINATION = "tensorflow.python.eager.context.Context.configure_coordination_service"
_LEADER = "tensorflow.python.distribute.multi_worker_util.coordination_leader"
_JOB_MODULE = "tensorflow.compiler.xla.tsl.protobuf.coordination_config_pb2"


def configure_coordination_service(cluster_spec, heartbeat_timeout_s: float,
                                   replica_jobs: tuple[str, ...]) -> bool:
    """Configure the coordination service of a multi-worker cluster as
    ``MultiWorkerMirroredStrategy`` would (its ``replica_jobs``: chief and workers; its
    leader), with ``heartbeat_timeout_s`` instead of TensorFlow's 10 s; the strategy built
    after this keeps it. False where the service is configured already, or the cluster has
    none of those jobs. Must run before the process's first TensorFlow op. There is no
    public way to set it."""
    context = attribute(module("tensorflow.python.eager.context", _COORDINATION), "context",
                        "tensorflow.python.eager.context.context")()
    if context.coordination_service is not None:
        return False
    jobs = [job for job in replica_jobs if job in cluster_spec.jobs]
    if not jobs:
        return False
    config = module(_JOB_MODULE, f"{_JOB_MODULE}.CoordinatedJob")
    leader = attribute(module("tensorflow.python.distribute.multi_worker_util", _LEADER),
                       "coordination_leader", _LEADER)
    attribute(context, "configure_coordination_service", _COORDINATION)(
        service_type="standalone", service_leader=leader(cluster_spec),
        coordinated_jobs=[config.CoordinatedJob(name=job, num_tasks=cluster_spec.num_tasks(job))
                          for job in jobs],
        heartbeat_timeout_in_ms=int(heartbeat_timeout_s * 1000))
    return True
