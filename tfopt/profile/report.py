"""What ``tfopt profile`` found: a table for people, one JSON object for programs."""

from __future__ import annotations

import dataclasses
import json

from tfopt.profile.advice import WORTH, Recommendation
from tfopt.profile.facts import ModelFacts
from tfopt.profile.gpu_activity import GpuActivity

__all__ = ["ProfileReport"]


@dataclasses.dataclass
class ProfileReport:
    """A profiled fit (``status`` "profiled"), or why none was ("no_fit", "failed").

    Attributes:
        script: The script, as given.
        status: "profiled", "no_fit" (it ended without the fit asked for) or "failed" (its
            own error before that fit; ``message`` holds its traceback).
        message: Why nothing was profiled, in words.
        source: What the fit read: "dataset", "arrays", "dataframe", "generator",
            "PyDataset".
        examples_per_s: The fit's rate on the script's data.
        step_examples_per_s: The same steps on batches held in memory (no input wait).
        input_examples_per_s: The input alone (its batches drained, no model), or None.
        input_bound_share: The share of a step spent waiting for input, 0-1.
        input_bound: The TensorFlow Profiler's class of that share.
        steps: Steps timed (after the warm-up), and ``seconds`` their time.
        model: The model and machine facts.
        mfu: Model FLOPs utilisation at ``examples_per_s``, or None (``model.peak`` says why).
        gpu: The GPUs' own counters over the timed rounds (GPU-Util, and SM and tensor-core
            activity where GPM has them), or why there are none.
        pipeline: ``tfopt.analyze``'s findings on a dataset source (bottleneck, ceiling), or
            why there are none.
        recommendations: Most important first.
        tried: Whether ``--try`` measured the model-side changes; ``trials`` each one's step
            ratio against the unchanged model and whether its loss agreed, recommended or not.
        notes: What the reader should know about the measurement.
        profile_seconds: From the fit caught to the report (the script's start-up apart).
    """

    script: str
    status: str = "profiled"
    message: str = ""
    source: str = ""
    examples_per_s: float | None = None
    step_examples_per_s: float | None = None
    input_examples_per_s: float | None = None
    input_bound_share: float | None = None
    input_bound: str = ""
    steps: int = 0
    seconds: float = 0.0
    model: ModelFacts | None = None
    mfu: float | None = None
    gpu: GpuActivity | None = None
    pipeline: dict = dataclasses.field(default_factory=dict)
    recommendations: list[Recommendation] = dataclasses.field(default_factory=list)
    tried: bool = False
    trials: list[dict] = dataclasses.field(default_factory=list)
    profile_seconds: float = 0.0
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict:
        data = {key: getattr(self, key) for key in (
            "script", "status", "message", "source", "examples_per_s", "step_examples_per_s",
            "input_examples_per_s", "input_bound_share", "input_bound", "steps", "seconds",
            "mfu", "pipeline", "tried", "trials", "notes", "profile_seconds")}
        data["model"] = self.model.to_json() if self.model is not None else None
        data["gpu"] = self.gpu.to_json() if self.gpu is not None else None
        data["recommendations"] = [r.to_json() for r in self.recommendations]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def describe(self) -> str:
        if self.status != "profiled":
            return self.message
        facts = self.model
        lines = [
            f"tfopt profile {self.script}: {self.steps} steps timed in {self.seconds:.1f} s "
            f"({self.source} input; {self.profile_seconds:.0f} s from its fit to this report)",
            "",
            f"  examples/s          {self.examples_per_s:,.1f} (the step alone: "
            f"{self.step_examples_per_s:,.1f}"
            + (f"; the input alone: {self.input_examples_per_s:,.1f}"
               if self.input_examples_per_s else "") + ")",
            f"  waiting for input   {self.input_bound_share:.0%} of each step: "
            f"{self.input_bound}",
        ]
        if self.pipeline.get("bottleneck"):
            ceiling = self.pipeline.get("ceiling_per_s")
            lines.append(f"  input pipeline      slowest stage {self.pipeline['bottleneck']}"
                         + (f", ceiling {ceiling:,.0f} batches/s on these cores"
                            if ceiling else ""))
        elif self.pipeline.get("not_analysed"):
            lines.append(f"  input pipeline      {self.pipeline['not_analysed']}")
        blockers = (f" (blocked by {', '.join(facts.xla_blockers[:5])})"
                    if facts.xla_blockers else "")
        lines += [
            f"  precision           {facts.policy} (this machine: {facts.machine_policy[0]})",
            f"  jit_compile         {facts.jit_compile}{blockers}",
            f"  steps_per_execution {facts.steps_per_execution}",
            f"  batch size          {facts.batch_size}",
            f"  batch norm          {facts.batch_norm}",
            f"  strategy            {facts.strategy}, {facts.replicas} replica(s)",
            "  MFU                 " + (f"{self.mfu:.1%} of {facts.peak}" if self.mfu is not None
                                        else f"- (peak: {facts.peak})"),
        ]
        if facts.unaligned:
            lines.append(f"  not multiples of 8  {', '.join(facts.unaligned[:5])}")
        if self.gpu is not None:
            lines += self.gpu.lines()
        lines += ["", "What to change, most important first:" if self.recommendations
                  else "Nothing worth changing: no change is expected or measured to gain "
                       f"{WORTH - 1:.0%} or more."]
        for number, found in enumerate(self.recommendations, 1):
            gain = []
            if found.measured_speedup is not None:
                gain.append(f"measured {found.measured_speedup:.2f}x")
            if found.expected_speedup is not None:
                gain.append(f"expected {found.expected_speedup:.2f}x")
            lines.append(f"  {number}. [{found.kind}] {found.message} "
                         f"({', '.join(gain) or found.basis})")
            lines += [f"       {line}" for line in found.code.splitlines()]
        if self.trials:
            lines += ["", "Measured by --try (alternating rounds: the step alone against the "
                          "unchanged model; the input as the fit reads it against the "
                          "script's):"]
            for trial in self.trials:
                ratio = trial["measured_speedup"]
                outcome = (f"{ratio:.2f}x" if ratio is not None else
                           f"not timed: {trial.get('reason', 'its loss on one batch differs')}")
                if trial["kind"] == "together":  # the whole fit, not the step alone
                    lines.append(f"  all together        {outcome} the script's whole fit, "
                                 f"{' + '.join(trial['parts'])} at once, as tfopt.Run "
                                 "applies them")
                    continue
                lines.append(f"  {trial['kind']:<20}{outcome}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)
