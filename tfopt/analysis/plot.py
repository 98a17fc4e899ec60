"""The analysis as a chart: one bar per stage, the rate of output elements that stage alone
allows as written, beside the ceiling and the measured rate. SVG (no dependency) or PNG
(matplotlib, the optional ``plot`` extra), chosen by the file's suffix and written atomically.
TensorFlow-free: it draws a :class:`~tfopt.analysis.report.PipelineReport`, reading only what
:class:`ChartedReport` names (it imports no report: ``PipelineReport.plot`` calls it).

A stage's bar is ``min(p, C) / cost``, the model's bound on the output rate from that stage (see
``tfopt/analysis/advice.py``); the shortest bar is the bottleneck unless the cores bind, in
which case the costliest stage is. A stage whose cost is unknown (or zero) has no bar and reads
"-". The x axis is logarithmic: stages routinely differ by 100x or more.

Example:
    >>> report = tfopt.analyze(dataset)
    >>> report.plot("pipeline.svg")
    PosixPath('pipeline.svg')
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Protocol

from tfopt._plot import new_figure, plot_format, save_png, write_svg
from tfopt.analysis.advice import bound_as_written
from tfopt.analysis.findings import Stage
from tfopt.analysis.formatting import format_number
from tfopt.errors import InvalidArgumentError

__all__ = ["ChartedReport", "report_svg", "stage_rates", "write_report_plot",
           "write_report_png", "write_report_svg"]

_WIDTH = 640
_ROW, _BAR = 26, 16  # px per stage, px of its bar
_TOP, _BOTTOM, _RIGHT = 62, 48, 72  # room for the title and line labels, the axis, bar values
_LABEL_CHARS = 30  # longer stage labels are cut
_BAR_COLOUR, _BOTTLENECK_COLOUR = "#1f77b4", "#d62728"
_CEILING_COLOUR, _MEASURED_COLOUR = "#2ca02c", "#ff7f0e"


class ChartedReport(Protocol):
    """What the chart reads of a :class:`~tfopt.analysis.report.PipelineReport`."""

    stages: tuple[Stage, ...]
    bottleneck: str | None
    ceiling_per_s: float | None
    rate_per_s: float
    cores: int


def stage_rates(report: ChartedReport) -> list[tuple[str, float | None]]:
    """(label, output elements/s the stage allows as written) per stage, source first; None
    where the stage's cost is unknown or zero (no bound)."""
    out = []
    for stage in report.stages:
        rate = bound_as_written(stage, report.cores)
        out.append((stage.label, rate if math.isfinite(rate) and rate > 0 else None))
    return out


def _lines(report: ChartedReport) -> list[tuple[str, float]]:
    """The vertical lines that can be drawn on a log axis: ("ceiling", x), ("measured", x)."""
    out = []
    for name, value in (("ceiling", report.ceiling_per_s), ("measured", report.rate_per_s)):
        if value is not None and math.isfinite(value) and value > 0:
            out.append((name, value))
    return out


def _decades(values) -> tuple[int, int]:
    """The log10 axis range: whole decades with some room around the smallest and largest."""
    values = [value for value in values if value]
    if not values:
        return 0, 1
    low = math.floor(math.log10(min(values) * 0.8))
    high = math.ceil(math.log10(max(values) * 1.25))
    return low, max(high, low + 1)


def _tick_label(power: int) -> str:
    if power >= 6:
        return f"{10 ** (power - 6)}M"
    if power >= 3:
        return f"{10 ** (power - 3)}k"
    return str(10 ** power) if power >= 0 else f"{10.0 ** power:g}"


def _ticks(low: int, high: int) -> list[int]:
    step = max(1, math.ceil((high - low) / 8))  # at most about 9 labels along the axis
    return list(range(low, high + 1, step))


def _title(report: ChartedReport, title: str | None) -> str:
    if title:
        return title
    return (f"tfopt analyze: bottleneck {report.bottleneck}" if report.bottleneck
            else "tfopt analyze: no bottleneck found")


