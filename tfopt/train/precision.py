"""The precision policy: pick it for the hardware, set it, and check a model against it.

Mixed precision pays off only where the hardware multiplies 16-bit matrices faster than float32
ones: NVIDIA tensor cores (float16 from compute capability 7.0, bfloat16 from 8.0), TPUs, and
x86 CPUs with AMX or AVX512-BF16; elsewhere the choice is float32. :func:`choose_policy` applies
these rules to the facts of ``tfopt.gpu.hardware`` (the doctor's probes), or, when asked, times
a short trial of both candidates and keeps the faster. The rules and why: ``docs/train.md``
("Precision").
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import statistics
import time
from typing import Any

from tfopt._internals.keras_model import all_layers, keras_history_layer
from tfopt._tf import import_tensorflow
from tfopt._validate import whole_number
from tfopt.errors import InvalidArgumentError
from tfopt.gpu.compat import tensor_core_dtypes
from tfopt.gpu.hardware import HardwareFacts, gather_facts

logger = logging.getLogger("tfopt")


class Policy(str, enum.Enum):
    """The global Keras dtype policies tfopt chooses between."""

    FLOAT32 = "float32"
    MIXED_FLOAT16 = "mixed_float16"
    MIXED_BFLOAT16 = "mixed_bfloat16"


POLICIES = tuple(policy.value for policy in Policy)

# The 16-bit compute dtype of each mixed policy (what a layer's compute_dtype reads).
_COMPUTE_DTYPE = {Policy.MIXED_FLOAT16: "float16", Policy.MIXED_BFLOAT16: "bfloat16"}
_HALF_DTYPES = frozenset(_COMPUTE_DTYPE.values())

# The measured trial: a small CNN on 32x32x3 inputs (CIFAR-sized), batch 64, 3 rounds of
# 6 steps per policy after 2 warm-up steps: a few seconds for two policies, most of it
# tracing the two train functions; rounds alternate so that a clock or load drift affects
# both policies alike.
TRIAL_BATCH_SIZE = 64
TRIAL_IMAGE_SIZE = 32
TRIAL_WARMUP_STEPS = 2
TRIAL_STEPS = 6
TRIAL_ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class PolicyChoice:
    """The precision policy chosen for this machine, and why.

    Attributes:
        name: "mixed_float16", "mixed_bfloat16" or "float32".
        reason: One line naming the hardware fact (or the measurement) behind the choice.
        measured: Timings of the measured mode: examples/s of each policy tried ("float32" and
            the candidate), "speedup" (candidate over float32), "batch_size", "rounds" and
            "model"; None when not measured.
    """

    name: str
    reason: str
    measured: dict[str, Any] | None = None

    def __post_init__(self):
        if self.name not in POLICIES:
            raise InvalidArgumentError(
                f"PolicyChoice.name must be one of {', '.join(POLICIES)}; got {self.name!r}"
            )

    def replace(self, **changes) -> PolicyChoice:
        """A copy with the given fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)


def _count_tpus() -> int:
    try:
        tf = import_tensorflow()
        return len(tf.config.list_logical_devices("TPU"))
    except Exception as error:  # no TensorFlow, or a broken one: then there is no TPU to use
        logger.debug("cannot list TPUs: %s", error)
        return 0


def _describe_gpu(gpu) -> str:
    cc = gpu.compute_capability
    cc_text = f"compute capability {cc[0]}.{cc[1]}" if cc else "compute capability unknown"
    return f"GPU {gpu.index} ({gpu.name or 'unknown model'}, {cc_text})"


