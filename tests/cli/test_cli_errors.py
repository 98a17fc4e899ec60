"""A user's mistakes on the command line: one line naming what is wrong, the right exit code.

DESIGN.md: a TfoptError is one line on stderr and exit code 1, a usage error exit code 2, never
a traceback, and nothing already written is lost or left half-written. The runner is called
with catch_exceptions=False, so an exception that escapes the CLI (a traceback for a user)
fails the test instead of becoming an exit code.
"""

from __future__ import annotations

import json
import shutil
import struct

import pytest
from click.testing import CliRunner
from conftest import make_image_folder, one_error_line, small_image_dataset

import tfopt
from tfopt.cli import cli
from tfopt.errors import InvalidArgumentError
from tfopt.records.convert.options import ConvertOptions


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return small_image_dataset(tmp_path_factory.mktemp("cli_errors"), per_class=2,
                               out="shards")


@pytest.fixture
def copy_of(dataset, tmp_path):
    def copy():
        target = tmp_path / "copy"
        shutil.copytree(dataset, target)
        return target
    return copy


# -- manifests edited by hand or written by something else ------------------------------------


def _edit(manifest_path, change) -> None:
    data = json.loads(manifest_path.read_text())
    change(data)
    manifest_path.write_text(json.dumps(data))


@pytest.mark.parametrize("command", ["inspect", "verify"])
@pytest.mark.parametrize("change, expected", [
    (lambda d: d.update(splits=[1]), "splits=[1], expected a JSON object"),
    (lambda d: d.update(format_version="1"), "format_version='1', expected an integer"),
    (lambda d: d.pop("features"), "missing key 'features'"),
])
def test_a_manifest_with_a_wrong_or_missing_key_is_named(copy_of, command, change, expected):
    folder = copy_of()
    _edit(folder / "manifest.json", change)
    line = one_error_line(run(command, folder))
    assert str(folder / "manifest.json") in line and expected in line


def test_a_manifest_that_is_not_a_json_object(copy_of):
    folder = copy_of()
    (folder / "manifest.json").write_text("[1, 2]")
    assert "expected a JSON object, got list" in one_error_line(run("inspect", folder))


def test_verify_accepts_the_manifest_file_itself(dataset):
    result = run("verify", dataset / "manifest.json")
    assert result.exit_code == 0, result.output
    assert "OK: every check passed" in result.output


# -- verify: files cut where TensorFlow's reader sees no error ----------------------------------


def _cut_inside_a_header(shard, keep_records: int, extra: int) -> None:
    data = shard.read_bytes()
    end = 0
    for _ in range(keep_records):
        end += struct.unpack("<Q", data[end:end + 8])[0] + 16
    shard.write_bytes(data[:end + extra])


def test_verify_finds_a_shard_cut_inside_a_record_header(dataset, tmp_path):
    shard = tmp_path / "cut.tfrecord"
    shutil.copy(sorted(dataset.glob("train-*"))[0], shard)
    _cut_inside_a_header(shard, keep_records=2, extra=5)  # under 12 bytes: read as the end
    result = run("verify", shard, "--json")
    assert result.exit_code == 1
    [problem] = json.loads(result.output)["problems"]
    assert problem["kind"] == "corrupt" and problem["record"] == 2
    assert "5 byte(s) after the last whole record" in problem["detail"]


