"""The ``tfopt`` command line: a thin click layer over the library.

Each command group lives in its own module (``records``, ``gpu``, ...) and exposes ``COMMANDS``.
Command modules import TensorFlow only inside the command bodies, so ``tfopt --help`` answers
without it. Errors the user can cause (:class:`tfopt.TfoptError`) become one line on stderr and
exit code 1 in one place, ``_common.TfoptGroup``; click's usage errors keep exit code 2.
"""

from __future__ import annotations

import importlib
import logging
import signal
import sys
import threading
import time

import click

from tfopt._tf import keep_python_stderr
from tfopt._version import __version__
from tfopt.cli._common import TfoptGroup

_COMMAND_MODULES = ("tfopt.cli.records", "tfopt.cli.bench", "tfopt.cli.tune", "tfopt.cli.launch",
                    "tfopt.cli.service", "tfopt.cli.gpu", "tfopt.cli.analyze",
                   "tfopt.cli.backups", "tfopt.cli.profile")


@click.group(cls=TfoptGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100, "terminal_width": 100})
@click.version_option(__version__, prog_name="tfopt")
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug) on stderr.")
def cli(verbose: int) -> None:
    """tfopt: make TensorFlow/Keras training use the hardware it runs on."""
    ctx = click.get_current_context()
    ctx.obj = {"verbose": verbose}
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    keep_python_stderr()  # before the handler takes sys.stderr
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogFormatter())
    logging.basicConfig(level=level, handlers=[handler])
    logging.getLogger("tfopt").setLevel(level)


class LogFormatter(logging.Formatter):
    """tfopt's own messages as ``tfopt: LEVEL: message``; other libraries' under their own
    name (``tensorflow: WARNING: ...``), so that TensorFlow's retracing warning, say, is not
    taken for tfopt's."""

    def format(self, record: logging.LogRecord) -> str:
        ours = record.name == "tfopt" or record.name.startswith("tfopt.")
        source = "tfopt" if ours else record.name
        return f"{source}: {record.levelname}: {record.getMessage()}" + (
            "\n" + self.formatException(record.exc_info) if record.exc_info else "")


for _module_name in _COMMAND_MODULES:
    for _command in importlib.import_module(_module_name).COMMANDS:
        cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    try:
        cli(prog_name="tfopt")
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, _quiet_exit(time.monotonic()))


# the command has ended (its workers stopped, its files written or removed) and its exit status
# is decided: a Ctrl-C during the interpreter's exit is ignored for this long. Python's own
# handler would raise it inside the exit ("Exception ignored in <module 'threading'> ...
# KeyboardInterrupt"), and the default action would replace the status (130 for an interrupted
# convert) by a death by signal, cutting short the clean-up of a worker pool. After it, an exit
# that hangs (a thread of the user's script that never ends) can still be stopped
QUIET_EXIT_S = 5.0


def _quiet_exit(ended: float):
    def handler(signum, frame):
        if time.monotonic() - ended >= QUIET_EXIT_S:
            raise KeyboardInterrupt

    return handler
