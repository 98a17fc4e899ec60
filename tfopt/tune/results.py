"""What the batch-size finder and the throughput sweep report: plain, frozen dataclasses.

Example:
    >>> trial = BatchTrial(64, fits=True, peak_bytes=1 << 20)
    >>> trial.to_json()["fits"]
    True
"""

from __future__ import annotations

import dataclasses

from tfopt._text import human_bytes, table

__all__ = ["MARGIN_MULTIPLE", "BatchSizeResult", "BatchTrial", "SweepPoint", "SweepResult"]

MARGIN_MULTIPLE = 8  # the recommended batch is rounded down to a multiple of this


@dataclasses.dataclass(frozen=True)
class BatchTrial:
    """One trial of the finder.

    Attributes:
        batch_size: Examples in the trial step.
        fits: The step ran within memory (and within the budget, if one was set).
        peak_bytes: Memory the step needed, where measured; None otherwise.
        seconds: Wall time of the trial, tracing included. Defaults to 0.0.
        detail: Why it did not fit, or how memory was measured. Defaults to "".
    """

    batch_size: int
    fits: bool
    peak_bytes: int | None = None
    seconds: float = 0.0
    detail: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class BatchSizeResult:
    """What the search found (:func:`tfopt.tune.search.find_batch_size`, ``search_batch_size``).

    Attributes:
        largest_fit: The largest batch size that fit; None when not even the first did.
        recommended: ``largest_fit`` after the safety margin (equal to it when the search was
            stopped by ``max_batch_size`` rather than by memory); None when nothing fit.
        trials: Every trial, in the order run.
        max_batch_size: The upper limit of the search.
        margin: The fraction of ``largest_fit`` kept.
        capped: The search stopped at ``max_batch_size``, not at an out-of-memory trial.
        memory_budget: The budget in bytes standing in for GPU memory, or None.
        memory_measure: How trial memory was measured ("tf-allocator", "rss", "hook", ...).
        notes: Remarks for the reader (synthetic data, approximations).
    """

    largest_fit: int | None
    recommended: int | None
    trials: tuple[BatchTrial, ...]
    max_batch_size: int
    margin: float
    capped: bool
    memory_budget: int | None = None
    memory_measure: str = "hook"
    notes: tuple[str, ...] = ()

    @property
    def largest_power_of_two(self) -> int | None:
        """The largest batch of the growth phase that fit (before the binary search)."""
        grown = [t.batch_size for t in self.trials if t.fits and t.batch_size & (t.batch_size - 1) == 0]
        return max(grown) if grown else None

    def to_json(self) -> dict:
        return {
            "largest_fit": self.largest_fit,
            "recommended": self.recommended,
            "largest_power_of_two": self.largest_power_of_two,
            "max_batch_size": self.max_batch_size,
            "margin": self.margin,
            "capped": self.capped,
            "memory_budget": self.memory_budget,
            "memory_measure": self.memory_measure,
            "trials": [trial.to_json() for trial in self.trials],
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        rows = [[t.batch_size, "yes" if t.fits else "no",
                 "-" if t.peak_bytes is None else human_bytes(t.peak_bytes),
                 f"{t.seconds:.2f}", t.detail] for t in self.trials]
        lines = [table(rows, ["batch", "fits", "memory", "seconds", "detail"], "rrrrl")]
        budget = ("" if self.memory_budget is None
                  else f"; memory budget {human_bytes(self.memory_budget)} ({self.memory_measure})")
        if self.largest_fit is None:
            lines.append(f"no batch size fits{budget}")
        else:
            why = (f"the limit --max {self.max_batch_size}, no margin needed" if self.capped
                   else f"{self.margin:.0%} of it, rounded down to a multiple of {MARGIN_MULTIPLE}")
            lines.append(f"largest batch that fits: {self.largest_fit}{budget}")
            lines.append(f"recommended batch size:  {self.recommended} ({why})")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    """The throughput of one batch size in :func:`tfopt.tune.sweep.throughput_sweep`.

    Attributes:
        batch_size: Examples per step.
        examples_per_second: ``batch_size`` over the median step time.
        step_seconds: Median time of the timed steps.
        steps: Timed steps (warm-up excluded).
    """

    batch_size: int
    examples_per_second: float
    step_seconds: float
    steps: int

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Examples/s per batch size and the choice made from them.

    Attributes:
        points: One :class:`SweepPoint` per batch size, in the order given.
        best: The batch size with the most examples/s.
        chosen: The smallest batch size within ``tolerance`` of the best (the best when
            ``tolerance`` is 0).
        tolerance: The fraction of the best's examples/s a smaller batch may lose.
        synthetic: The steps trained on random data (not the user's dataset).
    """

    points: tuple[SweepPoint, ...]
    best: int
    chosen: int
    tolerance: float
    synthetic: bool = True

    def to_json(self) -> dict:
        return {"points": [p.to_json() for p in self.points], "best": self.best,
                "chosen": self.chosen, "tolerance": self.tolerance, "synthetic": self.synthetic}

    def describe(self) -> str:
        top = max(p.examples_per_second for p in self.points)
        rows = []
        for p in self.points:
            mark = ("best, chosen" if p.batch_size == self.best == self.chosen
                    else "best" if p.batch_size == self.best
                    else "chosen" if p.batch_size == self.chosen else "")
            rows.append([p.batch_size, f"{p.examples_per_second:,.1f}",
                         f"{p.step_seconds * 1000:,.1f}", f"{p.examples_per_second / top:.0%}",
                         mark])
        lines = [table(rows, ["batch", "examples/s", "step ms", "of best", ""], "rrrrl")]
        lines.append(f"chosen batch size: {self.chosen} (smallest within {self.tolerance:.0%} of "
                     f"the best, {self.best}; data: {'synthetic' if self.synthetic else 'given'})")
        return "\n".join(lines)

