"""Plain-text rendering shared by reports (``describe()``) and the CLI."""

from __future__ import annotations


def human_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


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
