"""A fake ``pynvml`` for tests and demos on machines without an NVIDIA GPU.

:func:`make_fake_nvml` builds a module object with pynvml's names: error classes carrying NVML
return codes, ``nvmlInit``, system and device calls. It can stand for several GPUs and for old or
new drivers and pynvml versions: ``new_api=False`` leaves out the newer call names (forcing the
fallbacks), ``driver_lacks`` keeps a name but makes it raise NVML_ERROR_FUNCTION_NOT_FOUND (a new
pynvml on an old driver), ``FakeGpu.unsupported`` makes fields raise NVML_ERROR_NOT_SUPPORTED, and
``init_error`` makes ``nvmlInit`` fail (driver not loaded, version mismatch, library missing).
``FakeGpu.gpm`` gives a GPU the GPM counters of Hopper and newer (``nvmlGpmQueryDeviceSupport``,
sample buffers, ``nvmlGpmMetricsGet``), with the values each metrics read returns; without it
the GPU says it has no GPM, as an A100 does.

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

_INVALID_ARGUMENT = 2

# NVML error codes the fake can raise, with pynvml's class names.
ERROR_CLASS_NAMES = {
    _INVALID_ARGUMENT: "NVMLError_InvalidArgument",
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

# NVML's GPM metric ids (nvml.h) -> the FakeGpu.gpm key that gives its value. Written out here,
# not taken from tfopt.gpu.gpm, so that a wrong id there fails the tests.
FAKE_GPM_METRICS = {2: "sm_active", 3: "sm_occupancy", 5: "tensor_active", 10: "dram_bw_util"}
_GPM_METRICS_GET_VERSION = 1
_GPM_METRIC_SLOTS = 98  # the length of nvmlGpmMetricsGet_t.metrics in older nvml.h


@dataclasses.dataclass
class FakeGpu:
    """The state one fake GPU reports. Mutable: tests change it between samples.

    A field given as a list or tuple (gpu_util, power_mw, ...) yields its values in turn, one
    per read, cycling. Field names in ``unsupported`` raise NVML_ERROR_NOT_SUPPORTED; the names
    are the attribute names below ("power_mw", "clock_reasons", "processes", ...), and "gpm"
    makes ``nvmlGpmQueryDeviceSupport`` itself raise it.

    ``gpm`` maps the GPM counters ("sm_active", "sm_occupancy", "tensor_active",
    "dram_bw_util") to the percent each metrics read returns (a list cycles); a counter left
    out reads as NVML_ERROR_NOT_SUPPORTED. None (the default): the GPU has no GPM.
    ``gpm_sample_error`` is an NVML code ``nvmlGpmSampleGet`` raises (4: no permission).
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
    gpm: dict[str, Any] | None = None
    gpm_sample_error: int | None = None
    _cycles: dict = dataclasses.field(default_factory=dict, repr=False)

    def read(self, field: str, error_class) -> Any:
        if field in self.unsupported:
            raise error_class(_codes.ERROR_NOT_SUPPORTED)
        value = getattr(self, field)
        if isinstance(value, (list, tuple)) and field not in ("processes", "compute_capability"):
            cycle = self._cycles.setdefault(field, itertools.cycle(value))
            return next(cycle)
        return value

    def gpm_value(self, counter: str) -> float | None:
        """The next value of one GPM counter; None when this GPU does not give it."""
        if self.gpm is None or counter not in self.gpm:
            return None
        value = self.gpm[counter]
        if isinstance(value, (list, tuple)):
            return next(self._cycles.setdefault(f"gpm:{counter}", itertools.cycle(value)))
        return value


class _Handle:
    def __init__(self, index: int):
        self.index = index


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class _GpmSample:
    """An allocated GPM sample buffer: which GPU filled it, and in what order."""

    def __init__(self):
        self.gpu: int | None = None
        self.order: int | None = None
        self.freed = False


class _GpmMetricsGet:
    """nvmlGpmMetricsGet_t's fields, as nvidia-ml-py's ctypes structure has them."""

    def __init__(self):
        self.version = 0
        self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [_Struct(metricId=0, nvmlReturn=0, value=0.0)
                        for _ in range(_GPM_METRIC_SLOTS)]


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
        the list of FakeGpu; ``module.init_count`` counts nvmlInit minus nvmlShutdown;
        ``module.gpm_buffers`` counts the GPM sample buffers allocated and not yet freed.
        The GPM calls come with ``new_api`` only (an nvidia-ml-py older than GPM has none).
    """
    module = types.ModuleType("pynvml")
    module.__file__ = "<fake pynvml>"
    module.gpus = list(gpus)
    module.calls = []
    module.init_count = 0
    module.gpm_buffers = 0
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
        _add_gpm(module, api, gpu, NVMLError)
    return module


def _add_gpm(module, api, gpu, error_class) -> None:
    """The GPM calls of nvidia-ml-py (11.525 and newer), checking what real NVML checks: the
    struct's version, two samples of one GPU taken in order, buffers freed once."""
    order = itertools.count()
    module.c_nvmlGpmMetricsGet_t = _GpmMetricsGet
    module.NVML_GPM_METRICS_GET_VERSION = _GPM_METRICS_GET_VERSION

    @api("nvmlGpmQueryDeviceSupport")
    def _support(handle):
        g = gpu(handle)
        if "gpm" in g.unsupported:
            raise error_class(_codes.ERROR_NOT_SUPPORTED)
        return _Struct(version=1, isSupportedDevice=int(g.gpm is not None))

    @api("nvmlGpmSampleAlloc")
    def _alloc():
        module.gpm_buffers += 1
        return _GpmSample()

    @api("nvmlGpmSampleFree")
    def _free(sample):
        if sample.freed:
            raise error_class(_INVALID_ARGUMENT)
        sample.freed = True
        module.gpm_buffers -= 1

    @api("nvmlGpmSampleGet")
    def _sample(handle, sample):
        g = gpu(handle)
        if g.gpm is None:
            raise error_class(_codes.ERROR_NOT_SUPPORTED)
        if g.gpm_sample_error is not None:
            raise error_class(g.gpm_sample_error)
        if sample.freed:
            raise error_class(_INVALID_ARGUMENT)
        sample.gpu, sample.order = handle.index, next(order)
        return sample

    @api("nvmlGpmMetricsGet")
    def _metrics(request):
        first, second = request.sample1, request.sample2
        if (request.version != _GPM_METRICS_GET_VERSION or first is None or second is None
                or first.order is None or second.order is None or first.gpu != second.gpu
                or first.order >= second.order):
            raise error_class(_INVALID_ARGUMENT)
        g = module.gpus[first.gpu]
        for metric in request.metrics[:request.numMetrics]:
            counter = FAKE_GPM_METRICS.get(metric.metricId)
            value = None if counter is None else g.gpm_value(counter)
            if value is None:
                metric.nvmlReturn, metric.value = _codes.ERROR_NOT_SUPPORTED, 0.0
            else:
                metric.nvmlReturn, metric.value = 0, float(value)
        return request
