"""GPU state through NVML and the environment doctor. Works with TensorFlow absent.

- :mod:`~tfopt.gpu.nvml`: open NVML lazily, classify why it is unavailable (:class:`NvmlStatus`).
- :mod:`~tfopt.gpu.snapshot`: one reading of one GPU (:class:`GpuSnapshot`).
- :mod:`~tfopt.gpu.sampler`: sample in a background thread, mean/max per field.
- :mod:`~tfopt.gpu.hardware`: probes of CPU features, GPUs and the TensorFlow build.
- :mod:`~tfopt.gpu.compat`: driver/CUDA/compute-capability rules.
- :mod:`~tfopt.gpu.doctor`: the checks behind ``tfopt doctor``.
- :mod:`~tfopt.gpu.table`: table, CSV and JSON-lines forms for ``tfopt monitor``.
- :mod:`~tfopt.gpu.gpm`: the GPU's own activity counters (GPM, Hopper and newer) between samples.
- :mod:`~tfopt.gpu.peak`: peak FLOPs per dtype of a CPU (its flags) or a GPU (its datasheet).

None of these modules imports TensorFlow at import time; only
:func:`~tfopt.gpu.hardware.tensorflow_info` imports it, when called.

Example:
    >>> import tfopt.gpu
    >>> state, snapshots = tfopt.gpu.gpu_snapshots()
    >>> state.ok or state.message
"""

import importlib

# Each name is imported from its module on first use (PEP 562): `import tfopt.gpu.table`, as the
# CLI does for every command, must not pay for the hardware probes' imports (every command's
# start-up would).
_EXPORTS = {
    "ArchSupport": "tfopt.gpu.compat",
    "Check": "tfopt.gpu.doctor",
    "CheckStatus": "tfopt.gpu.doctor",
    "CpuFeatures": "tfopt.gpu.hardware",
    "DoctorReport": "tfopt.gpu.doctor",
    "FieldStats": "tfopt.gpu.sampler",
    "GpmReader": "tfopt.gpu.gpm",
    "GpmReading": "tfopt.gpu.gpm",
    "GpuInfo": "tfopt.gpu.hardware",
    "GpuProcess": "tfopt.gpu.snapshot",
    "GpuSampler": "tfopt.gpu.sampler",
    "GpuSnapshot": "tfopt.gpu.snapshot",
    "GpuStats": "tfopt.gpu.sampler",
    "HardwareFacts": "tfopt.gpu.hardware",
    "NvmlSession": "tfopt.gpu.nvml",
    "NvmlState": "tfopt.gpu.nvml",
    "NvmlStatus": "tfopt.gpu.nvml",
    "PeakFlops": "tfopt.gpu.peak",
    "SampleSchedule": "tfopt.gpu.sampler",
    "TensorFlowInfo": "tfopt.gpu.hardware",
    "arch_support": "tfopt.gpu.compat",
    "cpu_features": "tfopt.gpu.hardware",
    "cpu_peak": "tfopt.gpu.peak",
    "decode_clock_reasons": "tfopt.gpu.snapshot",
    "format_table": "tfopt.gpu.table",
    "gather_facts": "tfopt.gpu.hardware",
    "gpu_peak": "tfopt.gpu.peak",
    "gpu_snapshots": "tfopt.gpu.nvml",
    "min_driver_for_cuda": "tfopt.gpu.compat",
    "nvidia_gpus": "tfopt.gpu.hardware",
    "nvml_state": "tfopt.gpu.nvml",
    "run_doctor": "tfopt.gpu.doctor",
    "snapshot_record": "tfopt.gpu.table",
    "tensor_core_dtypes": "tfopt.gpu.compat",
    "tensorflow_info": "tfopt.gpu.hardware",
}

# every module that exports a name above ("compat", "doctor", ...)
_SUBMODULES = frozenset(module.rsplit(".", 1)[1] for module in _EXPORTS.values())


def __getattr__(name: str):
    if name in _SUBMODULES:  # tfopt.gpu.hardware after a bare `import tfopt.gpu`, as before
        return importlib.import_module(f"{__name__}.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tfopt.gpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next look-up finds it directly
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
