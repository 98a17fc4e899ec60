"""``tfopt data-service dispatcher|worker``: run tf.data service servers in the foreground.

TensorFlow is imported inside the command bodies, so ``tfopt --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tfopt.cli._common import TfoptGroup, needs_tensorflow

_BIND_NOTE = ("TensorFlow listens on all interfaces whatever --host says (it has no "
              "bind-address setting) and the service has no authentication: firewall the "
              "port on a machine reachable from untrusted networks.")


def _serve(server) -> None:
    """Print the address, serve until Ctrl-C or SIGTERM, then exit 0
    (:func:`tfopt.data.service.serve`)."""
    from tfopt.data.service import serve

    def announce():
        click.echo(server.address)
        sys.stdout.flush()  # a parent process reads this line before the server ever exits

    serve(server, on_stop=lambda message: click.echo(message, err=True), on_ready=announce)


@click.group("data-service", cls=TfoptGroup)
def data_service() -> None:
    """Run tf.data service servers that take over a pipeline's preprocessing.

    Start one dispatcher, then workers that register with it (on this machine or others),
    and build the pipeline with service="grpc://HOST:PORT" (the dispatcher's address).

    \b
    Example:
      tfopt data-service dispatcher --port 5050 &
      tfopt data-service worker --dispatcher grpc://localhost:5050 &
    """


@data_service.command("dispatcher")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port to listen on; 0 picks a free one.")
@click.option("--host", default="localhost", show_default=True,
              help="Address the dispatcher advertises (printed, for workers and pipelines). "
              + _BIND_NOTE)
@click.option("--work-dir", type=click.Path(file_okay=False), default=None,
              help="Folder for the dispatcher's journal, so that a restart recovers its jobs.")
def dispatcher(port, host, work_dir):
    """Run a dispatcher until Ctrl-C or SIGTERM.

    The first line on stdout is its address (grpc://HOST:PORT): give it to workers
    (--dispatcher) and to the pipeline (service=...).
    """
    if work_dir is not None:
        # TensorFlow reports a folder it cannot create as a RuntimeError with a traceback
        try:
            Path(work_dir).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise click.BadParameter(f"{work_dir!r}: cannot create the folder ({error.strerror})",
                                     param_hint="'--work-dir'") from None
    needs_tensorflow()
    from tfopt.data.service import start_dispatcher

    server = start_dispatcher(port=port, host=host, work_dir=work_dir)
    _serve(server)


@data_service.command("worker")
@click.option("--dispatcher", "dispatcher_address", required=True, metavar="grpc://HOST:PORT",
              help="The dispatcher's address (the first line the dispatcher prints).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port to listen on; 0 picks a free one.")
@click.option("--host", default="localhost", show_default=True,
              help="Address clients are told to fetch this worker's data from. " + _BIND_NOTE)
def worker(dispatcher_address, port, host):
    """Run a worker that registers with a dispatcher, until Ctrl-C or SIGTERM.

    The first line on stdout is the worker's own address.
    """
    needs_tensorflow()
    from tfopt.data.service import start_worker

    server = start_worker(dispatcher_address, port=port, host=host)
    _serve(server)


COMMANDS = [data_service]

if __name__ == "__main__":  # ``python -m tfopt.cli.service``, before the group is registered
    data_service(prog_name="tfopt data-service")
