"""``tfopt profile SCRIPT.py [ARGS...]``: what holds back a Keras training script, measured."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from tfopt.cli._common import finite, json_option, needs_tensorflow


@click.command("profile", context_settings={"ignore_unknown_options": True,
                                            "allow_interspersed_args": False})
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--steps", type=click.IntRange(1, 100_000), default=60, show_default=True,
              help="Steps to time after the warm-up.")
@click.option("--seconds", type=click.FloatRange(0, 3600, min_open=True), default=20.0,
              callback=finite, show_default=True,
              help="At most this long timing them (whichever ends first).")
@click.option("--fit", "fit_number", type=click.IntRange(min=1), default=1, show_default=True,
              help="Which Model.fit call of the script to profile.")
@click.option("--try", "trial", is_flag=True,
              help="Measure the changes (precision, XLA, steps per call on copies of the model; "
              "the input as tfopt rewrites it) alternating with the script's own, "
              "instead of estimating them.")
@json_option("Print the report as one JSON object on stdout (docs/profile.md has the schema).")
def profile(script, args, steps, seconds, fit_number, trial, as_json):
    """Run SCRIPT.py unmodified (as `python SCRIPT.py ARGS` would), time its first
    Model.fit for a bounded number of steps, stop the script there, and say what holds the
    training back: input or compute, the model as compiled, and what to change.

    tfopt's options come before SCRIPT; everything after it goes to the script. The script's
    own output goes to stderr, so that stdout holds only the report.
    """
    needs_tensorflow()
    from tfopt.profile.profile import profile_script

    with contextlib.redirect_stdout(sys.stderr):
        report = profile_script(script, list(args), steps=steps, seconds=seconds,
                                fit=fit_number, trial=trial)
    if report.status == "failed":
        if as_json:
            click.echo(report.to_json())
        click.echo(f"tfopt profile: {script} failed before its fit call:\n{report.message}",
                   err=True)
        _exit_now(1)
    click.echo(report.to_json() if as_json else report.describe())
    _exit_now(0)


def _exit_now(status: int) -> None:
    """End the process without Python's finalization. The profiled script's objects (and the
    trials') still hold tf.data iterators; one whose map runs Python can be mid-call at exit,
    and once finalization has begun that call never gets the GIL back, so the iterator's
    destructor waits for it forever (seen with a py_function decoder under --try). The report
    is written by then: flush it and go."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


COMMANDS = [profile]
