"""Text and record forms of GPU snapshots for ``tfopt monitor``: a table, CSV rows, JSON lines.

Unsupported fields print as "N/A" in the table, are empty in CSV and null in JSON. The GPM
counters of a GPU without GPM print as "n/s" (not supported), and their record says why
(``"gpm": {"supported": false, "reason": ...}``): an absent counter is never shown as 0.
"""

from __future__ import annotations

import datetime
from typing import Any

from tfopt.gpu.snapshot import GPM_FIELDS, GpuSnapshot

NA = "N/A"
NOT_SUPPORTED = "n/s"
DEFAULT_LOW_UTIL = 50.0  # percent; below it the input pipeline is the usual suspect

# The columns of --csv, in order; --jsonl writes the same keys (clock_reasons as a list).
CSV_FIELDS = (
    "timestamp",
    "index",
    "name",
    "uuid",
    "gpu_util",
    "mem_util",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_bw_util",
    "gpm",
    "memory_used_mib",
    "memory_total_mib",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "pstate",
    "clock_reasons",
    "throttled",
    "low_util",
    "processes",
    "process_memory_mib",
)

# "Kernel" is NVML's GPU-Util: the share of time one or more kernels ran, whatever the number
# of SMs they used; "SMAct" (GPM) is the share of SMs with work, the figure "Util" is often
# taken for. The help of `tfopt monitor` and docs/gpu.md say the same.
_HEADER = (
    f"{'GPU':>3}  {'Name':<24} {'Kernel':>6} {'MemU':>5} {'SMAct':>5} {'SMOcc':>5} "
    f"{'Tensor':>6} {'DRAM':>5} {'Memory MiB':>15} {'Power W':>11} {'Temp':>5} {'SM MHz':>6} "
    f"{'Mem MHz':>7} {'Pst':>3} {'Proc':>4}  Flags"
)


def _na(value: Any, suffix: str = "") -> str:
    return NA if value is None else f"{value}{suffix}"


def _pair(used: Any, total: Any) -> str:
    if used is None and total is None:
        return NA
    return f"{_na(used)} / {_na(total)}"


def _gpm_cell(snapshot: GpuSnapshot, value: float | None) -> str:
    """A GPM counter's cell: the percent, "n/s" where the GPU has no GPM, else "N/A"."""
    if value is not None:
        return f"{value:.0f}%"
    return NOT_SUPPORTED if snapshot.gpm_supported is False else NA


def marks(snapshot: GpuSnapshot, low_util: float = DEFAULT_LOW_UTIL) -> list[str]:
    """The warning marks of one GPU: "THROTTLE(reasons)" and "LOW-UTIL(n%)".

    Args:
        snapshot: The GPU reading.
        low_util: Utilisation below this percent is marked. Defaults to 50.0.

    Example:
        >>> marks(GpuSnapshot(index=0, timestamp=0.0, gpu_util=12))
        ['LOW-UTIL(12%)']
    """
    found = []
    if snapshot.error:
        found.append(f"ERROR({snapshot.error})")
    if snapshot.throttled:
        found.append(f"THROTTLE({','.join(snapshot.throttle_reasons)})")
    if snapshot.is_low_util(low_util):
        found.append(f"LOW-UTIL({snapshot.gpu_util}%)")
    return found


def format_row(snapshot: GpuSnapshot, low_util: float = DEFAULT_LOW_UTIL) -> str:
    """One table line for one GPU; see format_table."""
    s = snapshot
    record = snapshot_record(s, low_util)
    name = (s.name or NA)[:24]
    pstate = record["pstate"] or NA
    procs = NA if s.processes is None else str(len(s.processes))
    power = _pair(None if s.power_w is None else round(s.power_w),
                  None if s.power_limit_w is None else round(s.power_limit_w))
    return (
        f"{s.index:>3}  {name:<24} {_na(s.gpu_util, '%'):>6} {_na(s.mem_util, '%'):>5} "
        f"{_gpm_cell(s, s.sm_active):>5} {_gpm_cell(s, s.sm_occupancy):>5} "
        f"{_gpm_cell(s, s.tensor_active):>6} {_gpm_cell(s, s.dram_bw_util):>5} "
        f"{_pair(record['memory_used_mib'], record['memory_total_mib']):>15} {power:>11} "
        f"{_na(s.temperature_c, 'C'):>5} {_na(s.sm_clock_mhz):>6} {_na(s.mem_clock_mhz):>7} "
        f"{pstate:>3} {procs:>4}  {' '.join(marks(s, low_util))}"
    ).rstrip()


