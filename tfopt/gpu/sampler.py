"""Sample the GPUs every N seconds in a background thread; report mean and max per field.

The timing math (:class:`SampleSchedule`) and the statistics (:class:`GpuStats`) are plain
classes that take a clock and snapshots as arguments, so they are tested without threads or
sleeps; :class:`GpuSampler` is the thin thread around them. Training callbacks use it to see GPU
utilisation while ``fit`` runs. Where the GPU has GPM (Hopper and newer), each sample after the
first also carries the GPU's own counters over the interval since the previous one (SM
activity and occupancy, tensor-core activity, DRAM bandwidth: :mod:`tfopt.gpu.gpm`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from types import ModuleType

from tfopt._validate import number
from tfopt.gpu.gpm import GpmReader
from tfopt.gpu.nvml import NvmlSession, NvmlState
from tfopt.gpu.snapshot import GPM_FIELDS, GpuSnapshot

logger = logging.getLogger("tfopt")

# The numeric GpuSnapshot fields that are averaged.
SAMPLED_FIELDS = (
    "gpu_util",
    "mem_util",
    *GPM_FIELDS,
    "memory_used",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
)


class SampleSchedule:
    """When the next sample is due, on a fixed grid that does not drift.

    Samples are due at start, start + interval, start + 2 * interval, ... If a sample took
    longer than the interval, the missed slots are skipped (counted in ``missed``) instead of
    being taken in a burst.

    Args:
        interval_s: Seconds between samples, > 0.
        clock: Monotonic clock in seconds. Defaults to time.perf_counter.

    Raises:
        InvalidArgumentError: interval_s is not a positive finite number.

    Example:
        >>> schedule = SampleSchedule(1.0)
        >>> schedule.delay()   # the first sample is due at once
        0.0
    """

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.perf_counter):
        self.interval_s = number(interval_s, "interval_s", low=0.0, open_low=True,
                                 expected="a positive number of seconds")
        self._clock = clock
        self._next = clock()
        self.missed = 0

    def delay(self) -> float:
        """Seconds to wait until the next sample is due; 0.0 when it is due now."""
        return max(0.0, self._next - self._clock())

    def advance(self) -> None:
        """Record that the due sample was taken; move to the next slot still in the future."""
        now = self._clock()
        self._next += self.interval_s
        if self._next <= now:
            behind = math.floor((now - self._next) / self.interval_s) + 1
            self.missed += behind
            self._next += behind * self.interval_s


@dataclasses.dataclass(frozen=True)
class FieldStats:
    """Mean and maximum of one field over the samples that reported it.

    Attributes:
        mean: Arithmetic mean.
        max: Largest value.
        count: Number of samples with a value (unsupported fields are left out).
    """

    mean: float
    max: float
    count: int


class GpuStats:
    """Accumulates snapshots; gives mean/max per field per GPU and the share of throttled samples.

    Example:
        >>> stats = GpuStats()
        >>> stats.add([GpuSnapshot(index=0, timestamp=0.0, gpu_util=40)])
        >>> stats.add([GpuSnapshot(index=0, timestamp=1.0, gpu_util=60)])
        >>> stats.summary()[0]["gpu_util"].mean
        50.0
    """

    def __init__(self):
        self._sums: dict[int, dict[str, float]] = {}
        self._maxes: dict[int, dict[str, float]] = {}
        self._counts: dict[int, dict[str, int]] = {}
        self._samples: dict[int, int] = {}
        self._throttled: dict[int, int] = {}
        self._lock = threading.Lock()

    def add(self, snapshots: Iterable[GpuSnapshot]) -> None:
        """Add one sample of every GPU."""
        with self._lock:
            for snap in snapshots:
                i = snap.index
                self._samples[i] = self._samples.get(i, 0) + 1
                self._throttled[i] = self._throttled.get(i, 0) + int(snap.throttled)
                sums = self._sums.setdefault(i, {})
                maxes = self._maxes.setdefault(i, {})
                counts = self._counts.setdefault(i, {})
                for name in SAMPLED_FIELDS:
                    value = getattr(snap, name)
                    if value is None:
                        continue
                    sums[name] = sums.get(name, 0.0) + value
                    maxes[name] = max(maxes.get(name, value), value)
                    counts[name] = counts.get(name, 0) + 1

    def sample_count(self, index: int) -> int:
        """Number of samples taken of GPU ``index``."""
        with self._lock:
            return self._samples.get(index, 0)

    def throttled_fraction(self, index: int) -> float:
        """Share of GPU ``index``'s samples in which it was throttled, 0.0 to 1.0."""
        with self._lock:
            samples = self._samples.get(index, 0)
            return self._throttled.get(index, 0) / samples if samples else 0.0

    def summary(self) -> dict[int, dict[str, FieldStats]]:
        """{gpu index: {field: FieldStats}}; fields no sample reported are absent."""
        with self._lock:
            return {
                i: {
                    name: FieldStats(sums[name] / self._counts[i][name], self._maxes[i][name],
                                     self._counts[i][name])
                    for name in sums
                }
                for i, sums in self._sums.items()
            }


class GpuSampler:
    """Samples all GPUs every ``interval_s`` seconds in a daemon thread.

    Never raises for a machine without NVML: :attr:`state` tells, and no samples are taken.

    Args:
        interval_s: Seconds between samples. Defaults to 1.0.
        module: The pynvml module. Defaults to None: import pynvml.
        on_sample: Called in the sampling thread with each list of snapshots. Defaults to None.
        clock: Monotonic clock for the schedule. Defaults to time.perf_counter.

    Raises:
        InvalidArgumentError: interval_s is not positive.

    Example:
        >>> with GpuSampler(interval_s=0.5) as sampler:
        ...     model.fit(dataset)
        >>> sampler.stats.summary()
    """

    def __init__(
        self,
        interval_s: float = 1.0,
        module: ModuleType | None = None,
        on_sample: Callable[[list[GpuSnapshot]], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self._schedule = SampleSchedule(interval_s, clock)
        self._session = NvmlSession(module)
        self._gpm = GpmReader(self._session)
        self._on_sample = on_sample
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.stats = GpuStats()
        self.latest: list[GpuSnapshot] = []

    @property
    def state(self) -> NvmlState:
        """The NVML state (opens NVML on first access)."""
        return self._session.state

    @property
    def missed(self) -> int:
        """Sample slots skipped because sampling fell behind."""
        return self._schedule.missed

    def start(self) -> GpuSampler:
        """Start the thread; a no-op (with an info log) when NVML has no GPUs."""
        if self._thread is not None:
            return self
        if not self.state.ok:
            logger.info("GPU sampling off: %s", self.state.message)
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tfopt-gpu-sampler", daemon=True)
        self._thread.start()
        return self

    def sample_once(self) -> list[GpuSnapshot]:
        """Take one sample now, add it to the stats and return it."""
        snapshots = self._gpm.annotate(self._session.snapshots())
        self.latest = snapshots
        self.stats.add(snapshots)
        if self._on_sample is not None:
            self._on_sample(snapshots)
        return snapshots

    def _run(self) -> None:
        while not self._stop.wait(self._schedule.delay()):
            try:
                self.sample_once()
            except Exception:  # a monitoring thread must not die silently mid-training
                logger.exception("GPU sampling failed; sampling stops")
                return
            self._schedule.advance()

    def stop(self) -> None:
        """Stop the thread and shut NVML down. Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._gpm.close()  # its sample buffers go before NVML does
        self._session.close()

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
