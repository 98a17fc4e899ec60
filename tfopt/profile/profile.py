"""``profile_script``: run a training script unmodified, measure its first ``fit``, say
what holds it back (docs/profile.md)."""

from __future__ import annotations

import time

from tfopt._validate import number, whole_number
from tfopt.profile.advice import (
    Recommendation,
    rank,
    recommend,
    steps_per_call_change,
    xla_change,
)
from tfopt.profile.capture import FitCall, run_script
from tfopt.profile.gpu_activity import sample_gpus
from tfopt.profile.report import ProfileReport

__all__ = ["profile_script"]


ANALYZE_SECONDS = 6.0  # tfopt.analyze's budget on a dataset source
INPUT_SECONDS = 3.0  # arrays or a DataFrame drained alone (a dataset's rate is analyze's)


def _source_kind(x) -> str:
    import tensorflow as tf

    if isinstance(x, tf.data.Dataset):
        return "dataset"
    module = type(x).__module__ or ""
    if module.startswith("pandas"):
        return "dataframe"
    if hasattr(x, "__next__"):
        return "generator"
    if type(x).__name__ != "ndarray" and hasattr(x, "__getitem__") and hasattr(x, "__len__") \
            and hasattr(x, "on_epoch_end"):
        return "PyDataset"
    return "arrays"


def _pipeline(x, kind: str) -> tuple[dict, str | None]:
    if kind != "dataset":
        return {"not_analysed": f"{kind}: read by Keras's own adapter (tfopt.Run builds a "
                "tf.data pipeline for them)"}, None
    from tfopt.analysis.analyze import analyze
    from tfopt.errors import TfoptError

    try:
        report = analyze(x, seconds=ANALYZE_SECONDS)
    except TfoptError as error:
        return {"not_analysed": f"not analysed: {error}"}, None
    found = {"bottleneck": report.bottleneck, "ceiling_per_s": report.ceiling_per_s,
             "rate_per_s": report.rate_per_s,
             "recommendations": [{"kind": r.kind, "stage": r.stage,
                                  "expected_speedup": r.expected_speedup,
                                  "message": r.message} for r in report.recommendations]}
    return found, report.bottleneck


def _measure(call: FitCall, steps: int, seconds: float, trial: bool) -> ProfileReport:
    from tfopt._internals.keras_data import fit_dataset
    from tfopt.profile.facts import model_facts
    from tfopt.profile.measure import (
        ROUNDS,
        batch_size_of,
        held_fit_batches,
        input_rate,
        median_rate,
        spread,
        time_fit,
        time_held,
    )

    started = time.perf_counter()
    arguments = call.arguments
    kind = _source_kind(arguments.get("x"))
    report = ProfileReport(script="", source=kind)
    # the fit's rounds count steps/s (a batch of 1): the batch size is read from the held
    # batches, which must come after the script's data is first read (a generator gives each
    # batch once); the held batches' rounds then alternate with the fit's
    per_round = seconds / (2 * ROUNDS)
    with sample_gpus() as gpus:  # the GPUs' own counters over the timed rounds
        fitted = time_fit(call.fit, call.model, arguments, 1, steps, per_round)
        if fitted is None:
            report.status = "no_fit"
            report.message = ("the fit ended before a step could be timed after the warm-up: "
                              "too few batches to profile")
            return report
        held = held_fit_batches(arguments)
        batch = batch_size_of(held)
        fits, alones = [fitted], []
        for round_ in range(ROUNDS):
            alone = time_held(call.fit, call.model, held, steps, per_round)
            if alone is not None:
                alones.append(alone)
            if round_ < ROUNDS - 1 and kind != "generator":  # a generator may be spent
                again = time_fit(call.fit, call.model, arguments, 1, steps, per_round)
                if again is not None:
                    fits.append(again)
    report.gpu = gpus.activity
    fitted = median_rate(fits)
    alone = median_rate(alones) if alones else None
    fit_rate = fitted.examples_per_s * batch
    step_rate = alone.examples_per_s if alone is not None else fit_rate
    share = max(0.0, 1.0 - fit_rate / step_rate)
    report.notes.append(f"rounds: {len(fits)} with the input, {len(alones)} alone, alternating; "
                        f"their spread {max(spread(fits), spread(alones)):.0%} (a share of input "
                        "wait within it is not told from none)")
    from tfopt.train.timing import classify_input_bound

    spec = fit_dataset(arguments.get("x"), arguments.get("y"), arguments.get("sample_weight"),
                       arguments.get("batch_size"), arguments.get("steps_per_epoch"),
                       arguments.get("class_weight")).element_spec if kind != "generator" \
        else held.element_spec
    facts = model_facts(call.model, spec, batch)
    pipeline, bottleneck = _pipeline(arguments.get("x"), kind)
    # a dataset's input alone is the rate tfopt.analyze measured on it (its elements are the
    # fit's batches): draining it once more for seconds would tell the same
    feed = (pipeline["rate_per_s"] * batch if pipeline.get("rate_per_s")
            else input_rate(arguments, batch, INPUT_SECONDS) if kind != "generator" else None)
    peak_ratio = None
    if facts.peak_flops and facts.gpus:  # a CPU's peaks do not bound its half-precision gain
        from tfopt.train.flops import device_peak

        peak, _ = device_peak(1, facts.replicas, facts.gpus)
        target = facts.machine_policy[0]
        peak_ratio = peak.for_dtype(target) / peak.for_dtype(facts.policy)
    found = recommend(
        input_share=share, fit_rate=fit_rate, step_rate=step_rate, input_rate=feed,
        source=kind, bottleneck=bottleneck,
        pipeline_advice=pipeline.get("recommendations", []), policy=facts.policy,
        machine_policy=facts.machine_policy, peak_ratio=peak_ratio, jit=facts.jit_compile,
        blockers=facts.xla_blockers, axes=facts.variable_axes,
        jit_refused=call.compile_arguments.get("jit_compile", "auto") is False,
        steps_per_execution=facts.steps_per_execution, step_seconds=alone.step_seconds
        if alone is not None else fitted.step_seconds, unaligned=facts.unaligned,
        gpus=facts.gpus, noise=_noise(fits, alones, batch, feed))
    report.examples_per_s, report.step_examples_per_s = fit_rate, step_rate
    report.input_examples_per_s = feed
    report.input_bound_share = share
    report.input_bound = classify_input_bound(100 * share).value
    report.steps = sum(rate.steps for rate in fits)
    report.seconds = sum(rate.seconds for rate in fits)
    report.model, report.mfu = facts, facts.mfu(fit_rate)
    report.pipeline = pipeline
    report.notes.append(
        "the steps timed are the first of the fit's first epoch (a cache() fills in that "
        "epoch, and its filling counts as input); the script's callbacks did not run (they "
        "would write files)")
    if trial:
        step_seconds = alone.step_seconds if alone is not None else fitted.step_seconds
        report.recommendations = _tried(call, held, facts, found, report.trials, step_seconds)
        input_arguments = None
        if "input_pipeline" in {r.kind for r in found}:
            input_arguments = _tried_input(call, kind, per_round, found, report.trials)
            report.recommendations = rank(found)
        from tfopt.profile.together import try_together

        together = try_together(call, held, report.trials, input_arguments, per_round)
        if together is not None:
            report.trials.append(together.to_json())
        report.tried = True
    else:
        report.recommendations = found
    report.profile_seconds = time.perf_counter() - started
    return report


