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
    builder = PipelineBuilder(indexed_dataset, batch_size=4, image_size=16, service=service)
    assert any("distributed_epoch" in note for note in builder.choices.notes)
    assert "tf.data service" in builder.choices.describe()
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
        with pytest.raises(TfoptError, match=f"worker did not start on port {port}"):
            start_worker("grpc://localhost:1", port=port)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(InvalidArgumentError, match="work_dir=.*a_file/journal.*cannot create"):
        start_dispatcher(work_dir=str(tmp_path / "a_file" / "journal"))


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
