"""A fake ``pynvml`` for tests and demos on machines without an NVIDIA GPU.

:func:`make_fake_nvml` builds a module object with pynvml's names: error classes carrying NVML
return codes, ``nvmlInit``, system and device calls. It can stand for several GPUs and for old or
new drivers and pynvml versions: ``new_api=False`` leaves out the newer call names (forcing the
fallbacks), ``driver_lacks`` keeps a name but makes it raise NVML_ERROR_FUNCTION_NOT_FOUND (a new
pynvml on an old driver), ``FakeGpu.unsupported`` makes fields raise NVML_ERROR_NOT_SUPPORTED, and
``init_error`` makes ``nvmlInit`` fail (driver not loaded, version mismatch, library missing).

Use it by passing ``module=`` or by placing it in ``sys.modules["pynvml"]``.

Example:
    >>> nvml = make_fake_nvml([FakeGpu(name="NVIDIA A100-SXM4-40GB")])
    >>> from tfopt.gpu import gpu_snapshots
    >>> gpu_snapshots(nvml)[1][0].name
    'NVIDIA A100-SXM4-40GB'
"""

from __future__ import annotations

import dataclasses
import itertools
import types
from collections.abc import Iterable
from typing import Any

from tfopt.gpu import nvml as _codes

_GIB = 1 << 30

# NVML error codes the fake can raise, with pynvml's class names.
ERROR_CLASS_NAMES = {
    _codes.ERROR_NOT_SUPPORTED: "NVMLError_NotSupported",
    _codes.ERROR_NO_PERMISSION: "NVMLError_NoPermission",
    _codes.ERROR_DRIVER_NOT_LOADED: "NVMLError_DriverNotLoaded",
    _codes.ERROR_LIBRARY_NOT_FOUND: "NVMLError_LibraryNotFound",
    _codes.ERROR_FUNCTION_NOT_FOUND: "NVMLError_FunctionNotFound",
    _codes.ERROR_GPU_IS_LOST: "NVMLError_GpuIsLost",
    _codes.ERROR_LIB_RM_VERSION_MISMATCH: "NVMLError_LibRmVersionMismatch",
    999: "NVMLError_Unknown",
}
_INSUFFICIENT_SIZE = 7


@dataclasses.dataclass
class FakeGpu:
    """The state one fake GPU reports. Mutable: tests change it between samples.

    A field given as a list or tuple (gpu_util, power_mw, ...) yields its values in turn, one
    per read, cycling. Field names in ``unsupported`` raise NVML_ERROR_NOT_SUPPORTED; the names
    are the attribute names below ("power_mw", "clock_reasons", "processes", ...).
    """

    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str | None = None
    compute_capability: tuple[int, int] = (8, 0)
    gpu_util: Any = 97
    mem_util: Any = 40
    memory_total: int = 40 * _GIB
    memory_used: Any = 30 * _GIB
    memory_reserved: int = 512 << 20  # counted as used by memory info v1 only
    power_mw: Any = 250_000
    power_limit_mw: int = 400_000
    temperature: Any = 65
    sm_clock: Any = 1410
    mem_clock: Any = 1215
    clock_reasons: Any = 0
    pstate: int = 0
    processes: list[tuple[int, int | None]] = dataclasses.field(
        default_factory=lambda: [(4242, 30 * _GIB)]
    )
    unsupported: frozenset[str] = frozenset()
    lost: bool = False  # the handle cannot be opened (NVML_ERROR_GPU_IS_LOST)
    _cycles: dict = dataclasses.field(default_factory=dict, repr=False)

    def read(self, field: str, error_class) -> Any:
        if field in self.unsupported:
            raise error_class(_codes.ERROR_NOT_SUPPORTED)
        value = getattr(self, field)
        if isinstance(value, (list, tuple)) and field not in ("processes", "compute_capability"):
            cycle = self._cycles.setdefault(field, itertools.cycle(value))
            return next(cycle)
        return value


