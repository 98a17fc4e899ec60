"""Shared helpers for the CLI commands: TensorFlow import, sizes, tables, JSON."""

from __future__ import annotations

import errno
import importlib.util
import json
import math
import re
from pathlib import Path
from typing import NoReturn

import click

from tfopt._plot import PLOT_SUFFIXES
from tfopt._text import human_bytes, table  # noqa: F401  (re-exported for commands)
from tfopt.errors import TfoptError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
MAX_BYTE_SIZE = float(1 << 63)  # 8 EiB: past every disk and memory, and int64's range
_UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
          "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}


# ctx.meta key (meta is shared by every context of a command line): the command was given --json
_JSON_REQUESTED = "tfopt.json_requested"


class TfoptGroup(click.Group):
    """A click group that reports TfoptError as a one-line message with exit code 1.

    With ``--json`` (:func:`json_option`) a JSON error object goes to stdout as well, where the
    caller reads the result; click's usage errors (exit code 2) get one too once ``--json``
    was read. The ``tfopt`` group uses it, and so does any group that is also run on its own
    (``python -m tfopt.cli.service``).
    """

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TfoptError as error:
            fail(f"error: {error}", str(error), 1)
        except MemoryError:
            message = ("out of memory (MemoryError): this process's memory limit (ulimit -v, a "
                       "container's) is below what the command needs; raise the limit or give "
                       "it less data at a time")
            fail(f"error: {message}", message, 1)
        except OSError as error:
            message = resource_problem(error)
            if message is None:
                raise
            fail(f"error: {message}", message, 1)
        except click.ClickException as error:
            if not getattr(error, "tfopt_json_sent", False) and ctx.meta.get(_JSON_REQUESTED):
                echo_json({"error": error.format_message(), "exit_code": error.exit_code})
                error.tfopt_json_sent = True  # an enclosing group sends none again
            raise


_RESOURCE_LIMITS = {
    errno.EFBIG: "file too large for this process's file-size limit (ulimit -f) or the file "
                 "system; raise the limit, or write smaller files (--shard-size)",
    errno.ENOSPC: "no space left on the device; free space or write elsewhere",
    errno.EDQUOT: "the disk quota is used up; free space or write elsewhere",
    errno.EMFILE: "too many open files for this process's limit (ulimit -n); raise it",
    errno.ENFILE: "too many open files on this system",
}


def resource_problem(error: OSError) -> str | None:
    """One line for an ``OSError`` that a limit of the machine caused (a full disk, a file-size
    or open-files limit), naming the file where there is one; None for any other."""
    limit = _RESOURCE_LIMITS.get(error.errno)
    if limit is None:
        return None
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{limit} ({error.strerror or errno.errorcode.get(error.errno)})"


def echo_text(text: str, err: bool = False) -> None:
    """``click.echo`` for text that holds paths and names: a name that is not UTF-8 (Python's
    lone surrogates) is written ``\\xNN``, a character the stream's encoding lacks (LANG=C)
    ``\\xNN``/``\\uNNNN``, instead of ending the command in a UnicodeEncodeError after its
    work is done."""
    stream = click.get_text_stream("stderr" if err else "stdout")
    encoding = getattr(stream, "encoding", None) or "utf-8"
    try:
        text.encode(encoding, getattr(stream, "errors", None) or "strict")
    except UnicodeEncodeError:
        try:  # a file name's bytes that are not UTF-8, as \xNN (shown_name's form)
            text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:
            pass
        text = text.encode(encoding, "backslashreplace").decode(encoding)
    click.echo(text, err=err)


def fail(line: str | None, error: str, exit_code: int) -> NoReturn:
    """End a command that failed: ``tfopt: LINE`` on stderr (None: already said there), the
    JSON object ``{"error": ERROR, "exit_code": N}`` on stdout if the command was given
    ``--json``, and the exit code."""
    ctx = click.get_current_context()
    if line is not None:
        click.echo(f"tfopt: {line}", err=True)
    if ctx.meta.get(_JSON_REQUESTED):
        echo_json({"error": error, "exit_code": exit_code})
    ctx.exit(exit_code)


def _note_json(ctx, param, value):
    if value:
        ctx.meta[_JSON_REQUESTED] = True
    return value


def json_option(text: str = "Print JSON on stdout."):
    """The ``--json`` flag of every command (``as_json``): noted, so that an error is reported
    as JSON on stdout too (:class:`TfoptGroup`). Eager: read before the other options, so that
    their errors find it."""
    return click.option("--json", "as_json", is_flag=True, is_eager=True, callback=_note_json,
                        help=text)


def finite(context, parameter, value):
    """A click callback refusing inf and nan, which pass click's FloatRange (nan compares false
    with any bound, and inf passes a range without a maximum)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value!r}: expected a finite number")
    return value


class ByteSize(click.ParamType):
    """A size such as ``128MB``, ``64MiB``, ``1G`` or ``500000`` (bytes)."""

    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        match = _SIZE.match(str(value))
        if not match:
            self.fail(f"{value!r} is not a size such as 128MB, 64MiB or 1000000", param, ctx)
        number, unit = match.groups()
        unit = (unit or "").lower().removesuffix("b")
        size = float(number) * _UNITS[unit]
        if not size < MAX_BYTE_SIZE:  # inf too: int(inf) would be an OverflowError
            self.fail(f"{value!r} is larger than any disk or memory (at most 8 EiB)", param, ctx)
        return int(size)


def batch_size_list(ctx, param, value) -> tuple[int, ...] | None:
    """A click callback: ``"32,64,128"`` as ``(32, 64, 128)``; None when the option is absent."""
    if value is None:
        return None
    try:
        sizes = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) < 1:
        raise click.BadParameter(f"{value!r}: expected positive batch sizes separated by "
                                 "commas, e.g. 32,64,128")
    return sizes


def plot_path(ctx, param, value):
    """A click callback refusing a --plot file that could not be written, before the work runs:
    another suffix than .svg or .png, a missing folder, a PNG without matplotlib."""
    if value is None:
        return None
    path = Path(value)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        raise click.BadParameter(f"{value!r}: expected a file ending in "
                                 f"{' or '.join(PLOT_SUFFIXES)}")
    if not path.resolve().parent.is_dir():
        raise click.BadParameter(f"{value!r}: the folder {str(path.parent)!r} does not exist")
    if path.suffix.lower() == ".png" and importlib.util.find_spec("matplotlib") is None:
        raise click.BadParameter(f"{value!r}: a PNG needs matplotlib (pip install "
                                 "'tfopt[plot]'); or write an SVG, which needs nothing")
    return value


def echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def needs_tensorflow() -> None:
    """Import TensorFlow for a command, without its C++ banners unless -vv was given."""
    from tfopt._tf import import_tensorflow

    ctx = click.get_current_context(silent=True)
    verbose = (ctx.find_root().obj or {}).get("verbose", 0) if ctx else 0
    import_tensorflow(quiet=verbose < 2)
