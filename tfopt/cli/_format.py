"""Shared output helpers for the CLI: sizes, tables, JSON."""

from __future__ import annotations

import json
import re

import click

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
          "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}


def human_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


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


def table(rows: list[list], header: list[str], align: str | None = None) -> str:
    """A plain-text table; ``align`` holds one of 'l'/'r' per column (numbers go right)."""
    cells = [[str(cell) for cell in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    align = align or "l" + "r" * (len(header) - 1)
    lines = []
    for row in cells:
        parts = [cell.ljust(width) if side == "l" else cell.rjust(width)
                 for cell, width, side in zip(row, widths, align, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def echo_json(data) -> None:
    click.echo(json.dumps(data, indent=2, default=str))
