"""Facts about the machine that several modules size their work by."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity where the OS tells it (Linux, and so
    containers limited with --cpuset-cpus), else every core."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