def _noise(fits, alones, batch: int, input_rate: float | None = None) -> float:
    """The rounds' own spread, which a share of input wait must exceed to be told from none.
    0 (a wait whatever the spread) where:

    - the median round alone is at least twice as fast as every round with the input (half
      of each step a wait);
    - the input alone (``input_rate``, examples/s) is no faster than the step alone: it
      cannot keep up, so the step waits;
    - the rounds stand apart, one round of each aside (a pause of the machine's): the median
      round alone faster than every round with the input, every round alone faster than the
      median one with it; and the input is slow enough to cause such a wait
      (:func:`_could_wait`): an input many times faster than the step cannot hold it up.
    """
    from tfopt.profile.measure import median_rate, spread

    if alones:
        with_input = sorted(f.examples_per_s * batch for f in fits)
        median_alone = median_rate(alones).examples_per_s
        if median_alone >= 2 * with_input[-1]:
            return 0.0
        if input_rate is not None and input_rate <= median_alone:
            return 0.0  # the input alone cannot keep up with the step alone: it must wait
        median_fit = median_rate(fits).examples_per_s * batch
        if (median_alone > with_input[-1]
                and min(a.examples_per_s for a in alones) > median_fit
                and _could_wait(1.0 - median_fit / median_alone, median_alone, input_rate)):
            return 0.0
    return max(spread(fits), spread(alones))


def _could_wait(share: float, step_rate: float, input_rate: float | None) -> bool:
    """Whether an input of ``input_rate`` examples/s could make a step of ``step_rate`` wait
    ``share`` of its time: taking turns with it (no prefetch), a step waits
    step / (step + input) of its time; twice that is allowed (on a CPU the input also takes
    the step's cores). Unknown (None): it could."""
    if input_rate is None:
        return True
    return share > 0 and input_rate <= 2 * step_rate * (1.0 - share) / share