def test_verify_refuses_a_text_file(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hi\n")
    result = run("verify", text)
    assert result.exit_code == 1 and "not a TFRecord file" in result.output


# -- option values -------------------------------------------------------------------------------


@pytest.mark.parametrize("args, option", [
    (["inspect", "{data}", "--sample", "0"], "--sample"),
    (["inspect", "{data}", "--sample", "-5"], "--sample"),
    (["inspect", "{data}", "--sample", str(1 << 63)], "--sample"),  # beyond take()'s int64
    (["verify", "{data}", "--workers", "0"], "--workers"),
    (["convert", "{images}", "{out}", "--seed", "-1"], "--seed"),
    (["convert", "{images}", "{out}", "--workers", "-1"], "--workers"),
    (["demo-data", "{out}", "--seed", "-1"], "--seed"),
    (["demo-data", "{out}", "--workers", "0"], "--workers"),
])
def test_out_of_range_option_values_are_usage_errors(dataset, tmp_path, args, option):
    values = {"data": dataset, "images": tmp_path, "out": tmp_path / "out"}
    result = run(*[arg.format(**values) for arg in args])
    assert result.exit_code == 2 and option in result.stderr
    assert not (tmp_path / "out").exists()


def test_library_checks_the_same_values(dataset, tmp_path):
    with pytest.raises(InvalidArgumentError, match="sample=0"):
        tfopt.inspect(dataset, sample=0)
    with pytest.raises(InvalidArgumentError, match="workers=0"):
        tfopt.verify(dataset, workers=0)
    with pytest.raises(InvalidArgumentError, match="seed=-1"):
        ConvertOptions(seed=-1)
    with pytest.raises(InvalidArgumentError, match="seed=-1"):
        tfopt.make_demo_data(tmp_path / "demo", count=10, seed=-1)
    assert not (tmp_path / "demo").exists()


# -- output folders that cannot be made ----------------------------------------------------------


@pytest.mark.parametrize("command", ["convert", "demo-data"])
def test_an_output_folder_under_a_file(tmp_path, command):
    images = make_image_folder(tmp_path / "images", per_class=1)
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a folder")
    args = ([images, blocker / "out", "--workers", 1] if command == "convert"
            else [blocker / "out", "--count", 10, "--min-size", 16, "--max-size", 16])
    line = one_error_line(run(command, *args))
    assert str(blocker / "out") in line and "cannot create the output folder" in line
    assert blocker.read_text() == "not a folder"


# -- sources that do not fit --from ------------------------------------------------------------


def test_from_names_a_kind_that_does_not_fit_the_path(tmp_path):
    images = make_image_folder(tmp_path / "images", per_class=1)
    table = tmp_path / "table.csv"
    table.write_text("a,label\n1,0\n")
    out = tmp_path / "out"
    line = one_error_line(run("convert", images, out, "--from", "csv"))
    assert str(images) in line and "a CSV source is a .csv or .tsv file" in line
    line = one_error_line(run("convert", table, out, "--from", "images"))
    assert str(table) in line and "an image source is a folder" in line
    line = one_error_line(run("convert", tmp_path / "missing", out, "--from", "numpy"))
    assert "missing: does not exist" in line
    assert not out.exists()


def test_a_csv_integer_beyond_int64_is_named_with_its_line_and_column(tmp_path):
    table = tmp_path / "ids.csv"
    table.write_text("user_id,label\n1,0\n99999999999999999999999,1\n")
    line = one_error_line(run("convert", table, tmp_path / "out", "--workers", 1))
    assert "line 3: column 'user_id' holds 99999999999999999999999, outside int64" in line
    assert not (tmp_path / "out").exists()


# -- bench, tune, data-service: bad values refused before any work --------------------------


@pytest.fixture
def no_work(monkeypatch):
    """Make every slow step fail the test: a bad value must be refused before it starts."""
    import tfopt.bench.demo
    import tfopt.bench.pipeline
    import tfopt.bench.train
    import tfopt.tune.model
    import tfopt.tune.search
    import tfopt.tune.sweep

    def started(*args, **kwargs):
        raise AssertionError("work started before the bad value was refused")

    for module, name in [(tfopt.bench.pipeline, "run_pipeline_bench"),
                         (tfopt.bench.demo, "make_demo_shards"),
                         (tfopt.bench.train, "run_train_bench"),
                         (tfopt.tune.model, "load_model_spec"),
                         (tfopt.tune.search, "find_batch_size"),
                         (tfopt.tune.sweep, "throughput_sweep")]:
        monkeypatch.setattr(module, name, started)


@pytest.mark.parametrize("args, option", [
    (["bench", "pipeline", "{data}", "--max-batches", "0"], "--max-batches"),
    (["bench", "pipeline", "{data}", "--max-batches", "-3"], "--max-batches"),
    (["bench", "pipeline", "{data}", "--batch-size", "0"], "--batch-size"),
    (["bench", "train", "--image-size", "8"], "--image-size"),
    (["bench", "train", "--epochs", "0"], "--epochs"),
    (["bench", "train", "--plot", "{tmp}/chart.txt"], "--plot"),
    (["bench", "train", "--plot", "{tmp}/no-such-folder/chart.svg"], "--plot"),
    (["tune", "batch-size", "--image-size", "0"], "--image-size"),
    (["tune", "batch-size", "--image-size", "4"], "--image-size"),
    (["tune", "batch-size", "--max", "0"], "--max"),
    (["tune", "batch-size", "--margin", "0"], "--margin"),
    (["tune", "batch-size", "--sweep", "8", "--steps", "0"], "--steps"),
    (["tune", "batch-size", "--sweep", "8", "--tolerance", "1.5"], "--tolerance"),
    (["tune", "batch-size", "--sweep", "8", "--tolerance", "nan"], "--tolerance"),
    (["tune", "batch-size", "--margin", "nan"], "--margin"),
    (["data-service", "dispatcher", "--work-dir", "{tmp}/file.txt/journal"], "--work-dir"),
])
def test_bad_values_are_usage_errors_before_any_work(no_work, dataset, tmp_path, args, option):
    (tmp_path / "file.txt").write_text("not a folder")
    result = run(*[arg.format(data=dataset, tmp=tmp_path) for arg in args])
    assert result.exit_code == 2, result.output
    assert option in result.stderr


def test_tune_checks_data_before_the_finder(no_work, dataset, tmp_path):
    line = one_error_line(run("tune", "batch-size", "--data", tmp_path / "missing",
                              "--sweep", "8"))
    assert str(tmp_path / "missing") in line and "does not exist" in line
    # shards without their manifest, and one whose name says no split: no reader splits them
    bare = tmp_path / "bare"
    shutil.copytree(dataset, bare, ignore=shutil.ignore_patterns("manifest.json"))
    shutil.copy(next(bare.glob("train-*")), bare / "extra.tfrecord")
    line = one_error_line(run("tune", "batch-size", "--data", bare, "--sweep", "8"))
    assert str(bare) in line and "no manifest.json" in line and "name a split" in line


def test_a_data_service_port_in_use_is_one_line(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # noqa: S104 - where gRPC binds
        taken.listen()
        port = taken.getsockname()[1]
        # a real process: a server that did start would serve until killed (the timeout)
        done = subprocess.run([sys.executable, "-m", "tfopt", "data-service", "dispatcher",
                               "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"tfopt: error: the tf.data service dispatcher did not start on port {port}" in done.stderr


def test_bench_pipeline_checks_tfopt_source_before_the_runs(no_work, dataset, tmp_path):
    line = one_error_line(run("bench", "pipeline", dataset, "--tfopt-source",
                              tmp_path / "missing"))
    assert str(tmp_path / "missing") in line and "does not exist" in line
    line = one_error_line(run("bench", "pipeline", dataset, "--tfopt-source", dataset,
                              "--split", "validation"))  # the split the others read is absent
    assert "validation" in line


def test_interrupted_demo_data_leaves_no_folder_that_looks_whole(tmp_path, monkeypatch):
    import tfopt.records.demo_data as demo_data

    write_images = demo_data._write_images
    calls = []

    def write_then_interrupt(*args):
        calls.append(args)
        if len(calls) == 2:  # after the first 50 images are on disk
            raise KeyboardInterrupt
        return write_images(*args)

    monkeypatch.setattr(demo_data, "_write_images", write_then_interrupt)
    result = run("demo-data", tmp_path / "images", "--count", 100, "--workers", 1,
                 "--min-size", 16, "--max-size", 16)
    assert result.exit_code == 1 and len(calls) == 2  # click: "Aborted!"
    assert list(tmp_path.iterdir()) == []  # neither images/ nor its temporary folder


# -- monitor's log files -------------------------------------------------------------------------


@pytest.fixture
def fake_gpu(monkeypatch):
    import sys

    from tfopt.gpu.testing import FakeGpu, make_fake_nvml

    monkeypatch.setitem(sys.modules, "pynvml", make_fake_nvml([FakeGpu()]))


@pytest.mark.parametrize("option", ["--csv", "--jsonl"])
def test_monitor_log_in_a_missing_folder(fake_gpu, tmp_path, option):
    log = tmp_path / "no-such-folder" / "gpu.log"
    line = one_error_line(run("monitor", "--count", 1, option, log))
    assert f"{option} {log}: cannot open it for appending (No such file or directory)" in line


def test_monitor_csv_that_is_not_text(fake_gpu, tmp_path):
    log = tmp_path / "gpu.csv"
    log.write_bytes(b"\x00\x97\xff binary")
    line = one_error_line(run("monitor", "--count", 1, "--csv", log))
    assert "exists and is not a CSV file" in line
    assert log.read_bytes() == b"\x00\x97\xff binary"  # untouched


def test_data_service_run_on_its_own_reports_errors_in_one_line():
    # python -m tfopt.cli.service runs the group alone (the benchmark's servers call serve_main)
    from tfopt.cli.service import data_service

    result = CliRunner().invoke(data_service, ["worker", "--dispatcher", "garbage"],
                                catch_exceptions=False)
    line = one_error_line(result)
    assert "dispatcher='garbage'" in line
