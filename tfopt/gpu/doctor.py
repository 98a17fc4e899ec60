"""The environment doctor: does driver, CUDA, cuDNN, TensorFlow and the hardware fit together?

:func:`run_doctor` gathers :class:`~tfopt.gpu.hardware.HardwareFacts` and runs every check, each a
pure function of the facts that returns :class:`Check` results (OK / WARN / FAIL / SKIP, with a
one-line recommendation). Tests build facts by hand to reach every branch.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tfopt.gpu.compat import (
    ArchSupport,
    arch_support,
    cuda_major_minor,
    driver_at_least,
    min_driver_for_cuda,
    parse_version,
    tensor_core_dtypes,
)
from tfopt.gpu.hardware import HardwareFacts, gather_facts
from tfopt.gpu.nvml import NvmlStatus

MIN_PYTHON = (3, 11)  # tfopt's python_requires (setup.cfg)
MIN_TENSORFLOW = (2, 16)  # the first TensorFlow that ships Keras 3
MIN_KERAS = (3, 3)
# The default CUDA JIT cache is too small for all of TensorFlow's kernels, so PTX-only GPUs
# recompile them on every start; 4 GiB is the largest cache CUDA accepts.
JIT_CACHE_HINT = "export CUDA_CACHE_MAXSIZE=4294967296 so the JIT result is cached across runs"
PIP_CUDA = "pip install 'tensorflow[and-cuda]'"


class CheckStatus(enum.Enum):
    """Outcome of one check. SKIP: the check does not apply here (e.g. no GPU)."""

    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclasses.dataclass(frozen=True)
class Check:
    """One finding of the doctor.

    Attributes:
        name: Short label, e.g. "NVIDIA driver" or "GPU 0 arch".
        status: OK, WARN, FAIL or SKIP.
        summary: What was found, one line.
        recommendation: What to do, one line; empty when nothing is needed.
    """

    name: str
    status: CheckStatus
    summary: str
    recommendation: str = ""

    def to_dict(self) -> dict[str, str]:
        """JSON-ready dict, status as its string value."""
        return {
            "name": self.name,
            "status": self.status.value,
            "summary": self.summary,
            "recommendation": self.recommendation,
        }


@dataclasses.dataclass(frozen=True)
class DoctorReport:
    """All checks and the facts they were made from.

    Attributes:
        checks: The checks, in a fixed order.
        facts: The probed facts.
    """

    checks: tuple[Check, ...]
    facts: HardwareFacts

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not any(check.status is CheckStatus.FAIL for check in self.checks)

    def counts(self) -> dict[str, int]:
        """{status value: number of checks}, every status present."""
        return {s.value: sum(c.status is s for c in self.checks) for s in CheckStatus}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ok, counts, checks and facts."""
        return {
            "ok": self.ok,
            "counts": self.counts(),
            "checks": [check.to_dict() for check in self.checks],
            "facts": self.facts.to_dict(),
        }


def _ok(name, summary, recommendation=""):
    return Check(name, CheckStatus.OK, summary, recommendation)


def _warn(name, summary, recommendation=""):
    return Check(name, CheckStatus.WARN, summary, recommendation)


def _fail(name, summary, recommendation=""):
    return Check(name, CheckStatus.FAIL, summary, recommendation)


def _skip(name, summary):
    return Check(name, CheckStatus.SKIP, summary)


def _nvml_gpu_count(facts: HardwareFacts) -> int:
    return facts.nvml.device_count if facts.nvml.ok else 0


# -- the checks: each takes the facts and returns a list of Check --------------------------------


def check_python(facts: HardwareFacts) -> list[Check]:
    """Python is new enough for tfopt."""
    version = ".".join(map(str, facts.python_version))
    if tuple(facts.python_version[:2]) < MIN_PYTHON:
        return [_fail("Python", f"Python {version} is too old",
                      f"use Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}")]
    return [_ok("Python", f"Python {version}")]


