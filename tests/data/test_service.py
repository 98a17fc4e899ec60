"""tf.data service: a dispatcher and two workers as real local processes, the pipeline handing
its preprocessing to them (evaluation exactly once, training batches), and the CLI group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import encode_png

import tfopt
from tfopt.cli.service import COMMANDS, data_service
from tfopt.data.config import PipelineConfig
from tfopt.data.pipeline import PipelineBuilder
from tfopt.data.service import parse_address
from tfopt.errors import InvalidArgumentError

START_TIMEOUT = 60  # seconds for a server process to import TensorFlow and print its address


def _start(*args) -> tuple[subprocess.Popen, str]:
    """Start ``tfopt data-service ARGS`` and return the process and its first stdout line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tfopt.cli.service", *args], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    # readline blocks; the server prints its address right after start-up
    line = process.stdout.readline().strip()
    if not line.startswith("grpc://"):
        process.kill()
        raise AssertionError(f"no address from data-service {args}: {line!r}, "
                             f"exit code {process.poll()}")
    return process, line


@pytest.fixture(scope="module")
def service():
    """A dispatcher and two workers on localhost; yields the dispatcher's address."""
    processes = []
    try:
        dispatcher, address = _start("dispatcher", "--port", "0")
        processes.append(dispatcher)
        assert address.startswith("grpc://localhost:")
        for _ in range(2):
            worker, worker_address = _start("worker", "--dispatcher", address)
            processes.append(worker)
            assert worker_address.startswith("grpc://localhost:")
        yield address
    finally:
        # workers first: a worker stops at once while its dispatcher is up
        for process in reversed(processes):
            process.send_signal(signal.SIGTERM)
        codes = []
        for process in reversed(processes):
            try:
                codes.append(process.wait(timeout=5))
            except subprocess.TimeoutExpired:
                # a worker that ran a job sometimes ignores SIGTERM (see the report in
                # tfopt/data/service.py's serve); never leave it behind
                process.kill()
                codes.append(process.wait())
        assert codes[-1] == 0  # the dispatcher: SIGTERM is a clean stop, exit code 0


@pytest.fixture(scope="module")
def indexed_dataset(tmp_path_factory):
    """30 PNGs whose constant colour is their index, in 3 classes; converted to 3 shards."""
    root = tmp_path_factory.mktemp("service")
    for index in range(30):
        path = root / "images" / f"c{index % 3}" / f"{index:03d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_png(np.full((20, 24, 3), index * 8, dtype=np.uint8)))
    tfopt.convert(root / "images", root / "shards", workers=1, shards=3)
    return root / "shards"


def test_evaluation_through_the_service_yields_every_record_exactly_once(service,
                                                                          indexed_dataset):
    builder = PipelineBuilder(indexed_dataset, batch_size=4, image_size=16, service=service,
                              split="train")
    assert builder.plan.service == service and not builder.plan.known_length
    seen = []
    for images, labels in builder.build():
        assert images.shape[1:] == (16, 16, 3)
        for image, label in zip(images.numpy(), labels.numpy(), strict=True):
            index = int(round(image.mean() / 8))
            assert label == index % 3  # the label travelled with its image
            seen.append(index)
    assert sorted(seen) == list(range(30))


def test_training_through_the_service_yields_full_batches(service, indexed_dataset):
    builder = PipelineBuilder(indexed_dataset, batch_size=5, training=True, image_size=16,
                              drop_remainder=True, seed=1, service=service)
    batches = list(builder.build().take(8))  # repeats forever: more than one epoch of 6
    assert len(batches) == 8
    for images, labels in batches:
        assert images.shape == (5, 16, 16, 3) and images.dtype.name == "uint8"
        assert labels.shape == (5,)


def test_service_address_is_checked_and_normalised():
    assert parse_address("localhost:5050") == "grpc://localhost:5050"
    assert PipelineConfig(batch_size=1, service="grpc://node1:7000").service == "grpc://node1:7000"
    with pytest.raises(InvalidArgumentError, match="service='localhost'"):
        PipelineConfig(batch_size=1, service="localhost")
    with pytest.raises(InvalidArgumentError, match="skip_corrupt"):
        PipelineConfig(batch_size=1, service="localhost:1", skip_corrupt=True)


def test_cli_group_lists_its_commands_and_says_where_it_listens():
    assert COMMANDS == [data_service]
    runner = CliRunner()
    result = runner.invoke(data_service, ["--help"])
    assert result.exit_code == 0 and "dispatcher" in result.output and "worker" in result.output
    result = runner.invoke(data_service, ["dispatcher", "--help"])
    assert "--host" in result.output and "all interfaces" in result.output
    result = runner.invoke(data_service, ["worker"])
    assert result.exit_code == 2 and "--dispatcher" in result.output


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path):
    import socket

    from tfopt.data.service import start_dispatcher, start_worker
    from tfopt.errors import TfoptError

    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(TfoptError, match=f"dispatcher did not start on port {port}"):
            start_dispatcher(port=port)
        dispatcher = start_dispatcher()
        try:
            with pytest.raises(TfoptError, match=f"worker did not start on port {port}"):
                start_worker(dispatcher.address, port=port)
        finally:
            dispatcher.stop()
    (tmp_path / "a_file").write_text("")
    with pytest.raises(InvalidArgumentError, match="work_dir=.*a_file/journal.*cannot create"):
        start_dispatcher(work_dir=str(tmp_path / "a_file" / "journal"))


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def test_hosts_are_checked_and_normalised():
    from tfopt.data.service import check_host

    assert check_host("localhost") == "localhost"
    assert check_host("node-1.example.org.") == "node-1.example.org"
    assert check_host("trainer_1") == "trainer_1"  # a container service name
    assert check_host("10.0.0.5") == "10.0.0.5"
    assert check_host("::1") == check_host("[::1]") == "[::1]"
    for bad in ["bad host!", "", "-node", "a..b", "x" * 64, "grpc://node", None, 5]:
        with pytest.raises(InvalidArgumentError, match="expected a host name or an IP address"):
            check_host(bad)
    with pytest.raises(InvalidArgumentError, match="dispatcher="):
        parse_address("bad host!:5050", "dispatcher")
    with pytest.raises(InvalidArgumentError, match="dispatcher="):
        parse_address("-node:5050", "dispatcher")


