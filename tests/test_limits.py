"""The machine's limits on child processes: the open-file limit read in a child that lowers it,
and the one-line refusal that names the tightest limit first."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tfopt._limits import ChildLimit, over_limits

PY = sys.executable
TIMEOUT = 30  # seconds for anything to happen on a loaded 2-core machine


def test_child_limits_read_the_open_file_limit_of_this_process():
    # in a child whose soft open-file limit is 256: 2 files each leave room for (256 - open
    # now - 32 kept for the process itself) // 2, and the remedy names what 500 would need
    code = textwrap.dedent("""
        import json, os, resource
        from tfopt._limits import child_limits
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        limits = child_limits(500, files_per_child=2, tasks_per_child=3, noun="worker")
        print(json.dumps([[l.name, l.most, l.reason, l.remedy] for l in limits]))
    """)
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    limits = {name: (most, reason, remedy) for name, most, reason, remedy
              in json.loads(done.stdout)}
    most, reason, remedy = limits["ulimit -n"]
    assert 100 < most < (256 - 32) // 2 + 1
    assert "each worker holds 2 open files in this process" in reason
    assert "the open-file limit (ulimit -n) is 256" in reason
    assert remedy.startswith("raise it: ulimit -n ") and int(remedy.split()[-1]) > 1000
    if sys.platform.startswith("linux"):
        assert {"kernel.pid_max", "kernel.threads-max"} <= set(limits)


def test_over_limits_names_the_tightest_limit_first_and_the_others_after():
    limits = [ChildLimit("free ports", 28000, "28000 ports are free", "widen the range"),
              ChildLimit("ulimit -n", 500, "the open-file limit is 1024", "ulimit -n 4096"),
              ChildLimit("kernel.pid_max", 90000, "pid_max is 4194304", "sysctl")]
    assert over_limits(400, limits, "workers") is None
    assert over_limits(600, limits, "workers") == (
        "workers=600: expected at most 500 here: the open-file limit is 1024; ulimit -n 4096")
    assert over_limits(30000, limits, "workers") == (
        "workers=30000: expected at most 500 here: the open-file limit is 1024; ulimit -n "
        "4096 (these allow fewer than 30000 too: free ports 28000)")
