"""The dataset commands through click's runner, and the CLI's start-up without TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner
from conftest import make_image_folder

from tfopt.cli import cli


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_demo_data_convert_inspect_verify(tmp_path):
    images, out = tmp_path / "images", tmp_path / "out"
    made = run("demo-data", images, "--count", 40, "--classes", 4, "--min-size", 32,
               "--max-size", 40, "--workers", 1, "--json")
    assert made.exit_code == 0, made.output
    assert json.loads(made.output)["images"] == 40
    converted = run("convert", images, out, "--val-fraction", 0.25, "--workers", 1,
                    "--shard-size", "20KB", "-q")
    assert converted.exit_code == 0, converted.output
    assert "train" in converted.output and "validation" in converted.output
    assert "records/s" in converted.output
    inspected = run("inspect", out, "--json")
    data = json.loads(inspected.output)
    assert data["num_records"] == 40 and data["image_key"] == "image/encoded"
    assert data["class_names"] == ["circle", "ring", "square", "triangle"]  # sorted
    verified = run("verify", out)
    assert verified.exit_code == 0 and "OK" in verified.output
    shard = sorted(out.glob("train-*"))[0]
    shard.write_bytes(shard.read_bytes()[:-5])
    failed = run("verify", out, "--json")
    assert failed.exit_code == 1
    assert {p["kind"] for p in json.loads(failed.output)["problems"]} == {"size", "checksum", "corrupt"}


def test_convert_json_summary(tmp_path):
    result = run("convert", make_image_folder(tmp_path / "images"), tmp_path / "out",
                 "--workers", 1, "--shards", 2, "--json")
    summary = json.loads(result.output)
    assert summary["records"] == 21
    assert summary["splits"]["train"] == {"records": 21, "shards": 2,
                                          "bytes": summary["bytes"]}


def test_bad_input_is_one_line_and_exit_code_1(tmp_path):
    images = make_image_folder(tmp_path / "images")
    (images / "cat" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 cut")
    result = CliRunner().invoke(cli, ["convert", str(images), str(tmp_path / "out"), "--workers", "1"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("tfopt: error: ") and "broken.jpg" in lines[-1]
    assert "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_usage_errors_exit_2(tmp_path):
    result = CliRunner().invoke(cli, ["convert", "a", "b", "--compression", "zip"])
    assert result.exit_code == 2 and "zip" in result.output
    result = CliRunner().invoke(cli, ["convert", "a", "b", "--shard-size", "lots"])
    assert result.exit_code == 2 and "not a size" in result.output


def test_help_lists_every_command_without_importing_tensorflow():
    code = ("import sys; from click.testing import CliRunner; from tfopt.cli import cli; "
            "r = CliRunner().invoke(cli, ['--help']); print(r.output); "
            "print('TF-IMPORTED' if 'tensorflow' in sys.modules else 'TF-ABSENT')")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout
    for command in ("convert", "inspect", "verify", "demo-data", "monitor", "doctor"):
        assert f"  {command} " in output
    assert "TF-ABSENT" in output


def test_python_dash_m_tfopt_runs():
    result = subprocess.run([sys.executable, "-m", "tfopt", "--version"], capture_output=True,
                            text=True, check=True)
    assert "tfopt, version" in result.stdout


def test_skipped_items_are_named_and_the_manifest_lists_them_all(tmp_path):
    images = make_image_folder(tmp_path / "images", per_class=2)
    for index in range(7):
        (images / "cat" / f"broken-{index}.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    result = CliRunner().invoke(cli, ["convert", str(images), str(tmp_path / "out"),
                                      "--on-error", "skip", "--workers", "1", "-q"])
    assert result.exit_code == 0, result.output
    named = [line for line in result.stderr.splitlines() if line.startswith("skipped: ")]
    assert len(named) == 6  # five items, then where all of them are
    assert "broken-0.jpg" in named[0]
    assert named[-1].startswith("skipped: the other 2 and these are listed") and (
        "manifest.json" in named[-1])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert len(manifest["skipped"]) == 7


def test_inspect_says_when_it_leaves_out_the_per_file_table(tmp_path):
    from conftest import small_image_dataset

    out = small_image_dataset(tmp_path, per_class=8, shards=24)
    shown = run("inspect", out)
    assert shown.exit_code == 0, shown.output
    files = len(list(out.glob("train-*")))
    assert files > 20
    assert f"{files:,} files: the per-file table is shown for up to 20; --json lists every " \
        "file" in shown.output


def test_log_lines_name_their_source_so_tensorflows_are_not_taken_for_tfopts():
    import logging

    from tfopt.cli import LogFormatter

    def line(name, message):
        record = logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)
        return LogFormatter().format(record)

    assert line("tfopt", "interrupted") == "tfopt: WARNING: interrupted"
    assert line("tfopt.data", "x") == "tfopt: WARNING: x"
    assert line("tensorflow", "5 out of the last 5 calls triggered tf.function retracing") == (
        "tensorflow: WARNING: 5 out of the last 5 calls triggered tf.function retracing")
    assert line("tfoptional", "y") == "tfoptional: WARNING: y"


def test_the_cli_logs_a_libraries_warning_under_its_name():
    # the group's callback sets logging up, on the real stderr
    code = ("import logging; from tfopt.cli import cli; "
            "ctx = cli.make_context('tfopt', ['-v', 'doctor']); "
            "ctx.invoke(cli.callback, verbose=1); "
            "logging.getLogger('tensorflow').warning('retracing'); "
            "logging.getLogger('tfopt').warning('ours')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stderr.splitlines()[-2:] == ["tensorflow: WARNING: retracing",
                                             "tfopt: WARNING: ours"]