def check_tensorflow(facts: HardwareFacts) -> list[Check]:
    """TensorFlow is installed, importable and new enough; Keras is version 3."""
    tf = facts.tensorflow
    if tf is None:
        return [_skip("TensorFlow", "not probed")]
    install = PIP_CUDA if _nvml_gpu_count(facts) else "pip install tensorflow"
    checks = []
    if not tf.installed:
        checks.append(_warn("TensorFlow", "TensorFlow is not installed; GPU and CPU facts "
                            "below come from NVML and /proc/cpuinfo only", install))
    elif not tf.importable:
        checks.append(_fail("TensorFlow", f"TensorFlow is installed but does not import: "
                            f"{tf.error}", f"reinstall it: {install}"))
    elif (parse_version(tf.version) or (0,)) < MIN_TENSORFLOW:
        checks.append(_fail("TensorFlow", f"TensorFlow {tf.version} is older than "
                            f"{MIN_TENSORFLOW[0]}.{MIN_TENSORFLOW[1]} (Keras 3)",
                            "pip install -U 'tensorflow>=2.16'"))
    else:
        checks.append(_ok("TensorFlow", f"TensorFlow {tf.version}"))
    if tf.keras_version is None:
        status = _fail if tf.installed else _warn
        checks.append(status("Keras", "Keras is not installed", "pip install 'keras>=3.3'"))
    elif (parse_version(tf.keras_version) or (0,)) < MIN_KERAS:
        checks.append(_fail("Keras", f"Keras {tf.keras_version} is older than "
                            f"{MIN_KERAS[0]}.{MIN_KERAS[1]}", "pip install -U 'keras>=3.3'"))
    else:
        checks.append(_ok("Keras", f"Keras {tf.keras_version}"))
    return checks


def check_build(facts: HardwareFacts) -> list[Check]:
    """The TensorFlow build fits the GPUs: CUDA build where NVIDIA GPUs are present."""
    tf = facts.tensorflow
    if tf is None or not tf.importable:
        return [_skip("TF build", "TensorFlow not available")]
    gpus = _nvml_gpu_count(facts)
    if tf.is_cuda_build:
        archs = ", ".join(tf.compute_capabilities) or "unknown"
        return [_ok("TF build", f"CUDA {tf.cuda_version}, cuDNN {tf.cudnn_version}, "
                    f"compiled for {archs}")]
    kind = "ROCm" if tf.is_rocm_build else "CPU-only"
    if gpus:
        return [_fail("TF build", f"{kind} TensorFlow build, but NVML sees {gpus} NVIDIA GPU(s): "
                      "they go unused", f"pip uninstall tensorflow && {PIP_CUDA}")]
    return [_ok("TF build", f"{kind} TensorFlow build (no NVIDIA GPU here)")]


# NVML status -> doctor status for the driver check. A machine without a GPU is a warning (it
# trains on the CPU); a driver present but broken is a failure.
_DRIVER_STATUS = {
    NvmlStatus.OK: CheckStatus.OK,
    NvmlStatus.PYNVML_MISSING: CheckStatus.WARN,
    NvmlStatus.LIBRARY_MISSING: CheckStatus.WARN,
    NvmlStatus.DRIVER_NOT_LOADED: CheckStatus.FAIL,
    NvmlStatus.VERSION_MISMATCH: CheckStatus.FAIL,
    NvmlStatus.NO_PERMISSION: CheckStatus.FAIL,
    NvmlStatus.NO_GPUS: CheckStatus.WARN,
    NvmlStatus.ERROR: CheckStatus.FAIL,
}


def check_driver(facts: HardwareFacts) -> list[Check]:
    """The NVIDIA driver is loaded and sees GPUs; reports its version and CUDA version."""
    state = facts.nvml
    status = _DRIVER_STATUS[state.status]
    if state.ok:
        summary = (f"driver {state.driver_version}, supports CUDA up to "
                   f"{state.cuda_driver_version_str or 'N/A'}, {state.device_count} GPU(s)")
        return [Check("NVIDIA driver", status, summary)]
    return [Check("NVIDIA driver", status, state.message, state.hint)]


def _gpus_needing_jit(facts: HardwareFacts) -> list[int]:
    compiled = facts.tensorflow.compute_capabilities
    return [
        gpu.index
        for gpu in facts.gpus
        if gpu.compute_capability is not None
        and arch_support(gpu.compute_capability, compiled)[0] is ArchSupport.PTX_JIT
    ]