def _gpu_rule(gpus, prefer_bfloat16: bool) -> tuple[Policy, str]:
    dtypes = [tensor_core_dtypes(gpu.compute_capability) if gpu.compute_capability else ()
              for gpu in gpus]
    count = f"all {len(gpus)} NVIDIA GPUs" if len(gpus) > 1 else _describe_gpu(gpus[0])
    lacking = [gpu for gpu, have in zip(gpus, dtypes, strict=True) if "float16" not in have]
    if lacking:
        return Policy.FLOAT32, (
            f"{_describe_gpu(lacking[0])} has no tensor cores (float16 needs compute "
            "capability 7.0+); mixed precision would be slower than float32"
        )
    if prefer_bfloat16:
        no_bf16 = [gpu for gpu, have in zip(gpus, dtypes, strict=True) if "bfloat16" not in have]
        if not no_bf16:
            return Policy.MIXED_BFLOAT16, (
                f"{count}: bfloat16 tensor cores (compute capability 8.0+), bfloat16 asked for"
            )
        return Policy.MIXED_FLOAT16, (
            f"{count}: float16 tensor cores (compute capability 7.0+); bfloat16 was asked for "
            f"but {_describe_gpu(no_bf16[0])} lacks it (needs 8.0+)"
        )
    return Policy.MIXED_FLOAT16, f"{count}: float16 tensor cores (compute capability 7.0+)"


def _cpu_rule(facts: HardwareFacts, prefix: str) -> tuple[Policy, str]:
    cpu = facts.cpu
    model = cpu.model or "the CPU"
    if facts.env.get("TF_ENABLE_ONEDNN_OPTS") == "0" and cpu.bf16_pays_off:
        # without oneDNN, TensorFlow's own CPU kernels run bfloat16 by converting to float32
        return Policy.FLOAT32, (
            f"{prefix}{model} has bfloat16 instructions but TF_ENABLE_ONEDNN_OPTS=0 turns off "
            "the oneDNN kernels that use them"
        )
    if cpu.amx_bf16:
        return Policy.MIXED_BFLOAT16, f"{prefix}{model} has AMX bfloat16 tiles (amx_bf16)"
    if cpu.avx512_bf16:
        return Policy.MIXED_BFLOAT16, (
            f"{prefix}{model} has AVX512-BF16 bfloat16 dot products (avx512_bf16)"
        )
    return Policy.FLOAT32, (
        f"{prefix}no NVIDIA GPU, no TPU, and {model} has neither AMX nor AVX512-BF16"
    )


def _rule(facts: HardwareFacts, tpus: int, prefer_bfloat16: bool) -> tuple[Policy, str]:
    """The policy the hardware rules give, with the fact behind it."""
    if tpus:
        return Policy.MIXED_BFLOAT16, f"{tpus} TPU core(s): bfloat16 is the TPU's matrix type"
    visible = None if facts.tensorflow is None else facts.tensorflow.visible_gpus
    if facts.gpus and visible != 0:
        return _gpu_rule(facts.gpus, prefer_bfloat16)
    prefix = ""
    if facts.gpus:  # NVML sees GPUs that TensorFlow does not: training runs on the CPU
        prefix = (
            f"TensorFlow sees none of the {len(facts.gpus)} NVIDIA GPU(s) (a CPU-only build or "
            "CUDA_VISIBLE_DEVICES); training runs on the CPU: "
        )
    return _cpu_rule(facts, prefix)


