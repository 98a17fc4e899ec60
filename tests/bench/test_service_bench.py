"""``tfopt bench pipeline --service-workers``: tfopt's pipeline through local tf.data services
of real worker processes, the report's rows and ratios, bad values, and no server left behind
on any way out (normal end, an exception, Ctrl-C, SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import make_demo_shards

from tfopt.bench.pipeline import BenchSettings, run_pipeline_bench
from tfopt.bench.service_workers import local_services
from tfopt.cli import cli
from tfopt.errors import InvalidArgumentError

QUICK = ["--batch-size", "16", "--image-size", "32", "--repeats", "1", "--max-batches", "3",
         "--methods", "tfopt", "--cache", "off"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return make_demo_shards(tmp_path_factory.mktemp("service-bench"), count=96, classes=3,
                            min_size=40, max_size=56, shards=4)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # gone
        return False
    return state[0] != "Z"


def _servers_of(parent: int) -> list[int]:
    """Pids of live service processes whose parent is ``parent``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if (b"tfopt.bench.service_workers" in argv and int(state[1]) == parent
                and state[0] != "Z"):
            found.append(int(proc.name))
    return found


def test_cli_reports_a_row_per_worker_count_and_stops_every_server(shards):
    result = CliRunner().invoke(cli, ["bench", "pipeline", str(shards), *QUICK,
                                      "--service-workers", "0,1", "--json", "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    rows = data["service"]["rows"]
    assert [row["workers"] for row in rows] == [0, 1]
    assert all(row["median"][0] > 0 and len(row["runs"][0]) == 1 for row in rows)
    assert rows[0]["median"] == data["methods"]["tfopt"]["median"]  # 0 is the in-process run
    assert rows[0]["ratio_to_0_workers"] == [1.0]
    assert rows[1]["ratio_to_0_workers"][0] == pytest.approx(
        rows[1]["median"][0] / rows[0]["median"][0])
    assert "share its cores" in data["service"]["note"]
    assert data["settings"]["service_workers"] == [0, 1]
    assert _servers_of(os.getpid()) == []


def test_describe_shows_the_service_rows_and_an_exception_stops_the_servers(shards):
    settings = BenchSettings(shards, batch_size=16, image_size=32, repeats=2, max_batches=2,
                             cache=False, service_workers=(1,))
    lines = []
    report = run_pipeline_bench(settings, ["tfopt"], progress=lines.append)
    runs = [line.split()[2] for line in lines if line.startswith("run ")]
    assert runs == ["tfopt", "service-1"] * 2  # alternating
    assert lines[-1].startswith("stages: tfopt.analyze on tfopt's pipeline")  # the breakdown
    assert list(report.service) == [1] and list(report.results) == ["tfopt"]
    text = report.describe()
    assert "local tf.data service" in text and "0 in-process" in text
    assert "not a multi-host speed-up" in text
    assert f"{report.service_ratio(1):.2f}x" in text

    def fail_after_a_service_run(line):
        if "service-1" in line:
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        run_pipeline_bench(settings, ["tfopt"], progress=fail_after_a_service_run)
    assert _servers_of(os.getpid()) == []


@pytest.mark.parametrize("value", ["-1", "x", "1,,2", "9"])
def test_bad_worker_counts_are_usage_errors_naming_the_option(shards, value):
    result = CliRunner().invoke(cli, ["bench", "pipeline", str(shards),
                                      "--service-workers", value])
    assert result.exit_code == 2
    assert "--service-workers" in result.output and repr(value) in result.output
    with pytest.raises(InvalidArgumentError, match=r"service_workers=\(-1,\)"):
        BenchSettings(shards, service_workers=(-1,))


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "exit_code"), [
    (signal.SIGINT, 1),  # KeyboardInterrupt: the servers stopped, click's "Aborted!"
    (signal.SIGTERM, 143),  # SystemExit(128 + 15) from the benchmark's handler, after stopping
    (signal.SIGKILL, -signal.SIGKILL),  # no cleanup possible: Linux kills the servers with it
])
def test_ctrl_c_sigterm_or_kill_during_the_run_leaves_no_server(shards, signum, exit_code):
    process = subprocess.Popen(
        [sys.executable, "-m", "tfopt", "bench", "pipeline", str(shards), *QUICK,
         "--repeats", "50", "--service-workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    try:
        runs = 0
        for line in process.stderr:  # wait until runs through the service are under way
            runs += line.startswith("run ") and "service-1" in line
            if runs == 2:  # mid-run: 48 of the 50 rounds are still to come
                break
        servers = _servers_of(process.pid)
        assert len(servers) == 2  # a dispatcher and its worker
        process.send_signal(signum)
        assert process.wait(timeout=60) == exit_code
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in servers) and time.monotonic() < deadline:
        time.sleep(0.1)  # servers are reaped by their parent, or by init once it has gone
    # by pid, not by parent: once the benchmark is gone, a survivor would be init's child
    assert [pid for pid in servers if _alive(pid)] == []


def test_local_services_start_one_dispatcher_per_count_and_stop_them():
    with local_services([0, 2, 1, 2]) as services:  # 0 is no service; a count starts once
        addresses = {services.address(1), services.address(2)}
        assert all(address.startswith("grpc://localhost:") for address in addresses)
        assert len(addresses) == 2 and len(services.pids()) == 2 + 3
        assert services.cpu_seconds(2) > 0
        with pytest.raises(KeyError):
            services.address(0)
    assert _servers_of(os.getpid()) == []
