"""``tfopt data-service dispatcher|worker``: run tf.data service servers in the foreground.

TensorFlow is imported inside the command bodies, so ``tfopt --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tfopt.cli._common import TfoptGroup, finite, needs_tensorflow

_BIND_NOTE = ("TensorFlow listens on all interfaces whatever --host says (it has no "
              "bind-address setting) and the service has no authentication: anyone who "
              "reaches the port can run any dataset graph here. Firewall the port on a machine "
              "reachable from untrusted networks (the server warns, naming it, as it starts).")


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
    from tfopt.data.service import check_host, start_dispatcher

    check_host(host)  # before TensorFlow's import: 'bad host!' would be printed as the address
    needs_tensorflow()
    server = start_dispatcher(port=port, host=host, work_dir=work_dir)
    _serve(server)


@data_service.command("worker")
@click.option("--dispatcher", "dispatcher_address", required=True, metavar="grpc://HOST:PORT",
              help="The dispatcher's address (the first line the dispatcher prints).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port to listen on; 0 picks a free one.")
@click.option("--host", default="localhost", show_default=True,
              help="Address clients are told to fetch this worker's data from. " + _BIND_NOTE)
@click.option("--dispatcher-timeout", type=click.FloatRange(0, min_open=True), default=60.0,
              callback=finite, show_default=True, metavar="SECONDS",
              help="Seconds to wait for the dispatcher to answer (a line on stderr says that "
              "the worker waits), then stop with an error.")
def worker(dispatcher_address, port, host, dispatcher_timeout):
    """Run a worker that registers with a dispatcher, until Ctrl-C or SIGTERM.

    The first line on stdout is the worker's own address.
    """
    from tfopt.data.service import check_host, parse_address, start_worker, wait_for_dispatcher

    # checked, and the dispatcher waited for, before TensorFlow's import (seconds): a wrong
    # address or a dispatcher not up yet is said at once
    check_host(host)
    wait_for_dispatcher(parse_address(dispatcher_address, "dispatcher"), dispatcher_timeout)
    needs_tensorflow()
    server = start_worker(dispatcher_address, port=port, host=host,
                          dispatcher_timeout=dispatcher_timeout)
    _serve(server)


COMMANDS = [data_service]

if __name__ == "__main__":  # ``python -m tfopt.cli.service``, before the group is registered
    data_service(prog_name="tfopt data-service")
