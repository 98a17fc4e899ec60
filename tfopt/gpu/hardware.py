"""Hardware and software probes: CPU features, NVIDIA GPUs, the TensorFlow build.

Each probe returns a frozen dataclass of facts and never raises for a missing piece: the doctor
turns facts into checks, and ``choose_policy()`` reads the same facts to pick a precision.
TensorFlow is imported only inside :func:`tensorflow_info`, and only when it is installed.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import platform
import sys
from types import ModuleType
from typing import Any

from tfopt._tf import import_tensorflow
from tfopt.gpu.nvml import NvmlSession, NvmlState

logger = logging.getLogger("tfopt")

CPUINFO_PATH = "/proc/cpuinfo"
# Environment variables the doctor reads; recorded in the facts so a report shows them.
ENV_VARS = ("TF_ENABLE_ONEDNN_OPTS", "TF_FORCE_GPU_ALLOW_GROWTH", "CUDA_VISIBLE_DEVICES")


@dataclasses.dataclass(frozen=True)
class CpuFeatures:
    """What the CPU offers for deep learning.

    Attributes:
        model: The CPU model name from /proc/cpuinfo; None when unknown.
        machine: The architecture, e.g. "x86_64" or "aarch64".
        flags: The feature flags of the first CPU (x86 "flags", Arm "Features").
        vendor: "GenuineIntel", "AuthenticAMD", ...; None when unknown.
        family: The x86 CPU family number (AMD's 25 is Zen 3 and 4, 26 Zen 5); None when
            unknown.
        clock_mhz: The highest clock the kernel reports (cpufreq's maximum, else the "cpu MHz"
            line); None when unknown.
    """

    model: str | None
    machine: str
    flags: frozenset[str]
    vendor: str | None = None
    family: int | None = None
    clock_mhz: float | None = None

    @property
    def avx512f(self) -> bool:
        """AVX-512 Foundation: 512-bit float32 vectors."""
        return "avx512f" in self.flags

    @property
    def avx512_bf16(self) -> bool:
        """AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4): bfloat16 dot products."""
        return "avx512_bf16" in self.flags

    @property
    def amx_bf16(self) -> bool:
        """AMX with bfloat16 tiles (Sapphire Rapids and newer): matrix units on the CPU."""
        return "amx_bf16" in self.flags and "amx_tile" in self.flags

    @property
    def bf16_pays_off(self) -> bool:
        """True when mixed_bfloat16 is faster than float32 on this CPU (AMX or AVX512-BF16)."""
        return self.amx_bf16 or self.avx512_bf16

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the feature booleans; flags limited to the ones that matter."""
        keys = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
        return {
            "model": self.model,
            "machine": self.machine,
            "flags": sorted(flag for flag in self.flags if flag in keys),
            "avx512f": self.avx512f,
            "avx512_bf16": self.avx512_bf16,
            "amx_bf16": self.amx_bf16,
            "bf16_pays_off": self.bf16_pays_off,
        }


def cpu_features(cpuinfo_path: str = CPUINFO_PATH) -> CpuFeatures:
    """Read the CPU model and feature flags.

    Args:
        cpuinfo_path: File in /proc/cpuinfo format. Defaults to "/proc/cpuinfo".

    Returns:
        CpuFeatures; flags are empty where the file cannot be read (macOS, Windows).

    Example:
        >>> cpu_features().amx_bf16
        False
    """
    first: dict[str, str] = {}
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as file:
            for line in file:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key == "processor" and first:
                    break  # every core repeats the first one's lines
                first.setdefault(key, value.strip())
    except OSError as error:
        logger.debug("cannot read %s: %s", cpuinfo_path, error)
    flags = first.get("flags") or first.get("features") or ""
    return CpuFeatures(model=first.get("model name"), machine=platform.machine(),
                       flags=frozenset(flags.split()), vendor=first.get("vendor_id"),
                       family=_number(first.get("cpu family"), int),
                       clock_mhz=_max_clock_mhz() or _number(first.get("cpu mhz"), float))