@pytest.mark.parametrize("role", ["dispatcher", "worker"])
def test_a_bad_host_is_one_line_before_anything_starts(role):
    # checked before TensorFlow's import: the runner would otherwise start a real server
    args = [role, "--host", "bad host!"] + (["--dispatcher", "localhost:1"] if role == "worker"
                                            else [])
    result = CliRunner().invoke(data_service, args, catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "tfopt: error: host='bad host!': expected a host name or an IP address, e.g. localhost, "
        "node1.example.org, 10.0.0.5 or [::1]"]
    assert result.stdout == ""


def test_a_worker_says_it_waits_for_a_dead_dispatcher_then_gives_up_in_one_line():
    port = _free_port()
    result = subprocess.run(
        [sys.executable, "-m", "tfopt", "data-service", "worker", "--dispatcher",
         f"localhost:{port}", "--dispatcher-timeout", "1"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    address = f"grpc://localhost:{port}"
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"tfopt: WARNING: waiting for the tf.data service dispatcher at {address} (Connection "
        "refused), up to 1 s",
        f"tfopt: error: no tf.data service dispatcher answered at {address} within 1 s "
        "(Connection refused); start 'tfopt data-service dispatcher' first and give its "
        "address (the first line it prints), or wait longer (--dispatcher-timeout)"]


def test_a_worker_waits_for_its_dispatcher_and_each_server_names_its_open_port(caplog):
    import threading
    import time

    from tfopt.data.service import start_dispatcher, start_worker
    from tfopt.errors import TfoptError

    port = _free_port()
    started = {}
    waiter = threading.Thread(target=lambda: started.update(
        worker=start_worker(f"localhost:{port}", dispatcher_timeout=60)))
    with caplog.at_level("WARNING", logger="tfopt"):
        waiter.start()
        deadline = time.monotonic() + 30
        while "waiting for the tf.data service dispatcher" not in caplog.text:
            assert time.monotonic() < deadline and waiter.is_alive(), caplog.text
            time.sleep(0.05)
        dispatcher = start_dispatcher(port=port)  # the worker registers once it answers
        waiter.join(60)
    worker = started["worker"]
    try:
        assert not waiter.is_alive() and worker.address.startswith("grpc://localhost:")
        worker_port = int(worker.address.rsplit(":", 1)[1])
        text = caplog.text
        for role, open_port in (("dispatcher", port), ("worker", worker_port)):
            assert (f"the tf.data service {role} listens on port {open_port} of every network "
                    "interface of this machine, without authentication") in text
            assert f"--dport {open_port} ! -i lo -j DROP" in text
        assert f"the dispatcher at grpc://localhost:{port} answers" in text
        # a worker's address given as the dispatcher's: said at once, not waited on for ever
        with pytest.raises(TfoptError, match="is a gRPC server but not a tf.data service "
                                             "dispatcher"):
            start_worker(worker.address, dispatcher_timeout=30)
    finally:
        worker.stop()
        dispatcher.stop()


def test_serve_main_runs_a_server_process_that_stops_cleanly_on_sigterm():
    # what the benchmark's local servers run: the address first, the stop line on stderr
    process = subprocess.Popen(
        [sys.executable, "-c", "import sys; from tfopt.data.service import serve_main; "
         "serve_main(sys.argv[1:])", "dispatcher", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    try:
        address = process.stdout.readline().strip()
        assert address.startswith("grpc://localhost:")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert f"tfopt: dispatcher at {address} stopped" in process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_main_names_what_it_cannot_take():
    from tfopt.data.service import serve_main

    with pytest.raises(InvalidArgumentError, match="a worker needs --dispatcher ADDRESS"):
        serve_main(["worker", "--port", "0"])
    with pytest.raises(InvalidArgumentError, match=r"argv=\['dispatcher', '--port', 'x'\]"):
        serve_main(["dispatcher", "--port", "x"])


def test_no_library_module_imports_the_cli():
    import ast
    from pathlib import Path

    root = Path(tfopt.__file__).parent
    importers = []
    for path in root.rglob("*.py"):
        if path.is_relative_to(root / "cli") or path.name == "__main__.py":  # python -m tfopt
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name == "tfopt.cli" or name.startswith("tfopt.cli.") for name in names):
                importers.append(str(path.relative_to(root)))
    assert importers == []
