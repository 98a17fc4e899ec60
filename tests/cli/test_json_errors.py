"""--json on a failure: stdout holds {"error": ..., "exit_code": N} as well as the one line on
stderr, for every command that has --json (cli/_common.json_option and TfoptGroup)."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from tfopt.cli import cli
from tfopt.cli._common import json_option


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def json_error(result, exit_code: int = 1) -> str:
    """The error of a failed --json run: the JSON object on stdout, beside stderr's line."""
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    data = json.loads(result.stdout)
    assert data == {"error": data["error"], "exit_code": exit_code}
    return data["error"]


@pytest.mark.parametrize("command", [
    ["convert", "{missing}", "{tmp}/out"],
    ["verify", "{missing}"],
    ["inspect", "{missing}"],
    ["analyze", "{missing}.py:make"],
])
def test_a_failed_command_prints_the_error_as_json_on_stdout_too(tmp_path, command):
    args = [part.format(missing=tmp_path / "missing", tmp=tmp_path) for part in command]
    result = run(*args, "--json")
    error = json_error(result)
    assert str(tmp_path / "missing") in error
    assert result.stderr.strip().splitlines() == [f"tfopt: error: {error}"]
    # without --json stdout stays empty: the object is for callers that asked for JSON
    plain = run(*args)
    assert plain.exit_code == 1 and plain.stdout == "" and plain.stderr == result.stderr


def test_the_json_flag_anywhere_on_the_line_counts(tmp_path):
    # read before the other options (eager), whatever their order
    error = json_error(run("verify", "--json", tmp_path / "missing"))
    assert str(tmp_path / "missing") in error


def test_a_usage_error_after_json_was_read_gets_a_json_object_with_exit_code_2():
    result = run("tune", "batch-size", "--json", "--no-find")
    error = json_error(result, exit_code=2)
    assert "--no-find needs --sweep" in error
    assert "--no-find needs --sweep" in result.stderr


def test_a_convert_error_with_json_leaves_nothing_written(tmp_path):
    src = tmp_path / "table.csv"
    src.write_text("x,label\n1,0\n2,1\n")
    result = run("convert", src, tmp_path / "out", "--label", "nosuch", "--workers", "1",
                 "--json")
    assert json_error(result).startswith("label 'nosuch': no such column")
    assert not (tmp_path / "out").exists()


def _commands(group: click.Group, prefix=()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


def test_every_json_flag_is_the_shared_option():
    # a --json declared by hand would not be noted, and its errors would leave stdout empty
    shared = next(param for param in json_option()(lambda as_json: None).__click_params__)
    with_json = {}
    for name, command in _commands(cli):
        for param in command.params:
            if "--json" in getattr(param, "opts", []):
                with_json[name] = param
    assert {"convert", "verify", "inspect", "analyze", "doctor", "bench pipeline",
            "tune batch-size"} <= set(with_json)
    for name, param in with_json.items():
        assert param.callback is shared.callback and param.is_eager, name
