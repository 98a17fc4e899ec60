"""What to change in a profiled fit, most important first (pure: no TensorFlow).

Each change comes with the speed-up it is expected to give and how that figure was found:
the input pipeline's from the two measured rates (the step with its input against the step
alone: hiding the input entirely gives at most their ratio), half precision's on a GPU from the
device's peaks (the step's compute share sped up by at most the peaks' ratio). Changes whose
gain cannot be told without trying (XLA on this model, more steps per call) are listed as
worth trying, and ``--try`` measures them; a change expected or measured under
:data:`WORTH` is not recommended.
"""

from __future__ import annotations

import dataclasses

__all__ = ["WORTH", "Recommendation", "rank", "recommend", "steps_per_call_change", "xla_change"]

WORTH = 1.05  # a change expected or measured to gain less than this is not recommended
HALF_PEAK_CAP = 2.0  # half precision's peak gain counted at most this (memory-bound steps)
# tfopt.analyze's findings about what trains, not how fast: named first whatever the speed
PIPELINE_WARNINGS = ("cache_after_random",)
INPUT_BOUND = 0.05  # the TensorFlow Profiler's lowest input-bound class starts here
XLA_GPU_GAIN = 1.15  # a published figure, not ours: TensorFlow's XLA page (tensorflow.org/xla)
SMALL_STEP_S = 0.02  # a step this short pays Keras's per-call overhead each call


@dataclasses.dataclass
class Recommendation:
    """One change.

    Attributes:
        kind: "input_pipeline", "precision", "xla", "steps_per_execution", "alignment".
        message: What was seen and what to change, in words.
        code: The few lines to change (or the tfopt call that makes the change).
        expected_speedup: The expected gain of the whole fit, or None where only a trial
            can tell.
        basis: How ``expected_speedup`` was found.
        measured_speedup: The gain ``--try`` measured (the same run, alternating), or None.
        same_training: Under ``--try``, whether the change trained the same (loss within
            tolerance on the same batch), else None.
    """

    kind: str
    message: str
    code: str
    expected_speedup: float | None = None
    basis: str = ""
    measured_speedup: float | None = None
    same_training: bool | None = None
    measurable: bool = True  # False: no trial on a copy can time it (moving layers out), or
    # its trial could not run: kept under --try with its estimate and why

    @property
    def gain(self) -> float | None:
        return self.measured_speedup if self.measured_speedup is not None \
            else self.expected_speedup

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data.pop("measurable")  # the basis says why a change was not measured
        if self.measured_speedup is None:  # the schema: absent when not measured
            data.pop("measured_speedup")
            data.pop("same_training")
        return data


def _input(share: float, fit_rate: float, step_rate: float, input_rate: float | None,
           source: str, bottleneck: str | None, speed_advice: list[dict]) -> Recommendation:
    """``source``: "dataset", "arrays", "dataframe", "generator" or "PyDataset";
    ``speed_advice``: ``tfopt.analyze``'s speed recommendations on a dataset, best first."""
    alone = (f"; the input alone gives {input_rate:,.0f} examples/s" if input_rate else "")
    if alone and source == "dataset":  # tfopt.analyze's rate: start-ups in, as epochs run
        alone += " over whole passes"
    where = f"; its slowest stage: {bottleneck}" if bottleneck else ""
    if speed_advice:
        where += f". tfopt.analyze: {speed_advice[0]['message']}"
    if source == "dataset":
        code = ("train_ds = tfopt.optimize(train_ds)  # parallel map, prefetch, cache: the "
                "rewrites that keep its elements\n# or: tfopt.Run(train_ds, ...) "
                "(docs/run.md)")
    else:
        given = {"dataframe": 'df, label="..."', "arrays": "(x, y)"}.get(source)
        code = (f"run = tfopt.Run({given}, batch_size=..., validation=...)  # an in-memory "
                "tf.data pipeline (docs/run.md)" if given else
                "# a tf.data pipeline with parallel map and prefetch: tf.data.Dataset."
                "from_generator(...).map(..., num_parallel_calls=tf.data.AUTOTUNE)"
                ".prefetch(tf.data.AUTOTUNE)")
    return Recommendation(
        "input_pipeline",
        f"the step waits for input {share:.0%} of its time: {fit_rate:,.0f} examples/s with "
        f"the input, {step_rate:,.0f} with batches held in memory{alone}{where}",
        code, step_rate / fit_rate,
        "the step alone over the step with its input (measured): the most hiding the input "
        "can give")


def _precision(policy: str, machine: tuple[str, str], share: float,
               peak_ratio: float | None, gpus: int) -> Recommendation | None:
    target, reason = machine
    if policy != "float32" or target == "float32":
        return None
    expected = None
    # a CPU's bfloat16 peak (AVX512-BF16, AMX) is reached by large matrix products only: the
    # small layers, casts and per-call overhead of most CPU steps keep it from bounding the gain
    basis = ("a trial tells (--try)" if gpus else
             "a trial tells (--try): on a CPU only large matrix products reach the bfloat16 peak")
    if gpus and peak_ratio is not None and peak_ratio > 1:
        ratio = min(peak_ratio, HALF_PEAK_CAP)
        expected = 1 / (share + (1 - share) / ratio)
        basis = (f"the compute share of the step ({1 - share:.0%}) sped up by the peaks' ratio "
                 f"{peak_ratio:.1f}x (at most {HALF_PEAK_CAP:g}x): an upper estimate")
    return Recommendation(
        "precision",
        f"the model computes in float32, and this machine computes faster in {target} "
        f"({reason})",
        f'keras.mixed_precision.set_global_policy("{target}")  # before the model is built; '
        "keep the last layer's dtype float32",
        expected, basis)