CPUFREQ_MAX_PATH = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"


def _number(text: str | None, kind):
    try:
        return kind(text) if text else None
    except ValueError:
        return None


def _max_clock_mhz() -> float | None:
    """cpufreq's highest clock of the first core (kHz in the file); None in most VMs."""
    try:
        with open(CPUFREQ_MAX_PATH, encoding="ascii") as file:
            return int(file.read().strip()) / 1000
    except (OSError, ValueError):
        return None


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """The static facts of one NVIDIA GPU.

    Attributes:
        index: NVML device index.
        name: Product name; None when unknown.
        uuid: Stable id; None when unknown.
        compute_capability: (major, minor); None when unknown.
        memory_total: Bytes installed; None when unknown.
    """

    index: int
    name: str | None
    uuid: str | None
    compute_capability: tuple[int, int] | None
    memory_total: int | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; compute capability as "8.0"."""
        cc = self.compute_capability
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "memory_total_mib": None if self.memory_total is None else self.memory_total >> 20,
        }


def nvidia_gpus(module: ModuleType | None = None) -> tuple[NvmlState, list[GpuInfo]]:
    """The NVML state and each GPU's static facts.

    Args:
        module: The pynvml module. Defaults to None: import pynvml.

    Returns:
        (state, gpus); gpus is [] unless state.ok.

    Example:
        >>> state, gpus = nvidia_gpus()
        >>> [gpu.compute_capability for gpu in gpus]
    """
    with NvmlSession(module) as session:
        gpus = [
            GpuInfo(s.index, s.name, s.uuid, s.compute_capability, s.memory_total)
            for s in session.snapshots()
        ]
        return session.state, gpus


@dataclasses.dataclass(frozen=True)
class TensorFlowInfo:
    """The installed TensorFlow and Keras, and how TensorFlow was built.

    Attributes:
        installed: Whether the tensorflow package can be found.
        importable: Whether ``import tensorflow`` and reading its build info worked.
        version: tf.__version__ (the package version when it does not import); None when
            not installed.
        keras_version: The keras package version; None when not installed.
        is_cuda_build: Built with CUDA; False for CPU-only and ROCm builds.
        is_rocm_build: Built for AMD ROCm.
        cuda_version: CUDA the build uses, e.g. "12.5.1"; None for non-CUDA builds.
        cudnn_version: cuDNN the build uses, e.g. "9"; None for non-CUDA builds.
        compute_capabilities: Compiled GPU architectures, e.g. ("sm_80", "compute_90").
        visible_gpus: Number of GPUs tf.config.list_physical_devices("GPU") returns; None when
            not probed.
        memory_growth: tf.config.experimental.get_memory_growth of each visible GPU.
        error: Why TensorFlow could not be imported or probed; None when all went well.
    """

    installed: bool
    importable: bool = False
    version: str | None = None
    keras_version: str | None = None
    is_cuda_build: bool = False
    is_rocm_build: bool = False
    cuda_version: str | None = None
    cudnn_version: str | None = None
    compute_capabilities: tuple[str, ...] = ()
    visible_gpus: int | None = None
    memory_growth: tuple[bool, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of all fields."""
        data = dataclasses.asdict(self)
        data["compute_capabilities"] = list(self.compute_capabilities)
        data["memory_growth"] = list(self.memory_growth)
        return data


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def tensorflow_info(list_devices: bool = True) -> TensorFlowInfo:
    """Probe TensorFlow: version, build and the GPUs it sees. Imports TensorFlow if installed.

    Args:
        list_devices: Also ask TensorFlow which GPUs it sees (this loads the CUDA libraries).
            Defaults to True.

    Returns:
        TensorFlowInfo; ``installed=False`` when TensorFlow is absent, ``error`` set when it is
        present but broken. Never raises.

    Example:
        >>> info = tensorflow_info()
        >>> info.is_cuda_build, info.visible_gpus
    """
    keras_version = _package_version("keras")
    if importlib.util.find_spec("tensorflow") is None:
        return TensorFlowInfo(installed=False, keras_version=keras_version)
    try:
        # quiet unless debugging: TensorFlow's C++ start-up banners would bury the report
        tf = import_tensorflow(quiet=not logger.isEnabledFor(logging.DEBUG))
        build = dict(tf.sysconfig.get_build_info())
    except Exception as error:  # a broken install raises anything from ImportError to OSError
        return TensorFlowInfo(
            installed=True,
            version=_package_version("tensorflow"),
            keras_version=keras_version,
            error=f"{type(error).__name__}: {error}",
        )
    visible, growth, error_text = None, (), None
    if list_devices:
        try:
            gpus = tf.config.list_physical_devices("GPU")
            visible = len(gpus)
            growth = tuple(bool(tf.config.experimental.get_memory_growth(g)) for g in gpus)
        except Exception as error:  # CUDA init failures surface here
            error_text = f"{type(error).__name__}: {error}"
    return TensorFlowInfo(
        installed=True,
        importable=True,
        version=getattr(tf, "__version__", None),
        keras_version=keras_version,
        is_cuda_build=bool(build.get("is_cuda_build", False)),
        is_rocm_build=bool(build.get("is_rocm_build", False)),
        cuda_version=build.get("cuda_version"),
        cudnn_version=build.get("cudnn_version"),
        compute_capabilities=tuple(build.get("cuda_compute_capabilities") or ()),
        visible_gpus=visible,
        memory_growth=growth,
        error=error_text,
    )