def choose_policy(
    prefer_bfloat16: bool = False,
    measure: bool = False,
    facts: HardwareFacts | None = None,
    tpus: int | None = None,
) -> PolicyChoice:
    """Choose the precision policy for this machine.

    Rules, first match wins: TPUs visible to TensorFlow give mixed_bfloat16; NVIDIA GPUs that
    TensorFlow can use give mixed_float16 when all have compute capability 7.0 or higher
    (mixed_bfloat16 when ``prefer_bfloat16`` and all have 8.0 or higher), float32 when one is
    older; a CPU with AMX or AVX512-BF16 gives mixed_bfloat16; anything else float32.

    With ``measure=True`` a short trial (a few training steps of a small CNN, under float32 and
    under the candidate, alternating, median of the rounds; a few seconds, most of it tracing)
    decides instead: the faster wins. The candidate is the rule's mixed policy, or, when the
    rules say float32, mixed_float16 on a GPU and mixed_bfloat16 elsewhere. TPUs are not
    measured (the trial would run on the host); the rule stands.

    Args:
        prefer_bfloat16: On GPUs of compute capability 8.0+, choose mixed_bfloat16 (no loss
            scaling needed) over mixed_float16. Defaults to False.
        measure: Time a trial of both candidates and keep the faster. Defaults to False.
        facts: The hardware facts. Defaults to None: ``gather_facts()`` (imports TensorFlow to
            see which GPUs it can use).
        tpus: Number of TPU cores. Defaults to None: ``tf.config.list_logical_devices("TPU")``
            (TPUs appear there once the TPU system is initialised).

    Returns:
        PolicyChoice with the policy name and the reason.

    Example:
        >>> choice = choose_policy()
        >>> choice.name, choice.reason
        ('mixed_bfloat16', 'AMD EPYC has AVX512-BF16 bfloat16 dot products (avx512_bf16)')
        >>> enable_policy(choice)
    """
    if facts is None:
        facts = gather_facts(tensorflow=True)
    if tpus is None:
        tpus = _count_tpus()
    policy, reason = _rule(facts, tpus, prefer_bfloat16)
    if not measure:
        logger.info("precision policy %s: %s", policy.value, reason)
        return PolicyChoice(policy.value, reason)
    if tpus:
        reason += "; not measured (the trial would run on the host, not the TPU)"
        logger.info("precision policy %s: %s", policy.value, reason)
        return PolicyChoice(policy.value, reason)
    candidate = policy
    if candidate is Policy.FLOAT32:
        visible = None if facts.tensorflow is None else facts.tensorflow.visible_gpus
        gpu = bool(facts.gpus) and visible != 0
        candidate = Policy.MIXED_FLOAT16 if gpu else Policy.MIXED_BFLOAT16
    measured = measure_policies((Policy.FLOAT32.value, candidate.value))
    fast, slow = measured[candidate.value], measured[Policy.FLOAT32.value]
    winner = candidate if fast > slow else Policy.FLOAT32
    reason = (
        f"measured {candidate.value} {fast:.0f} vs float32 {slow:.0f} examples/s "
        f"({measured['speedup']:.2f}x); the rules said {policy.value}: {reason}"
    )
    logger.info("precision policy %s: %s", winner.value, reason)
    return PolicyChoice(winner.value, reason, measured)


def _trial_model(keras):
    # small but convolution-heavy, like the models users train: the matmul/conv share of the
    # step decides whether 16-bit pays off; the last layer computes in float32 as recommended
    return keras.Sequential(
        [
            keras.Input((TRIAL_IMAGE_SIZE, TRIAL_IMAGE_SIZE, 3)),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10, dtype="float32"),
        ]
    )