class _Handle:
    def __init__(self, index: int):
        self.index = index


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def make_fake_nvml(
    gpus: Iterable[FakeGpu] = (),
    driver_version: str = "550.54.15",
    cuda_version: int = 12040,
    init_error: int | None = None,
    new_api: bool = True,
    driver_lacks: Iterable[str] = (),
    bytes_strings: bool = False,
) -> types.ModuleType:
    """Build a fake pynvml module.

    Args:
        gpus: The GPUs it reports. Defaults to none.
        driver_version: nvmlSystemGetDriverVersion. Defaults to "550.54.15".
        cuda_version: nvmlSystemGetCudaDriverVersion(_v2), 1000 * major + 10 * minor.
            Defaults to 12040 (CUDA 12.4).
        init_error: NVML error code nvmlInit raises (e.g. 9, driver not loaded; 18, version
            mismatch; 12, library not found). Defaults to None: init succeeds.
        new_api: Provide the newer call names (ClocksEventReasons, ComputeRunningProcesses_v3,
            PerformanceState, EnforcedPowerLimit, CudaDriverVersion_v2, memory info v2).
            False gives only the older names. Defaults to True.
        driver_lacks: Function names that exist but raise NVML_ERROR_FUNCTION_NOT_FOUND, as a
            new pynvml does on an old driver. Defaults to none.
        bytes_strings: Return names and versions as bytes, as pynvml < 11.5 did. Defaults to
            False.

    Returns:
        The module. ``module.calls`` lists the functions called, in order; ``module.gpus`` is
        the list of FakeGpu; ``module.init_count`` counts nvmlInit minus nvmlShutdown.
    """
    module = types.ModuleType("pynvml")
    module.__file__ = "<fake pynvml>"
    module.gpus = list(gpus)
    module.calls = []
    module.init_count = 0
    lacking = frozenset(driver_lacks)

    class NVMLError(Exception):
        _classes: dict[int, type] = {}

        def __new__(cls, value):
            if cls is NVMLError:
                cls = NVMLError._classes.get(value, cls)
            error = Exception.__new__(cls)
            error.value = value
            return error

        def __init__(self, value):
            super().__init__(value)
            self.value = value

        def __str__(self):
            name = ERROR_CLASS_NAMES.get(self.value, f"code {self.value}")
            return name.replace("NVMLError_", "")

    module.NVMLError = NVMLError
    for code, class_name in ERROR_CLASS_NAMES.items():
        error_class = type(class_name, (NVMLError,), {})
        NVMLError._classes[code] = error_class
        setattr(module, class_name, error_class)

    def text(value: str) -> Any:
        return value.encode() if bytes_strings else value

    def api(name: str):
        """Register a fake function under ``name``, recording calls and driver gaps."""

        def register(function):
            def wrapper(*args, **kwargs):
                module.calls.append(name)
                if name in lacking:
                    raise NVMLError(_codes.ERROR_FUNCTION_NOT_FOUND)
                return function(*args, **kwargs)

            wrapper.__name__ = name
            setattr(module, name, wrapper)
            return wrapper

        return register

    def gpu(handle: _Handle) -> FakeGpu:
        if module.init_count <= 0:
            raise NVMLError(1)  # NVML_ERROR_UNINITIALIZED
        return module.gpus[handle.index]

    def read(handle, field):
        return gpu(handle).read(field, NVMLError)

    @api("nvmlInit")
    def _init():
        if init_error is not None:
            raise NVMLError(init_error)
        module.init_count += 1

    @api("nvmlShutdown")
    def _shutdown():
        if module.init_count <= 0:
            raise NVMLError(1)
        module.init_count -= 1

    api("nvmlSystemGetDriverVersion")(lambda: text(driver_version))
    api("nvmlSystemGetNVMLVersion")(lambda: text(f"12.{driver_version}"))
    api("nvmlSystemGetCudaDriverVersion")(lambda: cuda_version)
    api("nvmlDeviceGetCount")(lambda: len(module.gpus))

    @api("nvmlDeviceGetHandleByIndex")
    def _handle(index):
        if module.init_count <= 0:
            raise NVMLError(1)
        if module.gpus[index].lost:
            raise NVMLError(_codes.ERROR_GPU_IS_LOST)
        return _Handle(index)

    @api("nvmlDeviceGetName")
    def _name(handle):
        return text(gpu(handle).name)

    @api("nvmlDeviceGetUUID")
    def _uuid(handle):
        return text(gpu(handle).uuid or f"GPU-fake-{handle.index:04d}")

    @api("nvmlDeviceGetCudaComputeCapability")
    def _cc(handle):
        return read(handle, "compute_capability")

    @api("nvmlDeviceGetUtilizationRates")
    def _util(handle):
        return _Struct(gpu=read(handle, "gpu_util"), memory=read(handle, "mem_util"))

    def memory(handle, version=None):
        if version is not None and not new_api:
            raise TypeError("nvmlDeviceGetMemoryInfo() got an unexpected keyword 'version'")
        g = gpu(handle)
        used = read(handle, "memory_used")
        if version is None:  # v1 counts the driver's reserved memory as used
            used += g.memory_reserved
        return _Struct(total=g.memory_total, used=used, free=g.memory_total - used)

    api("nvmlDeviceGetMemoryInfo")(memory)
    api("nvmlDeviceGetPowerUsage")(lambda handle: read(handle, "power_mw"))
    api("nvmlDeviceGetPowerManagementLimit")(lambda handle: read(handle, "power_limit_mw"))
    api("nvmlDeviceGetTemperature")(lambda handle, sensor: read(handle, "temperature"))

    @api("nvmlDeviceGetClockInfo")
    def _clock(handle, clock_type):
        return read(handle, {1: "sm_clock", 2: "mem_clock"}[clock_type])

    api("nvmlDeviceGetCurrentClocksThrottleReasons")(
        lambda handle: read(handle, "clock_reasons")
    )
    api("nvmlDeviceGetPowerState")(lambda handle: read(handle, "pstate"))

    def processes(handle):
        procs = read(handle, "processes")
        return [_Struct(pid=pid, usedGpuMemory=used) for pid, used in procs]

    def no_graphics(handle):
        gpu(handle)
        return []

    api("nvmlDeviceGetComputeRunningProcesses")(processes)
    api("nvmlDeviceGetGraphicsRunningProcesses")(no_graphics)
    if new_api:
        module.nvmlMemory_v2 = 0x02000028
        api("nvmlSystemGetCudaDriverVersion_v2")(lambda: cuda_version)
        api("nvmlDeviceGetEnforcedPowerLimit")(lambda handle: read(handle, "power_limit_mw"))
        api("nvmlDeviceGetCurrentClocksEventReasons")(lambda handle: read(handle, "clock_reasons"))
        api("nvmlDeviceGetPerformanceState")(lambda handle: read(handle, "pstate"))
        api("nvmlDeviceGetComputeRunningProcesses_v3")(processes)
        api("nvmlDeviceGetComputeRunningProcesses_v2")(processes)
        api("nvmlDeviceGetGraphicsRunningProcesses_v3")(no_graphics)
        api("nvmlDeviceGetGraphicsRunningProcesses_v2")(no_graphics)
    return module
