"""How many more child processes this machine's limits let this process start.

:func:`child_limits` reads, where the system has them, the open-file limit, the user's process
limit, a cgroup's ``pids.max`` and the kernel's ``threads-max`` and ``pid_max``, each against
what is in use now; :func:`over_limits` words the refusal. A job too large for the machine
(``tfopt launch``'s workers, a cluster's ports) is then refused in one line that names the
tightest limit and its remedy, before anything starts, not halfway with "Too many open files".
No TensorFlow is imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence

# Open files this process keeps for itself beyond what its children need: the three pipes (six
# descriptors) of a start in progress, the files Python opens to import and log, with room.
_RESERVED_FILES = 32
# Tasks (processes and threads) kept free for this process and the rest of the user's session,
# so that hitting a limit exactly does not leave the shell unable to run ``kill``.
_RESERVED_TASKS = 32


@dataclasses.dataclass(frozen=True)
class ChildLimit:
    """One limit on the children this process can start now.

    Attributes:
        name: Its short name ("ulimit -n", "kernel.pid_max").
        most: How many more children fit under it.
        reason: What it is, with its numbers ("each worker needs 2 open files here and the
            open-file limit (ulimit -n) is 1024, 9 in use").
        remedy: What to do when more are needed ("raise it: ulimit -n 4096").
    """

    name: str
    most: int
    reason: str
    remedy: str


def _open_files() -> int | None:
    """Descriptors open in this process now; None where the system cannot list them."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(os.listdir(folder)) - 1)  # less the one listdir itself opened
        except OSError:
            continue
    return None


def _proc_status(pid: str, keys: Sequence[str]) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/status") as status:
            return {key: value.strip() for key, _, value in (line.partition(":")
                                                             for line in status)
                    if key in keys}
    except OSError:  # gone meanwhile, or not ours to read
        return {}


def _user_tasks(uid: int) -> int:
    """Threads of every process whose real user is ``uid``: what RLIMIT_NPROC counts."""
    total = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _proc_status(entry, ("Uid", "Threads"))
            with contextlib.suppress(KeyError, ValueError, IndexError):
                if int(fields["Uid"].split()[0]) == uid:
                    total += int(fields["Threads"])
    return total


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):  # absent, "max" (no limit), unreadable
        return None


def _cgroup_task_room() -> tuple[int, str] | None:
    """(tasks still allowed, the cgroup folder) of the tightest ``pids.max`` over this
    process's cgroup and its ancestors (a container's ``--pids-limit``); None for none."""
    try:
        with open("/proc/self/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    folders = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2: one unified tree
            folders.append(("/sys/fs/cgroup", path))
        elif "pids" in controllers.split(","):  # cgroup v1: the pids controller's tree
            folders.append(("/sys/fs/cgroup/pids", path))
    tightest = None
    for root, path in folders:
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts), -1, -1):
            folder = os.path.join(root, *parts[:depth])
            most = _read_int(os.path.join(folder, "pids.max"))
            used = _read_int(os.path.join(folder, "pids.current"))
            if most is not None and used is not None and (
                    tightest is None or most - used < tightest[0]):
                tightest = (most - used, folder)
    return tightest


