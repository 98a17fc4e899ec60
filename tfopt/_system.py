"""Facts about the machine that several modules size their work by."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
MEMORY_FALLBACK = 4 << 30  # bytes taken as available where /proc/meminfo cannot be read


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity where the OS tells it (Linux, and so
    containers limited with --cpuset-cpus), else every core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _proc_bytes(path: str, key: str) -> int | None:
    """The ``key:`` line of a Linux /proc file that counts in kB (``/proc/meminfo``,
    ``/proc/self/status``), in bytes; None where the file or the line cannot be read."""
    try:
        with open(path, encoding="ascii") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def available_memory() -> int:
    """Bytes of memory available now (Linux's MemAvailable: free memory plus what the kernel
    can reclaim), or ``MEMORY_FALLBACK`` (4 GiB) where it cannot be read."""
    available = _proc_bytes("/proc/meminfo", "MemAvailable")
    return MEMORY_FALLBACK if available is None else available


def reset_peak_rss() -> bool:
    """Start a fresh peak-memory measurement for this process: True where Linux could reset
    its high-water mark (``/proc/self/clear_refs``), False where :func:`peak_rss` will keep
    reporting the peak since the process started."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")  # 5: reset the peak resident set size (VmHWM), see proc(5)
        return True
    except OSError:
        return False


def peak_rss() -> int:
    """Bytes of this process's peak resident memory: since the last :func:`reset_peak_rss`
    that succeeded, else since it started."""
    peak = _proc_bytes("/proc/self/status", "VmHWM")
    if peak is not None:
        return peak
    import resource

    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def parent_death_signal(signum: int) -> Callable[[], object] | None:
    """A function that asks Linux to send this process ``signum`` when its parent dies (even
    by SIGKILL); None where there is no ``prctl`` (not Linux).

    Looked up here, in advance: a child between fork and exec (``preexec_fn``) must not
    import anything.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    signum = int(signum)
    return lambda: prctl(_PR_SET_PDEATHSIG, signum)
