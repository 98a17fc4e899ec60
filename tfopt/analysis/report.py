"""What ``tfopt.analyze`` found: stages, bottleneck, ceiling, recommendations (TensorFlow-free).

Rates are elements per second. A stage's own rates (``per_core_rate``, ``prefix_rate``) count
its own elements (before a ``batch``: examples; after it: batches); ``ceiling_per_s`` and
``rate_per_s`` count the pipeline's output elements.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tfopt.analysis.findings import Recommendation, Stage
from tfopt.analysis.formatting import format_number


@dataclass(frozen=True)
class PipelineReport:
    """The analysis of one pipeline (``tfopt.analyze``)."""

    stages: tuple[Stage, ...]
    bottleneck: str | None  # the label of the stage that limits throughput
    ceiling_per_s: float | None  # output elements/s with ideal parallelism on `cores`
    rate_per_s: float  # measured output elements/s, as written
    predicted_per_s: float | None  # the model's output rate, as written
    cores: int
    recommendations: tuple[Recommendation, ...]
    autotune_model: bool  # get_model_proto answered (False: autotuning is off)
    notes: tuple[str, ...] = ()
    seconds: float = 0.0  # how long the analysis took
    ram_budget: int | None = None
    extra: dict = field(default_factory=dict)

    def stage(self, label: str) -> Stage:
        """The stage with this label (the user's ``name=`` or ``map#2``)."""
        for stage in self.stages:
            if stage.label == label:
                return stage
        raise KeyError(label)

    def kinds(self) -> list[str]:
        return [r.kind for r in self.recommendations]

    def to_json(self) -> str:
        def stage_dict(stage: Stage) -> dict:
            out = asdict(stage)
            out["label"] = stage.label
            out["heavy_ops"] = list(stage.heavy_ops)
            return out

        data = {
            "stages": [stage_dict(s) for s in self.stages],
            "bottleneck": self.bottleneck,
            "ceiling_per_s": self.ceiling_per_s,
            "rate_per_s": self.rate_per_s,
            "predicted_per_s": self.predicted_per_s,
            "cores": self.cores,
            "recommendations": [asdict(r) for r in self.recommendations],
            "autotune_model": self.autotune_model,
            "notes": list(self.notes),
            "seconds": self.seconds,
            "ram_budget": self.ram_budget,
        }
        return json.dumps(_finite(data), indent=2)

    def plot(self, path, title: str | None = None) -> Path:
        """Chart each stage's rate as written against the ceiling and the measured rate.

        One horizontal bar per stage, source at the top: the output elements/s that stage
        alone allows, ``min(p, C) / cost`` (no bar, "-", where its cost is unknown); the
        bottleneck's bar in red; vertical lines at ``ceiling_per_s`` and ``rate_per_s``; a log
        x axis. ``path`` ending in ``.svg`` needs nothing, ``.png`` needs matplotlib (the
        ``plot`` extra). Written atomically.

        Args:
            path: Where to write: FILE.svg or FILE.png.
            title: The chart's title [default: one naming the bottleneck].

        Returns:
            ``path``, as a Path.

        Raises:
            tfopt.errors.InvalidArgumentError: Another suffix, or a PNG without matplotlib.
        """
        from tfopt.analysis.plot import write_report_plot

        return write_report_plot(path, self, title)

    def describe(self) -> str:
        header = ("#", "stage", "op", "parallel", "self us", "per core/s", "prefix/s",
                  "per out", "bytes", "notes")
        rows = []
        for s in self.stages:
            notes = ([f"heavy: {','.join(s.heavy_ops)}"] if s.heavy_ops else []) + (
                ["random"] if s.random else []) + (["python"] if s.python else []) + (
                ["fused into next"] if s.fused else []) + (
                ["bottleneck"] if s.label == self.bottleneck else [])
            rows.append((str(s.index), s.label, s.op, _parallel(s),
                         format_number(s.self_time_s, 1e6), format_number(s.per_core_rate),
                         format_number(s.prefix_rate), f"{s.elements_per_output:g}",
                         format_number(s.bytes_per_element), "; ".join(notes)))
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                 for r in [header, *rows]]
        lines.append(f"measured {self.rate_per_s:,.1f} elements/s on {self.cores} core(s); model "
                     f"{format_number(self.predicted_per_s)}/s as written, ceiling "
                     f"{format_number(self.ceiling_per_s)}/s with ideal parallelism; "
                     f"bottleneck: {self.bottleneck or 'none found'}")
        lines += [f"note: {note}" for note in self.notes]
        for r in self.recommendations:
            lines.append(f"{r.kind} ({r.stage}, x{r.expected_speedup:.2f}): {r.message}")
        if not self.recommendations:
            lines.append("no recommendations")
        return "\n".join(lines)


def _parallel(stage: Stage) -> str:
    graph = "seq" if stage.parallelism is None else (
        "AUTOTUNE" if stage.parallelism == -1 else str(stage.parallelism))
    if stage.runtime_parallelism is None:
        return graph
    return f"{graph}->{stage.runtime_parallelism}"


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
