"""``tfopt analyze FILE.py:FUNCTION``: the analysis of a user's own ``tf.data`` pipeline."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import click

from tfopt.cli._common import ByteSize, finite, json_option, needs_tensorflow, plot_path
from tfopt.errors import InvalidArgumentError


def load_dataset(target: str):
    """Call FUNCTION of FILE.py (imported by path, its folder on sys.path) for a dataset."""
    path_text, sep, function_name = target.rpartition(":")
    if not sep or not path_text or not function_name:
        raise InvalidArgumentError(f"{target!r}: expected FILE.py:FUNCTION")
    path = Path(path_text)
    if not path.is_file():
        raise InvalidArgumentError(f"{path_text!r}: no such file")
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"_tfopt_analyze_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise InvalidArgumentError(f"{path_text!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    # registered as an import would be: AutoGraph finds a lambda's source through
    # sys.modules (inspect.getmodule), and without it warns "could not transform ... Please
    # report this to the TensorFlow team" and runs the lambda unconverted
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's file: report it in one line
        sys.modules.pop(spec.name, None)
        raise InvalidArgumentError(
            f"{path_text}: importing it raised {type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}") from None
    function = getattr(module, function_name, None)
    if not callable(function):
        raise InvalidArgumentError(f"{path_text} has no function {function_name!r}")
    try:
        dataset = function()
    except Exception as error:
        raise InvalidArgumentError(
            f"{target}() raised {type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}") from None
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        raise InvalidArgumentError(
            f"{target}() returned {type(dataset).__name__}, not a tf.data.Dataset")
    return dataset


@click.command("analyze")
@click.argument("target", metavar="FILE.py:FUNCTION")
@click.option("--seconds", type=click.FloatRange(0, 3600, min_open=True), default=10.0,
              callback=finite, show_default=True, help="About how long the measurements take.")
@click.option("--cores", type=click.IntRange(min=1),
              help="Cores the model allocates [default: the cores this process may use].")
@click.option("--ram-budget", type=ByteSize(),
              help="Memory a cache or shuffle buffer may use, e.g. 2GB or 512MiB [default: half "
              "the memory available now].")
@click.option("--plot", type=click.Path(dir_okay=False), callback=plot_path,
              help="Chart each stage's rate against the ceiling and the measured rate: "
              "FILE.svg, or FILE.png with matplotlib (tfopt[plot]).")
@click.option("--apply", "apply_rewrites", is_flag=True,
              help="Also make the safe rewrites (tfopt.optimize) and measure the pipeline "
              "before and after them; --seconds then covers both.")
@click.option("-q", "--quiet", is_flag=True, help="No progress line on stderr.")
@json_option("Print the report as JSON on stdout.")
def analyze(target, seconds, cores, ram_budget, plot, apply_rewrites, quiet, as_json):
    """Find the slow stage of a tf.data pipeline and what would speed it up.

    FUNCTION, in FILE.py, takes no arguments and returns a tf.data.Dataset (the file's folder is
    importable). Each stage's prefix is measured for its share of --seconds.
    """
    needs_tensorflow()
    from tfopt.analysis.analyze import run

    dataset = load_dataset(target)

    def progress(done, total, what):
        if not quiet:
            click.echo(f"\ranalyze: measuring {done + 1}/{total}: {what}".ljust(72), err=True,
                       nl=False)

    optimization = None
    try:
        if apply_rewrites:
            from tfopt.analysis.optimize import optimize

            optimization = optimize(dataset, seconds=seconds, cores=cores, ram_budget=ram_budget,
                                    report=True, progress=progress)
            report = optimization.analysis
        else:
            report = run(dataset, seconds=seconds, cores=cores, ram_budget=ram_budget,
                         progress=progress)
    finally:
        if not quiet:
            click.echo("", err=True)
    if plot:
        report.plot(plot)
        if not quiet:
            click.echo(f"plot written to {plot}", err=True)
    if as_json:
        data = json.loads(report.to_json())
        if optimization is not None:
            data["optimization"] = optimization.to_dict()
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(report.describe())
        if optimization is not None:
            click.echo("\nrewrites (tfopt.optimize):\n" + optimization.describe())


COMMANDS = [analyze]