def check_driver_cuda(facts: HardwareFacts) -> list[Check]:
    """The driver is new enough for the CUDA version TensorFlow was built with."""
    name = "Driver vs CUDA"
    tf = facts.tensorflow
    if not facts.nvml.ok:
        return [_skip(name, "no NVIDIA driver")]
    if tf is None or not tf.is_cuda_build or not tf.cuda_version:
        return [_skip(name, "no CUDA build of TensorFlow")]
    build = cuda_major_minor(tf.cuda_version)
    driver_cuda = cuda_major_minor(facts.nvml.cuda_driver_version_str)
    driver = facts.nvml.driver_version
    floor = min_driver_for_cuda(tf.cuda_version)
    if driver_cuda is not None and driver_cuda >= build:
        return [_ok(name, f"driver {driver} supports CUDA {driver_cuda[0]}.{driver_cuda[1]} >= "
                    f"the build's CUDA {tf.cuda_version}")]
    if floor is None:
        return [_warn(name, f"no driver table entry for CUDA {tf.cuda_version}",
                      "check NVIDIA's CUDA compatibility table for the minimum driver")]
    enough = driver_at_least(driver, floor)
    if enough:
        jit = _gpus_needing_jit(facts)
        summary = (f"driver {driver} (CUDA {facts.nvml.cuda_driver_version_str}) runs the CUDA "
                   f"{tf.cuda_version} build through minor-version compatibility")
        if jit:
            return [_warn(name, f"{summary}, but GPU(s) {jit} need PTX JIT, which that mode "
                          "does not allow", f"upgrade the driver to one supporting CUDA "
                          f"{build[0]}.{build[1]}")]
        return [_ok(name, summary, f"a driver supporting CUDA {build[0]}.{build[1]} avoids "
                    "the limits of minor-version compatibility")]
    return [_fail(name, f"driver {driver} is older than {floor}, the minimum for CUDA "
                  f"{build[0]}.x (the build uses CUDA {tf.cuda_version})",
                  f"install NVIDIA driver >= {floor}, or a TensorFlow built for older CUDA")]


def check_gpu_arch(facts: HardwareFacts) -> list[Check]:
    """Each GPU's compute capability against the build's: native, PTX JIT or unsupported."""
    if not facts.gpus:
        return [_skip("GPU arch", "no NVIDIA GPU")]
    tf = facts.tensorflow
    compiled = tf.compute_capabilities if tf is not None and tf.is_cuda_build else ()
    checks = []
    for gpu in facts.gpus:
        name = f"GPU {gpu.index} arch"
        cc = gpu.compute_capability
        if cc is None:
            checks.append(_warn(name, f"{gpu.name}: compute capability unknown"))
            continue
        label = f"{gpu.name} (compute capability {cc[0]}.{cc[1]})"
        dtypes = tensor_core_dtypes(cc)
        if dtypes:
            cores = f"tensor cores for {' and '.join(dtypes)}"
            advice = ("use mixed_bfloat16 (or mixed_float16)" if "bfloat16" in dtypes
                      else "use mixed_float16")
        else:
            cores, advice = "no tensor cores", "keep float32: mixed precision will not speed up"
        if not compiled:
            checks.append(_ok(name, f"{label}, {cores}; not checked against a CUDA build",
                              advice))
            continue
        support, entry = arch_support(cc, compiled)
        if support is ArchSupport.NATIVE:
            checks.append(_ok(name, f"{label}: native code ({entry}), {cores}", advice))
        elif support is ArchSupport.PTX_JIT:
            checks.append(_warn(name, f"{label}: no native code, PTX JIT from {entry} at start "
                                f"(minutes on first run), {cores}", JIT_CACHE_HINT))
        else:
            checks.append(_fail(name, f"{label} is not in the build "
                                f"({', '.join(compiled)})", "use a GPU with a newer "
                                "architecture or a TensorFlow build compiled for this one"))
    return checks


def check_tf_sees_gpus(facts: HardwareFacts) -> list[Check]:
    """TensorFlow sees the GPUs NVML sees; if not, says why."""
    name = "TF sees GPUs"
    tf = facts.tensorflow
    nvml_count = _nvml_gpu_count(facts)
    if tf is None or not tf.importable:
        return [_skip(name, "TensorFlow not available")]
    if tf.visible_gpus is None:
        return [_fail(name, f"TensorFlow could not list GPUs: {tf.error}", PIP_CUDA)]
    cuda_visible = facts.env.get("CUDA_VISIBLE_DEVICES")
    if nvml_count == 0:
        if tf.visible_gpus:
            return [_ok(name, f"TensorFlow sees {tf.visible_gpus} GPU(s)")]
        return [_warn(name, "no GPU: TensorFlow trains on the CPU",
                      "see the CPU checks for bfloat16 and oneDNN")]
    if tf.visible_gpus >= nvml_count:
        return [_ok(name, f"TensorFlow sees all {nvml_count} GPU(s)")]
    seen = f"TensorFlow sees {tf.visible_gpus} of the {nvml_count} GPU(s) NVML sees"
    if cuda_visible is not None:
        return [_warn(name, f"{seen}; CUDA_VISIBLE_DEVICES={cuda_visible!r}",
                      "unset CUDA_VISIBLE_DEVICES to use every GPU")]
    if tf.visible_gpus > 0:
        return [_warn(name, seen, "run with TF_CPP_MIN_LOG_LEVEL=0 to see why TensorFlow "
                      "skips a GPU (often a compute capability it was not built for)")]
    if not tf.is_cuda_build:
        return [_fail(name, f"{seen}: the TensorFlow build is CPU-only", PIP_CUDA)]
    return [_fail(name, f"{seen}: CUDA/cuDNN libraries missing or not loadable",
                  f"{PIP_CUDA}; run with TF_CPP_MIN_LOG_LEVEL=0 to see which library failed")]


