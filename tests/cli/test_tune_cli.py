"""``tfopt tune batch-size`` through click's runner, invoking the ``tune`` group directly."""

from __future__ import annotations

import json
import textwrap

import pytest
from click.testing import CliRunner
from conftest import make_demo_shards

from tfopt.cli.tune import COMMANDS, tune
from tfopt.errors import InvalidArgumentError


@pytest.fixture(autouse=True)
def _tensorflow_first(tf):
    # TensorFlow imported before the command runs: the command then leaves the allocator
    # setting (an environment variable read at start-up) alone for the rest of the session
    return tf


def run(*args):
    return CliRunner().invoke(tune, ["batch-size", *map(str, args)], catch_exceptions=False)


def test_builtin_mlp_json_with_a_sweep():
    result = run("--builtin", "mlp", "--image-size", 16, "--max", 64, "--sweep", "16,32,128",
                 "--steps", 2, "--json", "-q")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["model"].startswith("built-in mlp (16x16x3")
    assert data["data"].startswith("synthetic")
    finder = data["finder"]
    assert finder["largest_fit"] == finder["recommended"] == 64 and finder["capped"]
    assert [t["batch_size"] for t in finder["trials"]] == [1, 2, 4, 8, 16, 32, 64]
    assert [p["batch_size"] for p in data["sweep"]["points"]] == [16, 32]
    assert data["sweep"]["chosen"] in (16, 32) and data["sweep"]["synthetic"]
    assert data["notes"] == ["not swept, larger than the largest batch that fits: 128"]


def test_text_output_with_a_memory_budget_and_progress_on_stderr():
    # click 8.2+ keeps stderr apart in result.stderr
    result = run("--builtin", "mlp", "--image-size", 16, "--max", 4096, "--memory-budget", "3MB")
    assert result.exit_code == 0, result.output
    assert "largest batch that fits:" in result.stdout
    assert "recommended batch size:" in result.stdout
    assert "memory budget 3.0 MB" in result.stdout
    assert "synthetic" in result.stdout
    assert "batch 1: fits" in result.stderr


def test_user_model_spec(tmp_path, monkeypatch):
    (tmp_path / "my_models.py").write_text(textwrap.dedent("""
        from tfopt.models import compiled_model

        def small():
            return compiled_model("mlp", image_size=8, classes=4, size="tiny")
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run("--model", "my_models:small", "--max", 16, "--json", "-q")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["model"] == "my_models:small" and data["finder"]["largest_fit"] == 16


def test_bad_model_spec_raises_an_error_naming_it():
    # the main group turns TfoptError into "tfopt: error: ..." and exit code 1; the group alone
    # lets it through
    result = CliRunner().invoke(tune, ["batch-size", "--model", "no_such_module_xyz:build"])
    assert result.exit_code == 1
    assert isinstance(result.exception, InvalidArgumentError)
    assert "no_such_module_xyz:build" in str(result.exception)
    assert "\n" not in str(result.exception)


@pytest.mark.parametrize("args", [
    ["--model", "a:b", "--builtin", "mlp"],
    ["--sweep", "32,x"],
    ["--sweep", "0"],
    ["--no-find"],
])
def test_usage_errors_exit_2(args):
    result = CliRunner().invoke(tune, ["batch-size", *args])
    assert result.exit_code == 2, result.output


def test_sweep_on_shards(tmp_path):
    shards = make_demo_shards(tmp_path, count=24, classes=3, min_size=32, max_size=40)
    result = run("--builtin", "mlp", "--image-size", 16, "--data", shards,
                 "--no-find", "--sweep", "8", "--steps", 2, "--json", "-q")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["data"] == str(tmp_path / "shards") and data["finder"] is None
    assert "3 classes" in data["model"]
    assert not data["sweep"]["synthetic"] and data["sweep"]["chosen"] == 8
    # a few steps per size would only fill the pipeline's cache in part: it goes without
    assert any("without tfopt's cache" in note for note in data["notes"])


def test_module_exposes_the_group():
    assert COMMANDS == [tune] and "batch-size" in tune.commands


def test_a_bad_model_spec_is_one_line_and_exit_code_1_through_the_main_cli():
    from tfopt.cli import cli

    result = CliRunner().invoke(cli, ["tune", "batch-size", "--model", "no_such_module_x:build"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith("tfopt: error: ")
    assert "no_such_module_x" in result.output
