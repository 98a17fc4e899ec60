"""Charts of a batch-size sweep: examples/s against batch size, as SVG (no dependency) or PNG
(matplotlib, the optional ``plot`` extra), written atomically.

Example:
    >>> write_sweep_plot("sweep.svg", {32: 210.5, 64: 250.0, 128: 240.2})
    PosixPath('sweep.svg')
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from tfopt._plot import PLOT_SUFFIXES, new_figure, plot_format, save_png, write_svg
from tfopt.errors import InvalidArgumentError

__all__ = ["PLOT_SUFFIXES", "sweep_svg", "write_sweep_plot", "write_sweep_png", "write_sweep_svg"]

_SVG_WIDTH, _SVG_HEIGHT = 480, 300
_MARGIN = {"left": 64, "right": 16, "top": 32, "bottom": 44}


def sweep_svg(sweep: dict[int, float], title: str = "tfopt throughput by batch size") -> str:
    """An SVG line chart of examples/s against batch size (log2 axis), as a string.

    Args:
        sweep: Batch size -> examples/s.
        title: The chart's title. Defaults to "tfopt throughput by batch size".

    Raises:
        tfopt.errors.InvalidArgumentError: An empty sweep.
    """
    if not sweep:
        raise InvalidArgumentError("sweep is empty: give batch sizes to plot")
    sizes = sorted(sweep)
    left, top = _MARGIN["left"], _MARGIN["top"]
    width = _SVG_WIDTH - left - _MARGIN["right"]
    height = _SVG_HEIGHT - top - _MARGIN["bottom"]
    low, high = math.log2(sizes[0]), math.log2(sizes[-1])
    top_rate = max(sweep.values()) * 1.1 or 1.0

    def x(size):  # batch sizes are mostly powers of two: a log2 axis spaces them evenly
        return left + (width / 2 if high == low else (math.log2(size) - low) / (high - low) * width)

    def y(rate):
        return top + height - rate / top_rate * height

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_SVG_WIDTH}" height="{_SVG_HEIGHT}" '
        f'viewBox="0 0 {_SVG_WIDTH} {_SVG_HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_SVG_WIDTH}" height="{_SVG_HEIGHT}" fill="white"/>',
        f'<text x="{_SVG_WIDTH / 2}" y="20" text-anchor="middle" font-size="14">'
        f'{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{top + height}" x2="{left + width}" y2="{top + height}" '
        'stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="black"/>',
        f'<text x="{left + width / 2}" y="{_SVG_HEIGHT - 8}" text-anchor="middle">'
        'batch size</text>',
        f'<text x="14" y="{top + height / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + height / 2})">examples/s</text>',
    ]
    for step in range(5):
        rate = top_rate * step / 4
        parts.append(f'<line x1="{left - 4}" y1="{y(rate):.1f}" x2="{left}" y2="{y(rate):.1f}" '
                     'stroke="black"/>')
        parts.append(f'<text x="{left - 6}" y="{y(rate) + 4:.1f}" text-anchor="end">'
                     f'{rate:.0f}</text>')
    points = " ".join(f"{x(size):.1f},{y(sweep[size]):.1f}" for size in sizes)
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for size in sizes:
        parts.append(f'<circle cx="{x(size):.1f}" cy="{y(sweep[size]):.1f}" r="3.5" '
                     'fill="#1f77b4"/>')
        parts.append(f'<text x="{x(size):.1f}" y="{top + height + 16}" text-anchor="middle">'
                     f'{size}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_sweep_svg(path, sweep: dict[int, float], title: str | None = None) -> Path:
    """Write :func:`sweep_svg` to ``path`` atomically (temporary name, fsync, rename)."""
    return write_svg(path, sweep_svg(sweep, title) if title else sweep_svg(sweep))


def write_sweep_png(path, sweep: dict[int, float], title: str | None = None) -> Path:
    """Draw the sweep as a PNG with matplotlib (the optional ``plot`` extra), atomically.

    Raises:
        tfopt.errors.InvalidArgumentError: An empty sweep, or matplotlib is not installed.
    """
    if not sweep:
        raise InvalidArgumentError("sweep is empty: give batch sizes to plot")
    figure = new_figure(path, (6.4, 4.0))
    axes = figure.subplots()
    sizes = sorted(sweep)
    axes.plot(sizes, [sweep[size] for size in sizes], marker="o")
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [str(size) for size in sizes])
    axes.set_xlabel("batch size")
    axes.set_ylabel("examples/s")
    axes.set_title(title or "tfopt throughput by batch size")
    axes.grid(True, alpha=0.3)
    return save_png(figure, path)


# Chart writers by format: --plot picks one from the suffix of the name it is given.
_PLOT_WRITERS = {"svg": write_sweep_svg, "png": write_sweep_png}


def write_sweep_plot(path, sweep: dict[int, float], title: str | None = None) -> Path:
    """Write the sweep chart as SVG or PNG, chosen by ``path``'s suffix.

    Raises:
        tfopt.errors.InvalidArgumentError: Another suffix (the message lists the valid ones).
    """
    return _PLOT_WRITERS[plot_format(path)](path, sweep, title)
