"""A small progress bar for long work (convert, verify, inspect, bench): counts, rate, ETA.

It draws on stderr, at most 10 times a second, and only when stderr is a terminal and the caller
did not ask for quiet: logs and pipes stay clean. Library code receives a ``Progress`` (or
``None``) from the CLI; it never decides on its own to draw.
"""

from __future__ import annotations

import sys
import time

_REDRAW_SECONDS = 0.1


def _format_seconds(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Progress:
    """A progress bar.

    Args:
        total: Items expected, or None when unknown (then no percentage or ETA).
        description: What is counted, shown first. Defaults to "".
        unit: The item's name. Defaults to "it".
        enabled: Draw at all. Defaults to "when stderr is a terminal".
        stream: Where to draw. Defaults to sys.stderr.
        clock: The time source (tests pass a fake). Defaults to time.perf_counter.

    Example:
        >>> with Progress(1000, "convert", unit="img") as progress:
        ...     progress.update(10)
    """

    def __init__(self, total=None, description="", unit="it", enabled=None, stream=None,
                 clock=time.perf_counter):
        self.total = total
        self.description = description
        self.unit = unit
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.clock = clock
        self.count = 0
        self._start = clock()
        self._last_draw = float("-inf")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, count: int = 1) -> None:
        self.count += count
        now = self.clock()
        if self.enabled and now - self._last_draw >= _REDRAW_SECONDS:
            self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The text of the bar at time ``now``."""
        now = self.clock() if now is None else now
        elapsed = max(now - self._start, 1e-9)
        rate = self.count / elapsed
        parts = [self.description] if self.description else []
        if self.total:
            fraction = min(self.count / self.total, 1.0)
            filled = int(fraction * 20)
            parts.append(f"[{'#' * filled}{'.' * (20 - filled)}] {self.count}/{self.total} {fraction:4.0%}")
        else:
            parts.append(f"{self.count}")
        parts.append(f"{rate:,.1f} {self.unit}/s")
        if self.total and rate > 0:
            parts.append(f"ETA {_format_seconds((self.total - self.count) / rate)}")
        parts.append(f"elapsed {_format_seconds(elapsed)}")
        return "  ".join(parts)

    def _draw(self, now: float) -> None:
        self._last_draw = now
        self.stream.write("\r" + self.line(now) + "\033[K")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(self.clock())
            self.stream.write("\n")
            self.stream.flush()
            self.enabled = False