def measure_policies(
    names=(Policy.FLOAT32.value, Policy.MIXED_BFLOAT16.value),
    rounds: int = TRIAL_ROUNDS,
    steps: int = TRIAL_STEPS,
    batch_size: int = TRIAL_BATCH_SIZE,
    model_fn=None,
) -> dict[str, Any]:
    """Training examples/s of a small model under each policy, in one alternating run.

    Each policy gets its own copy of the model (built under that policy, compiled with SGD,
    ``jit_compile=False`` so that the comparison is of the kernels, not of XLA) and
    ``TRIAL_WARMUP_STEPS`` untimed steps; then ``rounds`` rounds time ``steps`` steps of each
    policy in turn. The global policy is restored afterwards.

    Args:
        names: The policies to compare. Defaults to ("float32", "mixed_bfloat16").
        rounds: Timed rounds per policy; the median counts. Defaults to 3.
        steps: Training steps per round. Defaults to 6.
        batch_size: Examples per step. Defaults to 64.
        model_fn: Called with the keras module under each policy, returns an uncompiled model
            taking (batch, 32, 32, 3) images and giving 10 logits. Defaults to None: a 4-layer
            CNN.

    Returns:
        {policy name: median examples/s, ..., "speedup": last over first, "batch_size",
        "rounds", "steps", "model": "small CNN 32x32x3"}.

    Raises:
        InvalidArgumentError: An unknown policy name or a count below 1.

    Example:
        >>> measure_policies(("float32", "mixed_bfloat16"))["speedup"]
        1.7
    """
    tf = import_tensorflow()
    import keras

    names = [_policy_name(name) for name in names]
    for arg, value in (("rounds", rounds), ("steps", steps), ("batch_size", batch_size)):
        whole_number(value, arg, 1, "a positive integer")
    rng = tf.random.Generator.from_seed(0)
    x = rng.uniform((batch_size, TRIAL_IMAGE_SIZE, TRIAL_IMAGE_SIZE, 3))
    y = rng.uniform((batch_size,), maxval=10, dtype=tf.int32)
    models = {}
    for name in names:
        with enable_policy(name):
            model = (model_fn or _trial_model)(keras)
            model.compile(
                keras.optimizers.SGD(0.01),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=False,
            )
        for _ in range(TRIAL_WARMUP_STEPS):
            model.train_on_batch(x, y)
        models[name] = model
    rates: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for name in names:
            start = time.perf_counter()
            for _ in range(steps):
                loss = models[name].train_on_batch(x, y)
            float(loss)  # the result is on the host: every step has finished
            rates[name].append(steps * batch_size / (time.perf_counter() - start))
    result: dict[str, Any] = {name: statistics.median(rates[name]) for name in names}
    result["speedup"] = result[names[-1]] / result[names[0]]
    result.update(batch_size=batch_size, rounds=rounds, steps=steps,
                  model="small CNN 32x32x3" if model_fn is None else "custom")
    logger.debug("policy trial: %s", result)
    return result


def _policy_name(policy) -> str:
    if isinstance(policy, PolicyChoice):
        return policy.name
    name = getattr(policy, "name", policy)  # a keras DTypePolicy or a Policy member
    if isinstance(name, Policy):
        return name.value
    if name not in POLICIES:
        raise InvalidArgumentError(
            f"unknown precision policy {policy!r}; valid: {', '.join(POLICIES)} (or a "
            "PolicyChoice from choose_policy())"
        )
    return name


class enable_policy:  # noqa: N801  (a function to its users, a class to work as a context)
    """Set the global Keras precision policy; as a context manager, restore the old one on exit.

    Layers built while a policy is global keep it, so build (and compile) the model inside the
    ``with`` block; training may run after it.

    Args:
        policy: A policy name ("mixed_float16", "mixed_bfloat16", "float32"), a PolicyChoice,
            or a ``keras.DTypePolicy`` of one of those names.

    Attributes:
        policy: The global ``keras.DTypePolicy`` now set.
        previous: The global policy before the call, restored by ``__exit__``.

    Raises:
        InvalidArgumentError: An unknown policy name; the message lists the valid ones.

    Example:
        >>> enable_policy(choose_policy())          # for the rest of the program
        >>> with enable_policy("mixed_bfloat16"):   # only for this model
        ...     model = build_model()
    """

    def __init__(self, policy):
        import_tensorflow()
        import keras

        name = _policy_name(policy)
        self._keras = keras
        self.previous = keras.mixed_precision.global_policy()
        keras.mixed_precision.set_global_policy(name)
        self.policy = keras.mixed_precision.global_policy()
        logger.debug("global precision policy %s (was %s)", name, self.previous.name)

    def __enter__(self):
        _adapt_in_variable_dtype(self._keras, True)
        return self.policy

    def __exit__(self, *exc_info) -> bool:
        _adapt_in_variable_dtype(self._keras, False)
        self._keras.mixed_precision.set_global_policy(self.previous)
        return False


_ADAPT_FIXES = 0  # enable_policy blocks open: Normalization.adapt is wrapped while any is
_KERAS_ADAPT = None  # Keras's own, put back when the last block closes