def _axis_label(report: ChartedReport) -> str:
    return (f"output elements/s each stage allows as written, {report.cores} core(s) "
            "(log scale)")


def _short(label: str) -> str:
    return label if len(label) <= _LABEL_CHARS else label[:_LABEL_CHARS - 1] + "\u2026"


def _check(report: ChartedReport) -> None:
    if not report.stages:
        raise InvalidArgumentError("the report has no stages to plot")


def report_svg(report: ChartedReport, title: str | None = None) -> str:
    """The chart as an SVG document (a string).

    Bars are ``<rect class="bar">`` (``class="bar bottleneck"`` for the bottleneck) with the
    stage's label in ``data-stage``; the lines are ``<line class="ceiling">`` and
    ``<line class="measured">``.

    Args:
        report: What ``tfopt.analyze`` returned.
        title: The chart's title [default: one naming the bottleneck].

    Raises:
        tfopt.errors.InvalidArgumentError: A report without stages.
    """
    _check(report)
    rates = stage_rates(report)
    lines = _lines(report)
    low, high = _decades([rate for _, rate in rates] + [value for _, value in lines])
    left = min(max(24 + 7.5 * max(len(_short(label)) for label, _ in rates), 96), 256)  # bold
    width = _WIDTH - left - _RIGHT
    height = _ROW * len(rates)
    total_height = _TOP + height + _BOTTOM
    bottom = _TOP + height

    def x(rate: float) -> float:
        return left + (math.log10(rate) - low) / (high - low) * width

    def text(x_: float, y: float, content: str, anchor: str = "start", extra: str = "") -> str:
        return (f'<text x="{x_:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>'
                f'{html.escape(content)}</text>')

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{total_height}" '
        f'viewBox="0 0 {_WIDTH} {total_height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_WIDTH}" height="{total_height}" fill="white"/>',
        text(_WIDTH / 2, 20, _title(report, title), "middle", ' font-size="14"'),
    ]
    for power in _ticks(low, high):
        tick = left + (power - low) / (high - low) * width
        parts.append(f'<line x1="{tick:.1f}" y1="{_TOP}" x2="{tick:.1f}" y2="{bottom + 4}" '
                     'stroke="#dddddd"/>')
        parts.append(text(tick, bottom + 16, _tick_label(power), "middle"))
    axis_label = _axis_label(report)  # under the axis, or as far right as fits (~6.6 px a char)
    parts.append(text(min(left + width / 2, _WIDTH - 3.3 * len(axis_label) - 4),
                      total_height - 8, axis_label, "middle"))
    values = []  # the bars' figures, drawn last: over the lines, as the stage labels are
    for row, (label, rate) in enumerate(rates):
        middle = _TOP + row * _ROW + _ROW / 2
        bottleneck = label == report.bottleneck
        weight = ' font-weight="bold"' if bottleneck else ""
        parts.append(text(left - 8, middle + 4, _short(label), "end", weight))
        if rate is None:
            parts.append(text(left + 6, middle + 4, "-", extra=' class="no-bar"'))
            continue
        colour = _BOTTLENECK_COLOUR if bottleneck else _BAR_COLOUR
        parts.append(
            f'<rect class="bar{" bottleneck" if bottleneck else ""}" '
            f'data-stage="{html.escape(label)}" x="{left}" y="{middle - _BAR / 2:.1f}" '
            f'width="{x(rate) - left:.2f}" height="{_BAR}" fill="{colour}">'
            f'<title>{html.escape(label)}: {format_number(rate)} output elements/s</title></rect>')
        values.append(text(x(rate) + 4, middle + 4, f"{format_number(rate)}/s", extra=weight))
    parts.append(f'<line x1="{left}" y1="{_TOP}" x2="{left}" y2="{bottom}" stroke="black"/>')
    parts.append(f'<line x1="{left}" y1="{bottom}" x2="{left + width}" y2="{bottom}" '
                 'stroke="black"/>')
    colours = {"ceiling": _CEILING_COLOUR, "measured": _MEASURED_COLOUR}
    for row, (name, value) in enumerate(lines):
        at = x(value)
        dash = ' stroke-dasharray="6 3"' if name == "ceiling" else ""
        parts.append(f'<line class="{name}" x1="{at:.2f}" y1="{_TOP - 4}" x2="{at:.2f}" '
                     f'y2="{bottom}" stroke="{colours[name]}" stroke-width="2"{dash}/>')
        # the labels sit above the bars, one row each, so close lines do not overprint
        anchor = "end" if at > left + width * 0.75 else "start"
        parts.append(text(at + (-4 if anchor == "end" else 4), 40 + 14 * row,
                          f"{name} {format_number(value)}/s", anchor, f' fill="{colours[name]}"'))
    parts += values
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def write_report_svg(path, report: ChartedReport, title: str | None = None) -> Path:
    """Write :func:`report_svg` to ``path`` atomically (temporary name, fsync, rename)."""
    return write_svg(path, report_svg(report, title))


