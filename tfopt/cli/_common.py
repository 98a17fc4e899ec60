"""Shared helpers for the CLI commands: TensorFlow import, sizes, tables, JSON."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import click

from tfopt._plot import PLOT_SUFFIXES
from tfopt._text import human_bytes, table  # noqa: F401  (re-exported for commands)
from tfopt.errors import TfoptError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
          "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}


class TfoptGroup(click.Group):
    """A click group that reports TfoptError as a one-line message with exit code 1.

    The ``tfopt`` group uses it, and so does any group that is also run on its own
    (``python -m tfopt.cli.service``).
    """

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TfoptError as error:
            click.echo(f"tfopt: error: {error}", err=True)
            ctx.exit(1)


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
        return int(float(number) * _UNITS[unit])


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
