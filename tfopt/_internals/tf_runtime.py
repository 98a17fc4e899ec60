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