def check_cpu(facts: HardwareFacts) -> list[Check]:
    """CPU features for bfloat16: AMX, AVX512-BF16, AVX-512."""
    cpu = facts.cpu
    model = cpu.model or cpu.machine
    if cpu.amx_bf16:
        return [_ok("CPU", f"{model}: AMX-BF16", "mixed_bfloat16 pays off on this CPU "
                    "(oneDNN runs bfloat16 matmuls on AMX tiles)")]
    if cpu.avx512_bf16:
        return [_ok("CPU", f"{model}: AVX512-BF16", "mixed_bfloat16 pays off on this CPU "
                    "(native bfloat16 dot products)")]
    if cpu.avx512f:
        return [_ok("CPU", f"{model}: AVX-512 without BF16", "keep float32 on this CPU: "
                    "bfloat16 is emulated here")]
    return [_ok("CPU", f"{model}: no AVX-512", "keep float32 on this CPU")]


def check_onednn(facts: HardwareFacts) -> list[Check]:
    """oneDNN optimisations: on by default on x86 Linux since TF 2.9 unless switched off."""
    value = facts.env.get("TF_ENABLE_ONEDNN_OPTS")
    x86 = facts.cpu.machine.lower() in ("x86_64", "amd64", "i686")
    if value is None:
        default = "on by default on x86 Linux since TF 2.9" if x86 else "build default"
        return [_ok("oneDNN", f"TF_ENABLE_ONEDNN_OPTS unset: {default}")]
    if value.strip() in ("0", "false", "False"):
        return [_warn("oneDNN", "TF_ENABLE_ONEDNN_OPTS=0: oneDNN CPU kernels are off",
                      "unset TF_ENABLE_ONEDNN_OPTS for faster CPU ops (results may differ in the "
                      "last bits)")]
    return [_ok("oneDNN", f"TF_ENABLE_ONEDNN_OPTS={value}: oneDNN CPU kernels are on")]


def check_memory_growth(facts: HardwareFacts) -> list[Check]:
    """GPU memory growth: TensorFlow maps almost all GPU memory at start unless told otherwise."""
    name = "GPU memory growth"
    if not _nvml_gpu_count(facts):
        return [_skip(name, "no NVIDIA GPU")]
    value = facts.env.get("TF_FORCE_GPU_ALLOW_GROWTH")
    tf = facts.tensorflow
    growth_on = tf is not None and tf.memory_growth and all(tf.memory_growth)
    if value is not None and value.lower() not in ("true", "false"):
        return [_warn(name, f"TF_FORCE_GPU_ALLOW_GROWTH={value!r} is not 'true' or 'false'; "
                      "TensorFlow ignores it", "export TF_FORCE_GPU_ALLOW_GROWTH=true")]
    if (value or "").lower() == "true" or growth_on:
        return [_ok(name, "on: TensorFlow allocates GPU memory as needed",
                    "nvidia-smi memory then shows real use; keep it off for one job per GPU")]
    return [_ok(name, "off: TensorFlow maps nearly all GPU memory at start (fastest for one job "
                "per GPU)", "to share a GPU: export TF_FORCE_GPU_ALLOW_GROWTH=true")]


CHECKS: tuple[Callable[[HardwareFacts], list[Check]], ...] = (
    check_python,
    check_tensorflow,
    check_build,
    check_driver,
    check_driver_cuda,
    check_gpu_arch,
    check_tf_sees_gpus,
    check_cpu,
    check_onednn,
    check_memory_growth,
)


def run_doctor(
    facts: HardwareFacts | None = None,
    tensorflow: bool = True,
    module: ModuleType | None = None,
) -> DoctorReport:
    """Probe the machine and run every check.

    Args:
        facts: Facts to check. Defaults to None: gather them now.
        tensorflow: When gathering, probe TensorFlow too (imports it). Defaults to True.
        module: When gathering, the pynvml module. Defaults to None: import pynvml.

    Returns:
        The DoctorReport. Never raises for a missing driver, GPU or TensorFlow.

    Example:
        >>> report = run_doctor()
        >>> [c.name for c in report.checks if c.status is CheckStatus.FAIL]
        []
    """
    if facts is None:
        facts = gather_facts(tensorflow=tensorflow, module=module)
    checks = [check for probe in CHECKS for check in probe(facts)]
    return DoctorReport(checks=tuple(checks), facts=facts)
