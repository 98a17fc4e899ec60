"""One reading of one GPU: what ``nvidia-smi`` shows, as a dataclass.

Fields a GPU or driver does not support are None (shown as "N/A"). Clock-event reasons (called
"throttle reasons" before CUDA 12.2) are decoded from NVML's bit mask into words. The GPM
counters (SM activity and occupancy, tensor-core activity, DRAM bandwidth) span the interval
since the previous reading, so :func:`read_snapshot` leaves them None and a
:class:`~tfopt.gpu.gpm.GpmReader` that keeps the previous sample fills them in.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

# Clock-event reason bits (nvml.h, nvmlClocksEventReason*; the same bits as the older
# nvmlClocksThrottleReason*). Written out so decoding works with any pynvml version.
CLOCK_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal",
    0x040: "hw_thermal",
    0x080: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",
    0x400: "reliability",
}

# The reasons that mean "the GPU runs slower than it could because of power or heat". Idle,
# application clocks, sync boost and display clocks are normal states, not throttling.
THROTTLE_REASONS = frozenset(
    {
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal",
        "hw_thermal",
        "hw_power_brake",
        "board_limit",
        "reliability",
    }
)

# The GPM counters a GpuSnapshot carries (percent over the interval since the previous GPM
# sample; tfopt.gpu.gpm reads them).
GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_bw_util")

NVML_TEMPERATURE_GPU = 0  # sensor id of the GPU die
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_PSTATE_UNKNOWN = 32
# NVML_VALUE_NOT_AVAILABLE for unsigned long long: a process's memory under Windows WDDM.
_NOT_AVAILABLE_ULL = (1 << 64) - 1


def decode_clock_reasons(mask: int | None) -> tuple[str, ...] | None:
    """Turn an NVML clock-event reason bit mask into words, lowest bit first.

    Args:
        mask: The mask from nvmlDeviceGetCurrentClocksEventReasons; None when unsupported.

    Returns:
        The reason names ("unknown_0x..." for bits this table lacks), () for none, or None.

    Example:
        >>> decode_clock_reasons(0x4 | 0x40)
        ('sw_power_cap', 'hw_thermal')
    """
    if mask is None:
        return None
    words = [name for bit, name in CLOCK_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCK_REASONS)
    if unknown:
        words.append(f"unknown_{unknown:#x}")
    return tuple(words)


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    """A process using a GPU.

    Attributes:
        pid: Process id (in the host's PID namespace; inside a container it may not match).
        used_memory: GPU memory it holds, bytes; None when the driver cannot tell (Windows WDDM).
    """

    pid: int
    used_memory: int | None


@dataclasses.dataclass(frozen=True)
class GpuSnapshot:
    """One reading of one GPU. None means the GPU or driver does not report the field.

    Attributes:
        index: NVML device index.
        timestamp: Unix time of the reading, seconds.
        name: Product name, e.g. "NVIDIA H100 80GB HBM3".
        uuid: Stable id, e.g. "GPU-5f2c...".
        gpu_util: Percent of the last sample period in which one or more kernels ran (NVML's
            GPU-Util, nvidia-smi's): one small kernel reads 100; how many SMs worked is
            ``sm_active``.
        mem_util: Percent of the period in which device memory was read or written.
        memory_used: Bytes in use.
        memory_total: Bytes installed.
        power_w: Power draw, watts.
        power_limit_w: Enforced power limit, watts.
        temperature_c: GPU die temperature, degrees Celsius.
        sm_clock_mhz: Current SM clock, MHz.
        mem_clock_mhz: Current memory clock, MHz.
        clock_reasons: Why clocks are below maximum, as words (see CLOCK_REASONS).
        pstate: Performance state, 0 (P0, maximum) to 15 (minimum).
        processes: Processes using the GPU (compute and graphics).
        compute_capability: (major, minor), e.g. (8, 0) for A100.
        error: Why the GPU could not be read at all (e.g. "GPU is lost"); None normally.
        sm_active: Percent of SMs that had work, over the interval since the previous GPM
            sample (GPM: Hopper and newer).
        sm_occupancy: Percent of the warps the SMs can hold that were resident (GPM).
        tensor_active: Percent of SM cycles in tensor-core instructions (GPM).
        dram_bw_util: Percent of the DRAM bandwidth's peak used (GPM).
        gpm_supported: Whether the GPU, driver and nvidia-ml-py offer GPM; None when GPM was
            not read (a single reading, such as :func:`~tfopt.gpu.nvml.gpu_snapshots`').
        gpm_reason: Why the four GPM fields are None (all or some); None when read.
    """

    index: int
    timestamp: float
    name: str | None = None
    uuid: str | None = None
    gpu_util: int | None = None
    mem_util: int | None = None
    memory_used: int | None = None
    memory_total: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    clock_reasons: tuple[str, ...] | None = None
    pstate: int | None = None
    processes: tuple[GpuProcess, ...] | None = None
    compute_capability: tuple[int, int] | None = None
    error: str | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_bw_util: float | None = None
    gpm_supported: bool | None = None
    gpm_reason: str | None = None

    @property
    def throttle_reasons(self) -> tuple[str, ...]:
        """The clock-event reasons that are power or thermal throttling."""
        return tuple(r for r in self.clock_reasons or () if r in THROTTLE_REASONS)

    @property
    def throttled(self) -> bool:
        """True when power or heat holds the clocks down."""
        return bool(self.throttle_reasons)

    def is_low_util(self, threshold: float = 50.0) -> bool:
        """True when GPU utilisation is known and below ``threshold`` percent.

        Args:
            threshold: Percent. Defaults to 50.0.
        """
        return self.gpu_util is not None and self.gpu_util < threshold


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else round(milliwatts / 1000.0, 1)


def _memory(session, handle) -> Any:
    # Memory info v2 (driver 510+) reports "used" without the driver's reserved memory, as
    # nvidia-smi does; v1 counts the reservation as used. Try v2, fall back to v1.
    nvml = session.module
    version = getattr(nvml, "nvmlMemory_v2", None)
    info = None
    if version is not None:
        info = session.call("nvmlDeviceGetMemoryInfo", handle, version=version)
    if info is None:
        info = session.call("nvmlDeviceGetMemoryInfo", handle)
    return info


def _processes(session, handle) -> tuple[GpuProcess, ...] | None:
    compute = session.call(
        (
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetComputeRunningProcesses",
        ),
        handle,
    )
    graphics = session.call(
        (
            "nvmlDeviceGetGraphicsRunningProcesses_v3",
            "nvmlDeviceGetGraphicsRunningProcesses_v2",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ),
        handle,
    )
    if compute is None:  # without the compute list the answer would look complete but is not
        return None
    seen: dict[int, GpuProcess] = {}
    for proc in [*(compute or ()), *(graphics or ())]:
        used = getattr(proc, "usedGpuMemory", None)
        if used == _NOT_AVAILABLE_ULL:
            used = None
        if proc.pid not in seen:  # a process with both contexts counts once
            seen[proc.pid] = GpuProcess(pid=int(proc.pid), used_memory=used)
    return tuple(seen.values())


def read_snapshot(session, index: int) -> GpuSnapshot:
    """Read GPU ``index`` through an open NvmlSession.

    Each field is read on its own: an unsupported field is None and the rest are still read.

    Args:
        session: An NvmlSession whose state is OK.
        index: The GPU index.

    Returns:
        The GpuSnapshot; if the device handle cannot be had, one with only ``error`` set.
    """
    now = time.time()
    handle = session.handle(index)
    if handle is None:
        return GpuSnapshot(index=index, timestamp=now, error="cannot open the device (lost?)")
    call = session.call
    util = call("nvmlDeviceGetUtilizationRates", handle)
    memory = _memory(session, handle)
    pstate = call(("nvmlDeviceGetPerformanceState", "nvmlDeviceGetPowerState"), handle)
    capability = call("nvmlDeviceGetCudaComputeCapability", handle)
    return GpuSnapshot(
        index=index,
        timestamp=now,
        name=_text(call("nvmlDeviceGetName", handle)),
        uuid=_text(call("nvmlDeviceGetUUID", handle)),
        gpu_util=None if util is None else int(util.gpu),
        mem_util=None if util is None else int(util.memory),
        memory_used=None if memory is None else int(memory.used),
        memory_total=None if memory is None else int(memory.total),
        power_w=_watts(call("nvmlDeviceGetPowerUsage", handle)),
        power_limit_w=_watts(
            call(("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetPowerManagementLimit"), handle)
        ),
        temperature_c=call("nvmlDeviceGetTemperature", handle, NVML_TEMPERATURE_GPU),
        sm_clock_mhz=call("nvmlDeviceGetClockInfo", handle, NVML_CLOCK_SM),
        mem_clock_mhz=call("nvmlDeviceGetClockInfo", handle, NVML_CLOCK_MEM),
        clock_reasons=decode_clock_reasons(
            call(
                (
                    "nvmlDeviceGetCurrentClocksEventReasons",
                    "nvmlDeviceGetCurrentClocksThrottleReasons",
                ),
                handle,
            )
        ),
        pstate=None if pstate in (None, NVML_PSTATE_UNKNOWN) else int(pstate),
        processes=_processes(session, handle),
        compute_capability=None if capability is None else (int(capability[0]), int(capability[1])),
    )