def _tried(call: FitCall, held, facts, found: list[Recommendation],
           record: list, step_seconds: float) -> list[Recommendation]:
    from tfopt.profile.advice import SMALL_STEP_S
    from tfopt.profile.trials import MORE_STEPS_PER_CALL, trial_steps, try_changes

    candidates = {}
    by_kind = {r.kind: r for r in found}
    if "precision" in by_kind:
        candidates["precision"] = {"policy": facts.machine_policy[0]}
    if not facts.jit_compile and not facts.xla_blockers and not facts.variable_axes:
        candidates["xla"] = {"jit_compile": True}
    if facts.steps_per_execution == 1 and step_seconds < SMALL_STEP_S:
        # a longer step pays Keras's per-call overhead in a share too small to matter
        candidates["steps_per_execution"] = {"steps_per_execution": MORE_STEPS_PER_CALL}
    if not candidates:
        return found
    steps = trial_steps(step_seconds, MORE_STEPS_PER_CALL if "steps_per_execution" in candidates
                        else 1)
    for trial in try_changes(call.model, call.compile_arguments, held, candidates, steps):
        record.append({"kind": trial.kind, "change": candidates[trial.kind],
                       "measured_speedup": trial.ratio, "same_training": trial.same_training,
                       "loss": trial.loss, "unchanged_loss": trial.base_loss,
                       **({"reason": trial.reason} if trial.reason else {})})
        if trial.reason:  # not run at all: the estimate stands, with why it was not measured
            found_one = by_kind.get(trial.kind)
            if found_one is not None:
                found_one.basis += f"; not measured: {trial.reason}"
                found_one.measurable = False
            continue
        found_one = by_kind.get(trial.kind)
        if found_one is None:  # tried though not suggested: XLA on a CPU, a longer step
            found_one = (xla_change(False, [], [], facts.gpus) if trial.kind == "xla"
                         else steps_per_call_change(1, 0.0))
            found.append(found_one)
        found_one.measured_speedup = trial.ratio
        found_one.same_training = trial.same_training
        if not trial.same_training:
            found_one.basis = (f"not timed: its loss on one batch ({trial.loss:.6g}) is not "
                               f"the unchanged model's ({trial.base_loss:.6g})")
        elif trial.ratio is not None:
            found_one.basis = "the step alone, measured against the unchanged model"
    return rank(found)


def _tried_input(call: FitCall, kind: str, seconds: float, found: list[Recommendation],
                 record: list) -> dict | None:
    """Measure the input recommendation: the fit on tfopt's input against the script's.
    Returns the fit's arguments with tfopt's input, where it was built."""
    from tfopt.profile.input_trial import try_input

    trial = try_input(call.fit, call.model, call.arguments, kind, seconds)
    record.append({"kind": "input_pipeline", "change": trial.changes,
                   "measured_speedup": trial.ratio, "same_training": True,
                   **({"reason": trial.reason} if trial.reason else {}),
                   **({"first_epoch_speedup": trial.first_epoch_ratio}
                      if trial.first_epoch_ratio is not None else {})})
    recommendation = next(r for r in found if r.kind == "input_pipeline")
    if trial.ratio is None:
        recommendation.basis += f"; not measured: {trial.reason}"
        return None
    recommendation.measured_speedup = trial.ratio
    recommendation.same_training = True  # the same examples: optimize keeps them and their order
    recommendation.basis = ("the fit on tfopt's input against the script's, the same model, "
                            "alternating rounds (measured): " + "; ".join(trial.changes))
    if trial.first_epoch_ratio is not None and trial.first_epoch_ratio != trial.ratio:
        recommendation.basis += (f"; the epochs after the first, the cache filled (the first "
                                 f"epoch, filling it: {trial.first_epoch_ratio:.2f}x)")
    elif trial.first_epoch_ratio is not None:
        recommendation.basis += "; the first epoch's (a pass is too long to fill the cache)"
    return trial.fit_arguments


def profile_script(script, args=(), *, steps: int = 60, seconds: float = 20.0, fit: int = 1,
                   trial: bool = False) -> ProfileReport:
    """Run ``script`` with ``args`` as ``python SCRIPT ARGS`` would, measure its ``fit``-th
    ``Model.fit`` for ``steps`` steps or ``seconds`` (whichever ends first) after a warm-up,
    stop the script there, and report what holds the training back.

    Args:
        script: The training script (a path).
        args: Its command-line arguments.
        steps: Steps to time after the warm-up (whole calls of ``steps_per_execution``).
        seconds: At most this long timing them.
        fit: Which ``fit`` call to profile (1: the first).
        trial: Measure the model-side changes (precision, XLA, steps per call) on copies of
            the model instead of estimating them (``--try``).

    Returns:
        A :class:`~tfopt.profile.report.ProfileReport`.
    """
    steps = whole_number(steps, "steps", minimum=1)
    seconds = number(seconds, "seconds", low=0.0, open_low=True)
    outcome = run_script(script, list(args),
                         lambda call: _measure(call, steps, seconds, trial), fit_number=fit)
    if outcome.result is None:
        return ProfileReport(script=str(script), status=outcome.status,
                             message=outcome.message)
    report = outcome.result
    report.script = str(script)
    return report
