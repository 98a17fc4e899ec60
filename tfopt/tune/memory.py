"""How much memory a training step needs: TensorFlow's allocator, or resident memory sampled.

On a GPU, and on a CPU where TensorFlow started with ``TF_CPU_ALLOCATOR_USE_BFC=1``, the peak
of TensorFlow's own allocator during the step; otherwise the growth of the process's resident
memory, sampled every millisecond, plus the variables (approximate, on the large side; see
``docs/tune.md``). Imports no TensorFlow: the probe is given the module.

Example:
    >>> with RssSampler() as sampler:
    ...     step()
    >>> sampler.peak
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import tfopt.rules as rules
from tfopt._system import available_memory

__all__ = ["MemoryProbe", "RssSampler", "default_budget", "resident_bytes"]

RSS_SAMPLE_SECONDS = 0.001  # 1 ms between resident-memory samples during a CPU trial step


def resident_bytes() -> int | None:
    """This process's resident memory in bytes (``/proc/self/statm``); None where unreadable."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class RssSampler:
    """The peak resident memory of this process while a block runs (sampled every 1 ms)."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, resident_bytes() or 0)
            self._stop.wait(RSS_SAMPLE_SECONDS)

    def __enter__(self):
        self.peak = resident_bytes() or 0
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, resident_bytes() or 0)
        return False


class MemoryProbe:
    """Measures the memory a training step needs, the best way this process allows."""

    def __init__(self, tf, extra_bytes: int):
        self.tf = tf
        self.extra_bytes = extra_bytes
        gpus = tf.config.list_logical_devices("GPU")
        self.device = "GPU:0" if gpus else "CPU:0"
        self.kind = "rss"
        if gpus or os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() in ("1", "true"):
            self.kind = "tf-allocator"
        self.baseline = resident_bytes()
        if self.kind == "rss" and self.baseline is None:
            self.kind = "none"

    def rebase(self) -> None:
        """Take the resident memory now as the baseline (after the warm-up step)."""
        self.baseline = resident_bytes()

    def measure(self, step: Callable[[], None]) -> int | None:
        if self.kind == "tf-allocator":
            self.tf.config.experimental.reset_memory_stats(self.device)
            step()
            return int(self.tf.config.experimental.get_memory_info(self.device)["peak"])
        if self.kind == "rss":
            with RssSampler() as sampler:
                step()
            return max(0, sampler.peak - self.baseline) + self.extra_bytes
        step()
        return None


def default_budget(tf) -> int | None:
    """Half of the memory available now on a CPU-only machine; None where there is a GPU."""
    if tf.config.list_logical_devices("GPU"):
        return None
    return rules.default_ram_budget(available_memory())