def _adapt_in_variable_dtype(keras, entering: bool) -> None:
    """Inside ``with enable_policy(...)``: ``keras.layers.Normalization.adapt`` computes its
    statistics in the layer's variable dtype (float32).

    Keras 3 converts each batch of a dataset given to ``adapt`` to the layer's compute dtype and
    adds its mean to float32 totals, which fails under a mixed policy ("expected a float tensor
    but is a bfloat16 tensor"); arrays are reduced in float32 already. The wrapper sets the
    layer's policy to its variable dtype for the call and restores it, so that the statistics
    are float32 as Keras's own for arrays and the layer still computes under the mixed policy.
    """
    global _ADAPT_FIXES, _KERAS_ADAPT
    layer_class = keras.layers.Normalization
    if entering:
        _ADAPT_FIXES += 1
        if _ADAPT_FIXES == 1:
            _KERAS_ADAPT = layer_class.adapt
            layer_class.adapt = _float32_adapt(_KERAS_ADAPT)
        return
    _ADAPT_FIXES -= 1
    if _ADAPT_FIXES == 0:
        layer_class.adapt, _KERAS_ADAPT = _KERAS_ADAPT, None


def _float32_adapt(adapt):
    @functools.wraps(adapt)
    def wrapper(self, *args, **kwargs):
        policy = self.dtype_policy
        if policy.compute_dtype == policy.variable_dtype:
            return adapt(self, *args, **kwargs)
        self.dtype_policy = policy.variable_dtype
        try:
            return adapt(self, *args, **kwargs)
        finally:
            self.dtype_policy = policy
    return wrapper


def _all_layers(model):
    """``model`` and every layer inside it (nested models, an RNN's cell, a Bidirectional's
    directions, a wrapper's layer)."""
    return [model, *all_layers(model)]


def _output_layer(model, name: str | None):
    """The plain layer (not a nested model) called ``name`` in ``model``, or None."""
    import keras

    if name is None:
        return None
    try:
        layer = model.get_layer(name)
    except ValueError:
        return None
    return None if isinstance(layer, keras.Model) else layer


def _output_dtypes(model) -> list[tuple[str, str]]:
    """(layer name, dtype) of each model output; the last layer for subclassed models. An
    output built in half precision whose layer computes in float32 now (given float32 after the
    build, as :func:`keep_outputs_float32` does) counts as float32."""
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):  # subclassed models have no symbolic outputs
        outputs = None
    if outputs:
        found = []
        for index, tensor in enumerate(outputs):
            name = keras_history_layer(tensor)
            dtype = str(tensor.dtype)
            layer = _output_layer(model, name)
            if dtype in _HALF_DTYPES and layer is not None:
                dtype = str(layer.compute_dtype)
            found.append((name or f"output {index}", dtype))
        return found
    layers = getattr(model, "layers", None) or []
    if layers:
        return [(layers[-1].name, str(layers[-1].compute_dtype))]
    return []


def compute_in(model, policy: str) -> None:
    """Make every layer of a built ``model`` compute under ``policy`` from its next call on.

    Under a mixed policy the variables are float32 already, so a model built mixed computes in
    float32 after ``compute_in(model, "float32")`` with the same weights (and back). Output
    layers given float32 by :func:`keep_outputs_float32` stay so.
    """
    import_tensorflow()
    kept = {id(layer) for layer in _float32_outputs(model)}
    for layer in _all_layers(model):
        if id(layer) not in kept and hasattr(layer, "dtype_policy"):
            layer.dtype_policy = policy


def _float32_outputs(model) -> list:
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):
        return []
    layers = [_output_layer(model, keras_history_layer(tensor)) for tensor in outputs or []]
    return [layer for layer in layers
            if layer is not None and str(layer.compute_dtype) == "float32"]


def recurrent_layers(model) -> list[str]:
    """The names of ``model``'s recurrent layers (``keras.layers.RNN`` and its subclasses
    LSTM, GRU, ConvLSTM, and ``Bidirectional`` wrappers), nested models searched."""
    import keras

    layers = _all_layers(model)
    directions = {id(getattr(layer, side)) for layer in layers
                  if isinstance(layer, keras.layers.Bidirectional)
                  for side in ("forward_layer", "backward_layer")}
    return [layer.name for layer in layers if id(layer) not in directions
            and isinstance(layer, (keras.layers.RNN, keras.layers.Bidirectional))]