def child_limits(children: int, *, files_per_child: int, tasks_per_child: int,
                 noun: str = "child") -> list[ChildLimit]:
    """The limits on starting ``children`` more children from this process, read now.

    Read, where the system has them: the open-file limit (``RLIMIT_NOFILE``) against the
    descriptors open here, the user's process limit (``RLIMIT_NPROC``, which counts threads;
    not applied by the kernel to root) against the user's tasks, the cgroup's ``pids.max`` (a
    container's limit) and the kernel's ``threads-max`` and ``pid_max`` against the tasks that
    run. A limit this system does not have is left out; each one's ``remedy`` names what
    ``children`` would need.

    Args:
        children: The children wanted (the remedies are worded for that many).
        files_per_child: Descriptors this process holds for each child while it runs (2 for
            its stdout and stderr pipes).
        tasks_per_child: Tasks each child takes at least: its process, and any thread of this
            process that serves it.
        noun: What the messages call a child ("worker"). Defaults to "child".

    Returns:
        The limits, each with how many more children fit under it.

    Example:
        >>> min(limit.most for limit in child_limits(8, files_per_child=2, tasks_per_child=3))
        9980
    """
    limits = []
    try:
        import resource
    except ImportError:  # not a Unix: none of these limits can be read
        return limits
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = _open_files()
    if soft != resource.RLIM_INFINITY and in_use is not None and files_per_child > 0:
        need = in_use + _RESERVED_FILES + children * files_per_child
        remedy = (f"raise it: ulimit -n {need}" if hard == resource.RLIM_INFINITY or need <= hard
                  else f"its hard limit is {hard}: have it raised to {need} or more, or start "
                  "fewer")
        files = "an open file" if files_per_child == 1 else f"{files_per_child} open files"
        limits.append(ChildLimit(
            "ulimit -n", max(0, (soft - in_use - _RESERVED_FILES) // files_per_child),
            f"each {noun} holds {files} in this process and the open-file limit (ulimit -n) "
            f"is {soft}, {in_use} in use", remedy))
    if tasks_per_child <= 0 or not os.path.isdir("/proc"):
        return limits
    tasks = f"each {noun} takes at least {tasks_per_child} tasks (processes and threads)"
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    # the kernel does not apply RLIMIT_NPROC to root (nor to CAP_SYS_RESOURCE/CAP_SYS_ADMIN)
    if soft != resource.RLIM_INFINITY and os.getuid() != 0:
        used = _user_tasks(os.getuid())
        need = used + _RESERVED_TASKS + children * tasks_per_child
        remedy = (f"raise it: ulimit -u {need}" if hard == resource.RLIM_INFINITY or need <= hard
                  else f"its hard limit is {hard}: have it raised to {need} or more, or start "
                  "fewer")
        limits.append(ChildLimit(
            "ulimit -u", max(0, (soft - used - _RESERVED_TASKS) // tasks_per_child),
            f"{tasks} and the user's process limit (ulimit -u) is {soft}, {used} in use",
            remedy))
    room = _cgroup_task_room()
    if room is not None:
        left, folder = room
        limits.append(ChildLimit(
            "pids.max", max(0, (left - _RESERVED_TASKS) // tasks_per_child),
            f"{tasks} and the cgroup {folder} allows {left} more (pids.max)",
            "raise the container's process limit (docker run --pids-limit, systemd TasksMax=) "
            "or start fewer"))
    try:
        with open("/proc/loadavg") as handle:
            running = int(handle.read().split()[3].split("/")[1])  # "1/234": tasks now
    except (OSError, ValueError, IndexError):
        running = None
    for key, path in (("kernel.threads-max", "/proc/sys/kernel/threads-max"),
                      ("kernel.pid_max", "/proc/sys/kernel/pid_max")):
        most = _read_int(path)
        if most is not None and running is not None:
            need = running + _RESERVED_TASKS + children * tasks_per_child
            limits.append(ChildLimit(
                key, max(0, (most - running - _RESERVED_TASKS) // tasks_per_child),
                f"{tasks} and the kernel allows {most} ({key}), {running} running",
                f"raise it: sysctl -w {key}={need}"))
    return limits


def over_limits(wanted: int, limits: Sequence[ChildLimit], name: str) -> str | None:
    """The one-line refusal of ``name=wanted`` when a limit allows fewer; None when all allow
    it. The tightest limit comes first, with its remedy; any other one it exceeds follows."""
    over = sorted((limit for limit in limits if limit.most < wanted), key=lambda x: x.most)
    if not over:
        return None
    first, rest = over[0], over[1:]
    line = (f"{name}={wanted}: expected at most {first.most} here: {first.reason}; "
            f"{first.remedy}")
    if rest:  # named only: raising the first alone would not be enough
        line += f" (these allow fewer than {wanted} too: " + ", ".join(
            f"{limit.name} {limit.most}" for limit in rest) + ")"
    return line