def format_table(
    snapshots: list[GpuSnapshot],
    low_util: float = DEFAULT_LOW_UTIL,
    title: str = "",
) -> str:
    """The monitor table: a title line, a header and one line per GPU.

    Args:
        snapshots: One reading of each GPU.
        low_util: Utilisation below this percent is marked LOW-UTIL. Defaults to 50.0.
        title: Text after the time on the first line (e.g. the driver version). Defaults to "".

    Returns:
        The table, lines joined by newlines, no trailing newline.
    """
    when = snapshots[0].timestamp if snapshots else None
    stamp = (datetime.datetime.fromtimestamp(when).strftime("%Y-%m-%d %H:%M:%S")
             if when is not None else "")
    lines = [f"{stamp}  {title}".strip(), _HEADER]
    lines += [format_row(s, low_util) for s in snapshots]
    return "\n".join(lines)


def _iso(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).isoformat(
        timespec="milliseconds"
    )


def snapshot_record(snapshot: GpuSnapshot, low_util: float = DEFAULT_LOW_UTIL) -> dict[str, Any]:
    """A record with the CSV_FIELDS keys; None for unsupported fields.

    timestamp is ISO 8601 in UTC with milliseconds; memory in MiB; clock_reasons a list; the
    GPM counters in percent, and ``gpm`` is ``{"supported": bool or None, "reason": why the
    counters are null, or None}`` (supported None: GPM was not read).

    Args:
        snapshot: The GPU reading.
        low_util: Utilisation below this percent sets low_util. Defaults to 50.0.
    """
    s = snapshot
    procs = s.processes
    proc_mem = None
    if procs is not None:
        known = [p.used_memory for p in procs if p.used_memory is not None]
        proc_mem = sum(known) >> 20 if known else (0 if not procs else None)
    return {
        "timestamp": _iso(s.timestamp),
        "index": s.index,
        "name": s.name,
        "uuid": s.uuid,
        "gpu_util": s.gpu_util,
        "mem_util": s.mem_util,
        **{name: None if getattr(s, name) is None else round(getattr(s, name), 1)
           for name in GPM_FIELDS},
        "gpm": {"supported": s.gpm_supported, "reason": s.gpm_reason},
        "memory_used_mib": None if s.memory_used is None else s.memory_used >> 20,
        "memory_total_mib": None if s.memory_total is None else s.memory_total >> 20,
        "power_w": s.power_w,
        "power_limit_w": s.power_limit_w,
        "temperature_c": s.temperature_c,
        "sm_clock_mhz": s.sm_clock_mhz,
        "mem_clock_mhz": s.mem_clock_mhz,
        "pstate": None if s.pstate is None else f"P{s.pstate}",
        "clock_reasons": None if s.clock_reasons is None else list(s.clock_reasons),
        "throttled": s.throttled,
        "low_util": s.is_low_util(low_util),
        "processes": None if procs is None else len(procs),
        "process_memory_mib": proc_mem,
    }


def _gpm_csv(gpm: dict[str, Any]) -> str:
    """The gpm record as one cell: "supported", "not supported: why", "supported: why"."""
    if gpm["supported"] is None:
        return ""
    said = "supported" if gpm["supported"] else "not supported"
    return f"{said}: {gpm['reason']}" if gpm["reason"] else said


def to_csv_row(record: dict[str, Any]) -> list[str]:
    """CSV cells for a record in CSV_FIELDS order: "" for None, reasons joined by ";", the gpm
    record in words."""
    cells = []
    for field in CSV_FIELDS:
        value = record[field]
        if value is None:
            cells.append("")
        elif field == "gpm":
            cells.append(_gpm_csv(value))
        elif isinstance(value, list):
            cells.append(";".join(value))
        else:
            cells.append(str(value))
    return cells
