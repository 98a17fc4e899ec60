"""``tfopt launch``: run a training script as N local workers of one TF_CONFIG cluster.

This command never imports TensorFlow: it only starts processes (the workers import it).
"""

from __future__ import annotations

import json

import click

from tfopt.distribute.cluster import cluster_tf_configs
from tfopt.distribute.launch import DEFAULT_ATTEMPTS, DEFAULT_GRACE_SECONDS, launch_workers


@click.command("launch", context_settings={
    # everything after the first argument belongs to the worker command, options included:
    # ``tfopt launch -n 2 python train.py --epochs 3`` needs no ``--``
    "ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-n", "--workers", type=click.IntRange(min=1), metavar="N",
              help="Worker processes to start (or, with --print-tf-config alone, localhost "
              "ports to print).")
@click.option("--hosts", metavar="HOST:PORT,...",
              help="The workers of a real cluster, for --print-tf-config.")
@click.option("--print-tf-config", "print_only", is_flag=True,
              help="Print each worker's TF_CONFIG (one JSON object per line) and exit.")
@click.option("--grace", type=click.FloatRange(min=0), default=DEFAULT_GRACE_SECONDS,
              show_default=True,
              help="Seconds a stopped worker gets to exit before it is killed.")
@click.option("--attempts", type=click.IntRange(min=1), default=DEFAULT_ATTEMPTS,
              show_default=True, help="Launches tried when a worker's port is taken.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def launch(workers, hosts, print_only, grace, attempts, command):
    """Run COMMAND as N local workers, each with its own TF_CONFIG.

    Every worker gets TF_CONFIG naming all N workers on free localhost ports and its own task
    index, as tf.distribute.MultiWorkerMirroredStrategy expects. Output lines are prefixed with
    "[worker I]". The first worker to fail stops the others, and its exit code is the
    launcher's; Ctrl-C stops every worker (exit code 130). SIGTERM reaches every worker: a
    training under tfopt.Run or backup_callbacks then stops every worker at one step, its
    backup written, and the launcher exits 75 (run the same command again to resume). Each worker runs in its own process
    group, stopped whole when the job ends, so nothing a worker started outlives the launcher.
    More workers than this machine can start (open files, processes, free ports) are refused
    before any starts, naming the limit.

    Workers also get TF_CPP_MIN_LOG_LEVEL=1 unless it is set, and TensorFlow's C++ INFO lines
    that they print before TensorFlow reads it (oneDNN, the CUDA stub) are held back at that
    level (INFO at 1, INFO and WARNING at 2 or more); errors and tracebacks always show.
    TF_CPP_MIN_LOG_LEVEL=0 tfopt launch ..., or tfopt -vv launch ..., shows every line.

    \b
    Examples:
      tfopt launch -n 2 python train.py --epochs 3
      tfopt launch --print-tf-config --hosts node1:2222,node2:2222
    """
    if print_only:
        if command:
            raise click.UsageError("--print-tf-config starts nothing: drop the command")
        if hosts is None and workers is None:
            raise click.UsageError("--print-tf-config needs -n N or --hosts HOST:PORT,...")
        for config in cluster_tf_configs(workers=workers, hosts=hosts):
            click.echo(json.dumps(config))
        return
    if hosts is not None:
        raise click.UsageError(
            "--hosts is for --print-tf-config: launch starts local workers only (run the "
            "printed TF_CONFIG on each host)")
    if not command:
        raise click.UsageError("give the command to run, e.g. tfopt launch -n 2 python train.py")
    if command[0] == "--":
        command = command[1:]
    if workers is None:
        raise click.UsageError("give the number of workers, e.g. tfopt launch -n 2 python "
                               "train.py")

    def on_line(worker: int, stream: str, line: str) -> None:
        click.echo(f"[worker {worker}] {line}", err=stream == "stderr")

    verbose = (click.get_current_context().find_root().obj or {}).get("verbose", 0)
    result = launch_workers(list(command), workers, on_line=on_line, grace_seconds=grace,
                            attempts=attempts, quiet_tensorflow=verbose < 2)
    if result.exit_code:
        click.echo(f"tfopt launch: {result.describe()}", err=True)
    click.get_current_context().exit(result.exit_code)


COMMANDS = [launch]