def xla_change(jit: bool, blockers: list[str], axes: list[str], gpus: int,
         refused: bool = False) -> Recommendation | None:
    """``refused``: the script compiled with ``jit_compile=False`` itself, a choice made."""
    if jit or (refused and not blockers):
        return None
    if blockers:
        return Recommendation(
            "xla",
            f"XLA is off: {', '.join(blockers[:5])} cannot be compiled (supports_jit False), "
            "so Keras compiles the whole model without it",
            "# move these layers into the input pipeline: dataset.map(lambda x, y: "
            "(layer(x), y)), and compile(..., jit_compile=True)",
            None, "a trial after the change tells: a copy of this model cannot compile",
            measurable=False)
    if axes:
        return None  # XLA would compile a step for each shape: not worth suggesting
    expected = XLA_GPU_GAIN if gpus else None
    basis = (f"TensorFlow's XLA page, most of its benchmarks on a GPU: {XLA_GPU_GAIN:g}x" if gpus
             else "a trial tells (--try): XLA is often slower on a CPU")
    return Recommendation(
        "xla", "XLA is off (Keras's jit_compile='auto' never tries it on a CPU or under a "
        "strategy)", "model.compile(..., jit_compile=True)", expected, basis)


def steps_per_call_change(spe: int, step_seconds: float) -> Recommendation | None:
    if spe > 1 or step_seconds >= SMALL_STEP_S:
        return None
    return Recommendation(
        "steps_per_execution",
        f"each step ({step_seconds * 1000:.1f} ms) is one call from Python: Keras's per-call "
        "overhead is paid every step",
        "model.compile(..., steps_per_execution=16)", None, "a trial tells (--try)")


def _alignment(unaligned: list[str], gpus: int) -> Recommendation | None:
    if not unaligned or not gpus:
        return None
    return Recommendation(
        "alignment",
        f"under mixed_float16, {len(unaligned)} layer(s) have a size that is not a multiple "
        f"of 8, which keeps tensor cores from their full rate: {', '.join(unaligned[:5])}",
        "# round units/filters up to a multiple of 8", None, "a trial tells")


def recommend(*, input_share: float, fit_rate: float, step_rate: float,
              input_rate: float | None, source: str, bottleneck: str | None,
              pipeline_advice: list[dict], policy: str,
              machine_policy: tuple[str, str], peak_ratio: float | None, jit: bool,
              blockers: list[str], axes: list[str], jit_refused: bool, steps_per_execution: int,
              step_seconds: float, unaligned: list[str], gpus: int,
              noise: float = 0.0) -> list[Recommendation]:
    """Every change worth making or trying, most important first: expected gains at least
    :data:`WORTH`, largest first, then the changes only a trial can judge. ``noise``: the
    rounds' own spread (a share of input wait within it is not told from none)."""
    warnings = [_pipeline_warning(advice) for advice in pipeline_advice
                if advice["kind"] in PIPELINE_WARNINGS]
    speed = sorted((advice for advice in pipeline_advice
                    if advice["kind"] not in PIPELINE_WARNINGS
                    and (advice["expected_speedup"] or 0) >= WORTH),
                   key=lambda advice: -advice["expected_speedup"])
    found = []
    if input_share >= max(INPUT_BOUND, noise) and step_rate / fit_rate >= WORTH:
        found.append(_input(input_share, fit_rate, step_rate, input_rate, source, bottleneck,
                            speed))
    # among changes only a trial can judge, those this fit's own facts point at (layers that
    # block XLA, a step short enough for the per-call overhead to count) before half precision
    # on a CPU, which only the machine's instruction set points at
    for candidate in (xla_change(jit, blockers, axes, gpus, jit_refused),
                      steps_per_call_change(steps_per_execution, step_seconds),
                      _precision(policy, machine_policy, max(input_share, 0.0), peak_ratio,
                                 gpus),
                      _alignment(unaligned, gpus)):
        if candidate is not None:
            found.append(candidate)
    return warnings + rank(found)


def _pipeline_warning(advice: dict) -> Recommendation:
    return Recommendation(
        advice["kind"], f"tfopt.analyze: {advice['message']}",
        "# see `tfopt analyze` on this pipeline (docs/analyze.md)", None,
        "what the model trains on, not how fast: named first", measurable=False)


def rank(found: list[Recommendation]) -> list[Recommendation]:
    """Gains under :data:`WORTH` dropped, the rest largest first, untried ones last; the
    pipeline's warnings first whatever the rest."""
    kept = [r for r in found
            if (r.gain is None or r.gain >= WORTH) and r.same_training is not False]
    if any(r.measured_speedup is not None for r in found):  # --try: only what measured faster
        kept = [r for r in kept if r.measured_speedup is not None or not r.measurable
                or r.kind == "input_pipeline"]
    # what the model trains on first (a cache after random stages), then by gain
    return sorted(kept, key=lambda r: (r.kind not in PIPELINE_WARNINGS, r.gain is None,
                                       -(r.gain or 0.0)))