@dataclasses.dataclass(frozen=True)
class HardwareFacts:
    """Everything the doctor and the precision chooser read about this machine.

    Attributes:
        python_version: sys.version_info[:3].
        cpu: CPU model and features.
        nvml: NVML state (driver version, CUDA version it supports, why unavailable).
        gpus: Static facts of each NVIDIA GPU.
        tensorflow: TensorFlow facts; None when not probed.
        env: The values of ENV_VARS that are set.
    """

    python_version: tuple[int, int, int]
    cpu: CpuFeatures
    nvml: NvmlState
    gpus: tuple[GpuInfo, ...]
    tensorflow: TensorFlowInfo | None
    env: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "python_version": ".".join(map(str, self.python_version)),
            "cpu": self.cpu.to_dict(),
            "nvml": self.nvml.to_dict(),
            "gpus": [gpu.to_dict() for gpu in self.gpus],
            "tensorflow": None if self.tensorflow is None else self.tensorflow.to_dict(),
            "env": dict(self.env),
        }


def gather_facts(
    tensorflow: bool = True,
    module: ModuleType | None = None,
    cpuinfo_path: str = CPUINFO_PATH,
) -> HardwareFacts:
    """Run every probe.

    Args:
        tensorflow: Probe TensorFlow too (imports it, by far the slowest probe). Defaults
            to True.
        module: The pynvml module. Defaults to None: import pynvml.
        cpuinfo_path: The cpuinfo file. Defaults to "/proc/cpuinfo".

    Returns:
        HardwareFacts. Never raises for a missing driver, GPU or TensorFlow.

    Example:
        >>> facts = gather_facts(tensorflow=False)
        >>> facts.cpu.bf16_pays_off, [g.compute_capability for g in facts.gpus]
    """
    state, gpus = nvidia_gpus(module)
    return HardwareFacts(
        python_version=tuple(sys.version_info[:3]),
        cpu=cpu_features(cpuinfo_path),
        nvml=state,
        gpus=tuple(gpus),
        tensorflow=tensorflow_info() if tensorflow else None,
        env={name: os.environ[name] for name in ENV_VARS if name in os.environ},
    )
