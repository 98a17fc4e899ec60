"""The GPU's own activity counters, read through NVML's GPM interface (Hopper and newer).

NVML's GPU-Util is the share of time one or more kernels ran: one small kernel on one SM reads
as fully busy. GPM (GPU Performance Monitoring) counts what the SMs did instead: the share of
SMs busy, the warps resident against the most the SMs hold, the share of cycles in tensor-core
instructions, and DRAM bandwidth against its peak. Each is a percentage over the interval
between two GPM samples, so :class:`GpmReader` keeps the last sample of each GPU and reads the
counters since then; the sampler's and the monitor's loops make the interval. Where GPM cannot
be read (a GPU before Hopper, a driver or nvidia-ml-py without it, a call that fails) a reading
says why and carries no value, never a zero.

GPM is NVML's own, so it needs no DCGM host engine; whether it needs root on a given machine is
what ``scripts/gpu_evidence.sh`` records.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from tfopt.gpu.nvml import ERROR_FUNCTION_NOT_FOUND, ERROR_NOT_SUPPORTED, NvmlSession, error_code
from tfopt.gpu.snapshot import GpuSnapshot

logger = logging.getLogger("tfopt")

# GpuSnapshot field -> NVML's GPM metric id (nvml.h, NVML_GPM_METRIC_*), written out as the
# clock-reason bits are: the ids are part of NVML's ABI.
GPM_METRICS: dict[str, int] = {
    "sm_active": 2,  # NVML_GPM_METRIC_SM_UTIL: share of SMs with work
    "sm_occupancy": 3,  # NVML_GPM_METRIC_SM_OCCUPANCY: warps resident / the most SMs hold
    "tensor_active": 5,  # NVML_GPM_METRIC_ANY_TENSOR_UTIL: share of SM cycles in tensor ops
    "dram_bw_util": 10,  # NVML_GPM_METRIC_DRAM_BW_UTIL: DRAM bandwidth / its peak
}
# NVML's GPM documentation: two samples should be more than 100 ms apart (the counters refresh
# at that rate); a shorter interval can read as zero, a false zero.
GPM_MIN_INTERVAL_S = 0.1
NVML_SUCCESS = 0
NO_GPM_GPU = "the GPU has no GPM counters (Hopper and newer GPUs have them)"


@dataclasses.dataclass(frozen=True)
class GpmReading:
    """One GPU's GPM counters over one interval, in percent; None where not read.

    Attributes:
        supported: The GPU, its driver and nvidia-ml-py offer GPM.
        reason: Why some or all counters are None, in words; None when all four were read.
        sm_active: Share of SMs that had work (NVML's SM_UTIL).
        sm_occupancy: Warps resident against the most the SMs can hold.
        tensor_active: Share of SM cycles spent in tensor-core instructions of any type.
        dram_bw_util: DRAM bandwidth used against its peak.
    """

    supported: bool
    reason: str | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_bw_util: float | None = None

    def snapshot_fields(self) -> dict[str, Any]:
        """The :class:`~tfopt.gpu.snapshot.GpuSnapshot` fields this reading fills."""
        values = {name: getattr(self, name) for name in GPM_METRICS}
        return {**values, "gpm_supported": self.supported, "gpm_reason": self.reason}


@dataclasses.dataclass
class _Device:
    """What the reader keeps of one GPU: its verdict, its two sample buffers, the turn."""

    handle: Any = None
    unsupported: GpmReading | None = None  # cached: support does not change while NVML is open
    buffers: list = dataclasses.field(default_factory=list)
    turn: int = 0  # the buffer the next sample goes into; the other holds the last one
    has_last: bool = False
    last_at: float = 0.0


class GpmReader:
    """Reads each GPU's GPM counters over the interval since the previous read.

    The first read of a GPU takes its first sample and has no values (reason says so); each
    later read gives the counters since the previous sample. A read sooner than
    :data:`GPM_MIN_INTERVAL_S` after the last sample gives no values and keeps that sample, so
    the next read spans the whole interval. Thread-safe. Never raises for a GPU or driver
    without GPM: the reading's ``reason`` says why. Close it before its session.

    Args:
        session: An open :class:`~tfopt.gpu.nvml.NvmlSession`.
        clock: Monotonic clock in seconds. Defaults to time.monotonic.

    Example:
        >>> with NvmlSession() as session:
        ...     gpm = GpmReader(session)
        ...     gpm.prime()
        ...     time.sleep(1.0)
        ...     snapshots = gpm.annotate(session.snapshots())
        ...     gpm.close()
    """

    def __init__(self, session: NvmlSession, clock: Callable[[], float] = time.monotonic):
        self._session = session
        self._clock = clock
        self._devices: dict[int, _Device] = {}
        self._lock = threading.Lock()

    def read(self, index: int) -> GpmReading:
        """The counters of GPU ``index`` since its previous read."""
        with self._lock:
            device = self._devices.get(index)
            if device is None:
                device = self._devices[index] = self._open(index)
            if device.unsupported is not None:
                return device.unsupported
            return self._sample(device)

    def prime(self) -> bool:
        """Take the first sample of every GPU; True when any of them supports GPM (a caller
        then waits one interval, so that its first reading has values)."""
        if not self._session.state.ok:
            return False
        readings = [self.read(index) for index in range(self._session.state.device_count)]
        return any(reading.supported for reading in readings)

    def annotate(self, snapshots: Iterable[GpuSnapshot]) -> list[GpuSnapshot]:
        """``snapshots`` with each GPU's counters since its previous read filled in."""
        return [snapshot if snapshot.error else dataclasses.replace(
                    snapshot, **self.read(snapshot.index).snapshot_fields())
                for snapshot in snapshots]

    def close(self) -> None:
        """Free the sample buffers. Safe to call twice; call it before the session's close."""
        with self._lock:
            for device in self._devices.values():
                for buffer in device.buffers:
                    self._session.call("nvmlGpmSampleFree", buffer)
            self._devices.clear()

    # -- one GPU -------------------------------------------------------------------------------

    def _open(self, index: int) -> _Device:
        """Ask once whether GPU ``index`` has GPM, and allocate its two sample buffers."""
        nvml = self._session.module
        handle = self._session.handle(index)
        if handle is None:
            return _Device(unsupported=GpmReading(False, "the device cannot be opened"))
        names = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet",
                 "nvmlGpmMetricsGet", "c_nvmlGpmMetricsGet_t")
        if nvml is None or not all(hasattr(nvml, name) for name in names):
            return _Device(unsupported=GpmReading(
                False, "this nvidia-ml-py has no GPM calls (pip install -U nvidia-ml-py)"))
        support, failure = self._attempt("nvmlGpmQueryDeviceSupport", handle)
        if failure is None and not getattr(support, "isSupportedDevice", 0):
            failure = NO_GPM_GPU
        if failure is not None:
            return _Device(unsupported=GpmReading(False, failure))
        device = _Device(handle=handle)
        for _ in range(2):
            buffer, failure = self._attempt("nvmlGpmSampleAlloc")
            if failure is not None:
                for allocated in device.buffers:
                    self._session.call("nvmlGpmSampleFree", allocated)
                return _Device(unsupported=GpmReading(False, failure))
            device.buffers.append(buffer)
        return device

    def _attempt(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """Call the NVML function ``name``: (its result, None), or (None, why it failed)."""
        nvml = self._session.module
        try:
            return getattr(nvml, name)(*args), None
        except nvml.NVMLError as error:
            code = error_code(error)
            logger.debug("%s: %s (code %s)", name, error, code)
            if code == ERROR_FUNCTION_NOT_FOUND:
                return None, "the NVIDIA driver has no GPM calls (R525 and newer have them)"
            if code == ERROR_NOT_SUPPORTED and name == "nvmlGpmQueryDeviceSupport":
                return None, NO_GPM_GPU
            return None, f"{name} failed ({error})"
        except Exception as error:  # nvidia-ml-py's ctypes structures change between releases:
            # a mismatch must cost the counters, never the monitor or the training it watches
            logger.debug("%s: %r", name, error)
            return None, f"{name} failed ({type(error).__name__}: {error})"

    def _sample(self, device: _Device) -> GpmReading:
        now = self._clock()
        if device.has_last and now - device.last_at < GPM_MIN_INTERVAL_S:
            return GpmReading(True, f"less than {GPM_MIN_INTERVAL_S:g} s since the last GPM "
                                    "sample (NVML's GPM counters refresh no faster)")
        current = device.buffers[device.turn]
        _, failure = self._attempt("nvmlGpmSampleGet", device.handle, current)
        if failure is not None:
            device.has_last = False  # the buffer may hold half a sample: start again
            return GpmReading(True, failure)
        previous = device.buffers[1 - device.turn] if device.has_last else None
        device.turn, device.has_last, device.last_at = 1 - device.turn, True, now
        if previous is None:
            return GpmReading(True, "the first GPM sample: the counters need a second one")
        return self._metrics(previous, current)

    def _metrics(self, first: Any, second: Any) -> GpmReading:
        """The counters between two samples of one GPU (``first`` taken before ``second``)."""
        nvml = self._session.module
        try:
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
            request.numMetrics = len(GPM_METRICS)
            request.sample1, request.sample2 = first, second
            for slot, metric in enumerate(GPM_METRICS.values()):
                request.metrics[slot].metricId = metric
        except Exception as error:  # a structure this code does not know (see _attempt)
            return GpmReading(True, f"c_nvmlGpmMetricsGet_t: {type(error).__name__}: {error}")
        _, failure = self._attempt("nvmlGpmMetricsGet", request)
        if failure is not None:
            return GpmReading(True, failure)
        values, missing = {}, []
        for slot, name in enumerate(GPM_METRICS):
            metric = request.metrics[slot]
            if metric.nvmlReturn == NVML_SUCCESS and math.isfinite(metric.value):
                values[name] = float(metric.value)
            else:
                missing.append(f"{name} (NVML error {metric.nvmlReturn})")
        reason = f"not read: {', '.join(missing)}" if missing else None
        return GpmReading(True, reason, **values)
