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


def available_memory() -> int:
    """Bytes of memory available now (Linux's MemAvailable: free memory plus what the kernel
    can reclaim), or ``MEMORY_FALLBACK`` (4 GiB) where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return MEMORY_FALLBACK


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