def keep_outputs_float32(model) -> list[str]:
    """Give each output layer computing in float16 or bfloat16 the float32 policy, as the mixed
    precision guide asks (softmax and logits in half precision lose precision, and the loss
    reads them); returns what changed, one line each.

    Only plain layers that produce a functional model's outputs change: a nested model's
    output, or a subclassed model's, is left to :func:`check_model_precision` to name. The
    layer keeps its weights (their variables are float32 under a mixed policy); only its
    computation runs in float32 from the next call on.
    """
    import_tensorflow()
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):
        return []
    changed = []
    for tensor in outputs or []:
        name = keras_history_layer(tensor)
        layer = _output_layer(model, name)
        if layer is None or str(layer.compute_dtype) not in _HALF_DTYPES:
            continue
        was = str(layer.compute_dtype)
        layer.dtype_policy = "float32"
        changed.append(f"output layer {name!r} computes in float32 (built in {was}): the loss "
                       "reads full-precision outputs")
    return changed


def check_model_precision(model) -> list[str]:
    """Warnings about how a Keras model uses mixed precision (each also logged).

    Checks that every output is computed in float32: softmax and logits in float16 or bfloat16
    lose precision and can overflow the loss. And when any layer computes in float16, that loss
    scaling is active: the compiled optimizer is a ``LossScaleOptimizer`` (Keras wraps it when
    a model built under ``mixed_float16`` is compiled; not when only some layers were given
    float16, nor with ``compile(auto_scale_loss=False)``) or has a ``loss_scale_factor``. An
    uncompiled model whose own policy is ``mixed_float16`` passes: compile will add it.

    Args:
        model: A Keras model, built (functional and Sequential models with an Input are).

    Returns:
        The warnings; [] when the model is fine.

    Example:
        >>> with enable_policy("mixed_float16"):
        ...     model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3)])
        >>> check_model_precision(model)
        ["output 'dense' is computed in float16: give the last layer dtype='float32' ..."]
    """
    import_tensorflow()
    import keras

    warnings = []
    for name, dtype in _output_dtypes(model):
        if dtype in _HALF_DTYPES:
            warnings.append(
                f"output {name!r} is computed in {dtype}: softmax and logits lose precision and "
                "the loss can overflow; give the last layer dtype='float32' (e.g. "
                "Dense(n, dtype='float32') or a final Activation('softmax', dtype='float32'))"
            )
    float16_layers = [layer.name for layer in _all_layers(model)
                      if getattr(layer, "compute_dtype", None) == "float16"]
    if float16_layers:
        optimizer = getattr(model, "optimizer", None)
        model_policy = getattr(getattr(model, "dtype_policy", None), "name", None)
        if optimizer is None:
            if model_policy != Policy.MIXED_FLOAT16.value:
                warnings.append(
                    f"layer {float16_layers[0]!r} computes in float16 but the model's policy is "
                    f"{model_policy}, so compile() will not add loss scaling; build the whole "
                    "model under enable_policy('mixed_float16') or compile with "
                    "keras.optimizers.LossScaleOptimizer(optimizer)"
                )
        elif isinstance(optimizer, keras.optimizers.LossScaleOptimizer) or (
            getattr(optimizer, "loss_scale_factor", None) is not None
        ):
            logger.info("loss scaling active: %s", type(optimizer).__name__)
        else:
            warnings.append(
                f"layer {float16_layers[0]!r} computes in float16 but the optimizer "
                f"{type(optimizer).__name__} has no loss scaling (the model's own policy is "
                f"{model_policy}, e.g. its layers were built under mixed_float16 but the Model "
                "outside it, or it was compiled with auto_scale_loss=False); small gradients "
                "underflow to zero in float16: compile with "
                "keras.optimizers.LossScaleOptimizer(optimizer)"
            )
    for warning in warnings:
        logger.warning("%s", warning)
    return warnings
