"""Keras training workloads from public examples: each example's own ``model.fit`` beside the
same model, data and epochs through ``tfopt.Run``, alternating, in one process.

    python scripts/bench_workloads.py [--work bench-workloads] [--workloads a,b]
                                      [--repeats 1] [--scale 1.0] [--seed 0]
                                      [--xla-trial | --xla-on-off] [--json OUT]

The corpus is ``tfopt.bench.workloads`` (each module cites the keras.io or TensorFlow page it
reproduces and says what it scaled). For each workload the data is made once under --work
(from --seed; nothing is downloaded), then each repeat runs both arms, in turn (the order
swaps every repeat), each on a fresh model and on inputs built anew (a ``cache()`` filled by one
fit serves no other):

- ``keras``: the example's build, ``compile`` and ``fit`` call as it writes them;
- ``tfopt``: ``tfopt.Run(**workload.run_inputs(inputs))``, the model built in ``run.scope()``,
  ``run.compile`` with the example's optimizer, loss and metrics, ``run.fit`` for the same
  epochs with the example's callbacks (``run_inputs`` may add an option the example needs,
  with its reason in the workload's module). An arm that fails is recorded with its error and
  the other workloads go on. With ``--xla-trial`` the run is asked to time XLA whatever the
  epoch's length (``jit_compile="trial"``; its cost is in the fit's time), and the table gives
  the trial's rate with XLA over the rate without.

With ``--xla-on-off`` the two arms are instead ``tfopt.Run`` given ``jit_compile=False``
(``xla_off``) and ``jit_compile=True`` (``xla_on``), everything else as tfopt chooses it: what a
trial's choice of XLA is worth to the whole fit.

A fit's time is whole: build (with the ``adapt`` calls inside the model), compile and fit; the
inputs step (building the example's pipeline, and its ``adapt`` calls outside the model) is
timed apart. The table gives medians over the repeats and the last validation metric of each
arm beside the naive baseline (majority class, training mean or class shares).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

from tfopt.bench.workloads import NAMES  # imports no TensorFlow: --help and bad names are quick

# each mode's two arms: the baseline, then the arm compared with it
ARMS = {"keras": ("keras", "tfopt"), "xla": ("xla_off", "xla_on")}


class NotTaken(Exception):
    """tfopt.Run refused the workload's source: why, in a few words, and the error's text."""

    def __init__(self, reason: str, error_text: str = ""):
        super().__init__(reason)
        self.reason, self.error_text = reason, error_text


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fit_keras(workload, data, epochs: int, seed: int) -> dict:
    import keras

    keras.mixed_precision.set_global_policy("float32")  # whatever the other arm left
    # seeded before the inputs are made, in both arms: a dataset's shuffle draws from the
    # global seed as it stood when the dataset was made, so an arm made after another arm
    # read another order of the same data than one made first
    keras.utils.set_random_seed(seed)
    started = time.perf_counter()
    inputs = workload.inputs(data)
    built = time.perf_counter()
    keras.utils.set_random_seed(seed)
    model = workload.build_model(inputs)
    workload.compile(model)
    history = workload.plain_fit(model, inputs, epochs)
    return _result(workload, history, built - started, time.perf_counter() - built)


def fit_tfopt(workload, data, epochs: int, seed: int, xla_trial: bool = False,
              jit_compile=None) -> dict:
    """``jit_compile``: what the run is given (None: tfopt's default; ``xla_trial`` gives
    "trial")."""
    import keras

    import tfopt
    from tfopt.errors import DatasetError, InvalidArgumentError
    from tfopt.run.config import RunConfig

    # what tfopt.Run raises for a source it cannot read: a path it does not find
    # (DatasetError), or a source its checks refuse (InvalidArgumentError)
    not_taken = (DatasetError, InvalidArgumentError)
    keras.utils.set_random_seed(seed)  # the same data order in both arms, as fit_keras
    started = time.perf_counter()
    inputs = workload.inputs(data)
    built = time.perf_counter()
    keras.utils.set_random_seed(seed)
    given = workload.run_inputs(inputs)
    if xla_trial:
        given["jit_compile"] = "trial"
    if jit_compile is not None:
        given["jit_compile"] = jit_compile
    options = {field.name for field in dataclasses.fields(RunConfig)}
    unknown = sorted(set(given) - options)
    if unknown:
        raise NotTaken(f"no option {', '.join(name + '=' for name in unknown)} for a "
                       f"{describe(given['source'])}")
    try:
        run = tfopt.Run(**given, seed=seed)
    except not_taken as error:  # its text may print the arrays: the JSON keeps a start of it
        raise NotTaken(f"{type(error).__name__} for a {describe(given['source'])}",
                       " ".join(str(error).split())[:300]) from error
    with run.scope():
        model = workload.build_model(inputs)
    run.compile(model, **workload.compile_args())
    history = run.fit(model, epochs=epochs, callbacks=workload.callbacks(inputs), verbose=0)
    result = _result(workload, history, built - started, time.perf_counter() - built)
    mfu = history.history.get("mfu")
    result.update(policy=run.plan.policy, steps_per_execution=int(model.steps_per_execution),
                  xla=str(run.plan.jit_compile).lower(), xla_reason=run.plan.xla_reason,
                  mfu=float(mfu[-1]) if mfu else None,
                  xla_trial={str(key).lower(): rate for key, rate in run.xla_trial.items()})
    return result


def describe(source) -> str:
    """What a source is, in a few words (an error's text may print whole arrays)."""
    import tensorflow as tf

    if isinstance(source, tf.data.Dataset):
        return "tf.data.Dataset"
    if isinstance(source, tuple):
        return f"tuple of {len(source)} arrays"
    if isinstance(source, dict):
        return "dict of columns"
    return type(source).__module__.split(".")[0] + "." + type(source).__name__


def _result(workload, history, inputs_s: float, fit_s: float) -> dict:
    values = history.history
    return {"seconds": fit_s, "inputs_seconds": inputs_s,
            "metric": float(values[workload.metric][-1]),
            "learned": float(values[workload.learned_key][-1]),
            "epochs_run": len(values[workload.metric])}


def bench_workload(workload, work: Path, args) -> dict:
    import keras

    arms = ARMS["xla" if args.xla_on_off else "keras"]
    say(f"{workload.name}: making the data (scale {args.scale}, seed {args.seed})")
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        data = workload.make_data(work / workload.name, args.seed, args.scale)
        baseline = workload.baseline(data)
    record = {"name": workload.name, "kind": workload.kind, "source": list(workload.source),
              "scaled": workload.scaled, "epochs": args.epochs or workload.epochs,
              "metric": workload.metric, "higher_is_better": workload.higher_is_better,
              "baseline": baseline, "train_examples": data.num_train,
              "validation_examples": data.num_validation,
              "table": data.info.get("table_kind"),
              "data_seconds": time.perf_counter() - started,
              "arms": {arm: {"runs": []} for arm in arms}}
    fits = {"keras": fit_keras,
            "tfopt": lambda *given: fit_tfopt(*given, xla_trial=args.xla_trial),
            "xla_off": lambda *given: fit_tfopt(*given, jit_compile=False),
            "xla_on": lambda *given: fit_tfopt(*given, jit_compile=True)}
    for repeat in range(args.repeats):
        order = arms if repeat % 2 == 0 else arms[::-1]
        for arm in order:
            if "skipped" in record["arms"][arm]:
                continue
            keras.backend.clear_session()
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    result = fits[arm](workload, data, record["epochs"], args.seed + repeat)
            except NotTaken as error:
                reason = f"tfopt.Run does not take this source yet ({error.reason})"
                record["arms"][arm]["skipped"] = reason
                record["arms"][arm]["error"] = error.error_text
                say(f"  {arm}: skipped: {reason}")
                continue
            except Exception as error:  # one workload's failure must not lose the others
                reason = f"failed: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
                record["arms"][arm]["skipped"] = reason
                say(f"  {arm}: {reason}")
                continue
            record["arms"][arm]["runs"].append(result)
            say(f"  repeat {repeat + 1}/{args.repeats} {arm:5s} {result['seconds']:7.2f} s "
                f"(inputs {result['inputs_seconds']:.2f} s)  {workload.metric} "
                f"{result['metric']:.4f}  epochs {result['epochs_run']}")
    for arm in arms:
        runs = record["arms"][arm]["runs"]
        if runs:
            record["arms"][arm]["median_seconds"] = statistics.median(r["seconds"] for r in runs)
            record["arms"][arm]["median_metric"] = statistics.median(r["metric"] for r in runs)
            mfus = [r["mfu"] for r in runs if r.get("mfu") is not None]
            if mfus:
                record["arms"][arm]["median_mfu"] = statistics.median(mfus)
            if "xla" in runs[-1]:
                record["arms"][arm]["xla"] = runs[-1]["xla"]
                record["arms"][arm]["xla_reason"] = runs[-1]["xla_reason"]
            gains = [r["xla_trial"]["true"] / r["xla_trial"]["false"] for r in runs
                     if r.get("xla_trial")]
            if gains:
                record["arms"][arm]["median_xla_gain"] = statistics.median(gains)
    return record


def _percent(value):
    return None if value is None else 100 * value


def _cell(value, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value:.{digits}f}"


def table(records: list[dict], repeats: int, arms: tuple[str, str] = ARMS["keras"]) -> str:
    """The results, a row per workload: ``arms`` are the baseline and the arm compared with it
    (whose XLA, MFU and skips the table gives)."""
    base, other = arms
    lines = [f"whole fit (build + compile + fit), median of {repeats} repeat(s); metric: the "
             "last epoch's validation metric",
             f"{'workload':24s} {'kind':13s} {base + ' s':>9s} {other + ' s':>9s} "
             f"{'ratio':>6s} {'metric':12s} {base:>7s} {other:>7s} {'baseline':>8s} "
             f"{'xla':>5s} {'mfu %':>6s} {'xla x':>6s}"]
    for record in records:
        base_arm, other_arm = record["arms"][base], record["arms"][other]
        base_s, other_s = base_arm.get("median_seconds"), other_arm.get("median_seconds")
        ratio = base_s / other_s if base_s and other_s else None
        lines.append(
            f"{record['name']:24s} {record['kind']:13s} {_cell(base_s, 2):>9s} "
            f"{_cell(other_s, 2):>9s} {_cell(ratio, 2):>6s} {record['metric']:12s} "
            f"{_cell(base_arm.get('median_metric'), 4):>7s} "
            f"{_cell(other_arm.get('median_metric'), 4):>7s} "
            f"{_cell(record['baseline'], 4):>8s} {other_arm.get('xla', '-'):>5s} "
            f"{_cell(_percent(other_arm.get('median_mfu')), 3):>6s} "
            f"{_cell(other_arm.get('median_xla_gain'), 2):>6s}")
    tables = [(record["name"], record["table"]) for record in records if record.get("table")]
    if tables:
        lines.append("tables read from CSV as:")
        lines += [f"  {name}: {kind}" for name, kind in tables]
    skipped = [(record["name"], arm, record["arms"][arm]["skipped"]) for record in records
               for arm in arms if "skipped" in record["arms"][arm] and arm != "keras"]
    if skipped:
        lines.append("arm skipped:" if other != "tfopt" else "tfopt arm skipped:")
        lines += [f"  {name}: {reason}" if other == "tfopt" else f"  {name} {arm}: {reason}"
                  for name, arm, reason in skipped]
    reasons = [(record["name"], record["arms"][other]["xla_reason"]) for record in records
               if record["arms"][other].get("xla_reason")]
    if reasons:
        lines.append(f"xla, {other}'s reason:" if other != "tfopt" else "xla, tfopt's reason:")
        lines += [f"  {name}: {reason}" for name, reason in reasons]
    lines.append(f"ratio: {base} s / {other} s (above 1: {other} is faster); xla: {other}'s "
                 "choice (auto: Keras's own rule, untried); mfu: its last epoch, of the CPU's "
                 "peak for its compute dtype; xla x: the XLA trial's rate with XLA over "
                 "without (- where none ran)")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="bench-workloads", type=Path,
                        help="folder for the data [bench-workloads]")
    parser.add_argument("--workloads", default=",".join(NAMES),
                        help=f"comma-separated names [all: {','.join(NAMES)}]")
    parser.add_argument("--repeats", type=int, default=1, help="fits per arm [1]")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="data size as a multiple of each workload's default [1.0]")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and weights [0]")
    parser.add_argument("--epochs", type=int, default=None,
                        help="epochs for every workload [each example's, as scaled]")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--xla-trial", action="store_true",
                       help="time XLA in every tfopt fit (jit_compile='trial')")
    modes.add_argument("--xla-on-off", action="store_true",
                       help="compare tfopt.Run with XLA off and on instead of Keras and tfopt")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.workloads.split(",") if name.strip()]
    unknown = [name for name in names if name not in NAMES]
    if unknown or not names:
        parser.error(f"--workloads: unknown {', '.join(unknown) or '(none given)'}; "
                     f"known: {', '.join(NAMES)}")
    if args.repeats < 1 or not (args.scale > 0 and math.isfinite(args.scale)):
        parser.error("--repeats must be >= 1 and --scale > 0")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tfopt._tf import import_tensorflow

    import_tensorflow()  # without its start-up banners
    from tfopt.bench.workloads import WORKLOADS

    # Keras warns that fit(shuffle=True), its default, is ignored for a tf.data dataset: the
    # examples call fit so, and the warning says nothing about the measurement
    warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed")
    started = time.perf_counter()
    records = [bench_workload(WORKLOADS[name], args.work, args) for name in names]
    print(table(records, args.repeats, ARMS["xla" if args.xla_on_off else "keras"]))
    print(f"total {time.perf_counter() - started:.0f} s")
    if args.json:
        settings = {key: (str(value) if isinstance(value, Path) else value)
                    for key, value in vars(args).items()}
        args.json.write_text(json.dumps({"settings": settings, "workloads": records},
                                        indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
