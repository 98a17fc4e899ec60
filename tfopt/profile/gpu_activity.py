"""The GPUs' own account of the timed steps: NVML sampled while ``tfopt profile`` times the fit.

GPU-Util is the share of time one kernel or more was running: one tiny kernel reads 100 %.
Where the GPU has GPM (Hopper and newer), SM activity and tensor-core activity say how much of
the chip worked, so the report puts them beside it. Without NVML or a GPU the section says
why, and nothing is sampled.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

from tfopt.gpu.sampler import GpuSampler
from tfopt.gpu.snapshot import GPM_FIELDS

__all__ = ["GpuActivity", "sample_gpus"]

SAMPLE_INTERVAL_S = 0.25  # several samples in the few seconds a profile times
# GPU-Util at or above this with SM activity under half of it: the kernels ran, the chip idled
_BUSY_UTIL = 80.0


@dataclasses.dataclass
class GpuActivity:
    """Per GPU, the means over the timed rounds (percent; None where not reported).

    Attributes:
        gpus: One dict per GPU: ``index``, ``name``, ``samples``, ``gpu_util``, ``mem_util``,
            the GPM counters (``sm_active``, ``sm_occupancy``, ``tensor_active``,
            ``dram_bw_util``) and ``memory_used_max`` (bytes).
        unavailable: Why nothing was sampled (no NVML, no GPU), or None.
    """

    gpus: list[dict] = dataclasses.field(default_factory=list)
    unavailable: str | None = None

    def to_json(self) -> dict:
        return {"gpus": self.gpus, "unavailable": self.unavailable}

    def lines(self) -> list[str]:
        """The report's rows, one per GPU, and what GPU-Util alone would have hidden."""
        if self.unavailable is not None:
            return [f"  GPU counters        - ({self.unavailable})"]
        rows = []
        for gpu in self.gpus:
            parts = [f"GPU-Util {_percent(gpu['gpu_util'])}"]
            if gpu["sm_active"] is not None:
                parts += [f"SM active {_percent(gpu['sm_active'])}",
                          f"tensor cores {_percent(gpu['tensor_active'])}"]
            else:
                parts.append("no GPM counters (Hopper or newer has them)")
            rows.append(f"  GPU {gpu['index']:<16}{', '.join(parts)}")
            if _hollow(gpu):
                rows.append(f"    GPU-Util {gpu['gpu_util']:.0f}% says a kernel was running; "
                            f"SM activity {gpu['sm_active']:.0f}% says how little of the chip "
                            "worked: small kernels, launch gaps or a small batch")
        return rows


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _hollow(gpu: dict) -> bool:
    util, active = gpu["gpu_util"], gpu["sm_active"]
    return util is not None and active is not None and util >= _BUSY_UTIL \
        and active < util / 2


class sample_gpus:  # noqa: N801  (used as a context manager, like open)
    """Sample every GPU while the block runs; ``activity`` holds the result after it.

    Args:
        module: The pynvml module. Defaults to None: import pynvml.
    """

    def __init__(self, module: ModuleType | None = None):
        self._sampler = GpuSampler(SAMPLE_INTERVAL_S, module)
        self.activity = GpuActivity()

    def __enter__(self) -> sample_gpus:
        if not self._sampler.state.ok:
            self.activity.unavailable = self._sampler.state.message
            return self
        self._names = {snapshot.index: snapshot.name or ""
                       for snapshot in self._sampler.sample_once()}
        self._sampler.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.activity.unavailable is None:
            self._sampler.sample_once()  # the last interval's GPM counters
        self._sampler.stop()
        if self.activity.unavailable is not None:
            return
        summary = self._sampler.stats.summary()
        for index, fields in sorted(summary.items()):
            def mean(field, fields=fields):
                stats = fields.get(field)
                return None if stats is None or not stats.count else round(stats.mean, 1)

            used = fields.get("memory_used")
            self.activity.gpus.append({
                "index": index, "name": self._names.get(index, ""),
                "samples": self._sampler.stats.sample_count(index),
                "gpu_util": mean("gpu_util"), "mem_util": mean("mem_util"),
                **{field: mean(field) for field in GPM_FIELDS},
                "memory_used_max": None if used is None or not used.count else int(used.max)})
        if not self.activity.gpus:
            self.activity.unavailable = "NVML answered, but no GPU was sampled"
