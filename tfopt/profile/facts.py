"""What a caught ``fit`` trains with: the model as compiled and the machine under it."""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from tfopt._internals.keras_model import all_layers
from tfopt._internals.tf_runtime import is_default_strategy
from tfopt.train.flops import device_peak, model_flops
from tfopt.train.fused_batch_norm import is_fused
from tfopt.train.precision import choose_policy
from tfopt.tune.xla import variable_axes, xla_blockers

__all__ = ["ModelFacts", "model_facts"]

TENSOR_CORE_MULTIPLE = 8  # float16 tensor cores want dimensions in multiples of 8 (NVIDIA)


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """The model as the script compiled it, and the machine.

    Attributes:
        policy: The model's precision policy (the global policy it was built under).
        machine_policy: What :func:`tfopt.choose_policy` gives this machine, and why.
        jit_compile: Whether the fit's step was compiled with XLA.
        xla_blockers: Layers that keep XLA off (``supports_jit`` False).
        variable_axes: Where the batches' shape may change (XLA would recompile).
        steps_per_execution: Steps per call of the compiled step.
        batch_size: Examples per batch (the global batch).
        batch_norm: "none", "N Keras BatchNormalization", or "fused (tfopt)".
        unaligned: Under float16, layers with a dimension not a multiple of 8 (name: size).
        flops_per_example: Training FLOPs of one example (3 forward passes), or None.
        flops_uncounted: Layers ``model_flops`` cannot count (the figure is a lower bound).
        peak: The peak MFU is against (its device), or why there is none.
        peak_flops: That peak for the policy's compute dtype, FLOPs a second, or None.
        strategy: The ``tf.distribute`` strategy's class, and its replicas.
        replicas: Replicas in sync.
        gpus: NVIDIA GPUs TensorFlow can use.
    """

    policy: str
    machine_policy: tuple[str, str]
    jit_compile: bool
    xla_blockers: list[str]
    variable_axes: list[str]
    steps_per_execution: int
    batch_size: int
    batch_norm: str
    unaligned: list[str]
    flops_per_example: int | None
    flops_uncounted: list[str]
    peak: str
    peak_flops: float | None
    strategy: str
    replicas: int
    gpus: int

    def mfu(self, examples_per_s: float) -> float | None:
        """Model FLOPs utilisation at ``examples_per_s``, or None without FLOPs or a peak."""
        if not self.flops_per_example or not self.peak_flops:
            return None
        return examples_per_s * self.flops_per_example / self.peak_flops

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data["machine_policy"] = {"policy": self.machine_policy[0],
                                  "reason": self.machine_policy[1]}
        return data


def _batch_norm(layers) -> str:
    norms = [layer for layer in layers if isinstance(layer, keras.layers.BatchNormalization)]
    if not norms:
        return "none"
    fused = sum(is_fused(layer) for layer in norms)
    if fused == len(norms):
        return f"{fused} fused (tfopt)"
    return f"{len(norms) - fused} Keras BatchNormalization" + (f", {fused} fused" if fused else "")


def _unaligned(layers, policy: str) -> list[str]:
    if policy != "mixed_float16":
        return []
    found = []
    for layer in layers:
        for attribute in ("units", "filters"):
            size = getattr(layer, attribute, None)
            if isinstance(size, int) and size % TENSOR_CORE_MULTIPLE:
                found.append(f"{layer.name}: {attribute}={size}")
    return found


def model_facts(model, element_spec, batch_size: int) -> ModelFacts:
    """Read the facts of a compiled ``model`` that has run a few steps of its fit, whose
    batches have ``element_spec``."""
    layers = all_layers(model)
    policy = str(model.dtype_policy.name)
    strategy = model.distribute_strategy
    replicas = int(strategy.num_replicas_in_sync)
    gpus = len(tf.config.list_physical_devices("GPU"))
    peak, no_peak = device_peak(1, replicas, gpus)
    try:
        counted = model_flops(model)
        flops, uncounted = counted.training, list(counted.uncounted)
    except Exception as error:  # noqa: BLE001 (a model it cannot trace has no MFU, said so)
        flops, uncounted = None, [f"not counted: {error}"]
    choice = choose_policy()
    return ModelFacts(
        policy=policy,
        machine_policy=(choice.name, choice.reason),
        jit_compile=bool(getattr(model, "jit_compile", False)),
        xla_blockers=xla_blockers(model),
        variable_axes=variable_axes(element_spec),
        steps_per_execution=int(getattr(model, "steps_per_execution", 1) or 1),
        batch_size=batch_size,
        batch_norm=_batch_norm(layers),
        unaligned=_unaligned(layers, policy),
        flops_per_example=flops,
        flops_uncounted=uncounted,
        peak=peak.device if peak is not None else no_peak,
        peak_flops=peak.for_dtype(policy) if peak is not None else None,
        strategy=("none (the default strategy)" if is_default_strategy(strategy)
                  else type(strategy).__name__),
        replicas=replicas,
        gpus=gpus,
    )
