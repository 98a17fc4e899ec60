"""GPU state through NVML and the environment doctor. Works with TensorFlow absent.

- :mod:`~tfopt.gpu.nvml`: open NVML lazily, classify why it is unavailable (:class:`NvmlStatus`).
- :mod:`~tfopt.gpu.snapshot`: one reading of one GPU (:class:`GpuSnapshot`).
- :mod:`~tfopt.gpu.sampler`: sample in a background thread, mean/max per field.
- :mod:`~tfopt.gpu.hardware`: probes of CPU features, GPUs and the TensorFlow build.
- :mod:`~tfopt.gpu.compat`: driver/CUDA/compute-capability rules.
- :mod:`~tfopt.gpu.doctor`: the checks behind ``tfopt doctor``.
- :mod:`~tfopt.gpu.table`: table, CSV and JSON-lines forms for ``tfopt monitor``.

None of these modules imports TensorFlow at import time; only
:func:`~tfopt.gpu.hardware.tensorflow_info` imports it, when called.

Example:
    >>> import tfopt.gpu
    >>> state, snapshots = tfopt.gpu.gpu_snapshots()
    >>> state.ok or state.message
"""

from tfopt.gpu.compat import ArchSupport, arch_support, min_driver_for_cuda, tensor_core_dtypes
from tfopt.gpu.doctor import Check, CheckStatus, DoctorReport, run_doctor
from tfopt.gpu.hardware import (
    CpuFeatures,
    GpuInfo,
    HardwareFacts,
    TensorFlowInfo,
    cpu_features,
    gather_facts,
    nvidia_gpus,
    tensorflow_info,
)
from tfopt.gpu.nvml import NvmlSession, NvmlState, NvmlStatus, gpu_snapshots, nvml_state
from tfopt.gpu.sampler import FieldStats, GpuSampler, GpuStats, SampleSchedule
from tfopt.gpu.snapshot import GpuProcess, GpuSnapshot, decode_clock_reasons
from tfopt.gpu.table import format_table, snapshot_record

__all__ = [
    "ArchSupport",
    "Check",
    "CheckStatus",
    "CpuFeatures",
    "DoctorReport",
    "FieldStats",
    "GpuInfo",
    "GpuProcess",
    "GpuSampler",
    "GpuSnapshot",
    "GpuStats",
    "HardwareFacts",
    "NvmlSession",
    "NvmlState",
    "NvmlStatus",
    "SampleSchedule",
    "TensorFlowInfo",
    "arch_support",
    "cpu_features",
    "decode_clock_reasons",
    "format_table",
    "gather_facts",
    "gpu_snapshots",
    "min_driver_for_cuda",
    "nvidia_gpus",
    "nvml_state",
    "run_doctor",
    "snapshot_record",
    "tensor_core_dtypes",
    "tensorflow_info",
]