def write_report_png(path, report: ChartedReport, title: str | None = None) -> Path:
    """Draw the chart as a PNG with matplotlib (the optional ``plot`` extra), atomically.

    Raises:
        tfopt.errors.InvalidArgumentError: A report without stages, or matplotlib is not installed.
    """
    _check(report)
    rates = stage_rates(report)
    lines = _lines(report)
    low, high = _decades([rate for _, rate in rates] + [value for _, value in lines])
    figure = new_figure(path, (7.0, 1.9 + 0.35 * len(rates)), layout="constrained")
    axes = figure.subplots()
    start = 10.0 ** low  # a log axis has no zero: bars start at its left edge
    for row, (label, rate) in enumerate(rates):
        if rate is None:
            axes.text(start * 1.15, row, "-", va="center")
            continue
        bottleneck = label == report.bottleneck
        axes.barh(row, rate - start, left=start, height=0.6,
                  color=_BOTTLENECK_COLOUR if bottleneck else _BAR_COLOUR)
        axes.text(rate * 1.05, row, f"{format_number(rate)}/s", va="center", fontsize=9,
                  fontweight="bold" if bottleneck else "normal")
    colours = {"ceiling": _CEILING_COLOUR, "measured": _MEASURED_COLOUR}
    for name, value in lines:
        axes.axvline(value, color=colours[name], linewidth=2,
                     linestyle="--" if name == "ceiling" else "-",
                     label=f"{name} {format_number(value)}/s")
    axes.set_xscale("log")
    axes.set_xlim(start, 10.0 ** high)
    axes.set_yticks(range(len(rates)), [_short(label) for label, _ in rates])
    for tick, (label, _) in zip(axes.get_yticklabels(), rates, strict=True):
        if label == report.bottleneck:
            tick.set_fontweight("bold")
    axes.set_ylim(len(rates) - 0.5, -0.5)  # the source at the top
    axes.set_xlabel(_axis_label(report))
    axes.set_title(_title(report, title))
    axes.grid(True, axis="x", alpha=0.3)
    if lines:  # below the axis, where it covers no bar
        figure.legend(loc="outside lower center", ncols=len(lines), fontsize=9, frameon=False)
    return save_png(figure, path)


# Chart writers by format: --plot picks one from the suffix of the name it is given.
_PLOT_WRITERS = {"svg": write_report_svg, "png": write_report_png}


def write_report_plot(path, report: ChartedReport, title: str | None = None) -> Path:
    """Write the chart as SVG or PNG, chosen by ``path``'s suffix.

    Raises:
        tfopt.errors.InvalidArgumentError: Another suffix (the message names the path and the valid
            ones), a report without stages, or a PNG without matplotlib.
    """
    return _PLOT_WRITERS[plot_format(path)](path, report, title)
