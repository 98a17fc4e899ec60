"""Trials of a batch size by real training steps: in this process, or each in a fresh one.

:class:`InProcessTrials` is the ``fits(batch_size)`` hook of the search for a model in this
process: a warm-up step, then ``steps`` training steps with their memory measured
(:mod:`tfopt.tune.memory`) against a budget. :func:`isolated_trial` runs one trial in a new
Python process (``python -m tfopt.tune.trials --tfopt-batch-trial REQUEST``) that builds the
model from its ``module:function`` spec and answers one JSON line, so a real GPU OOM cannot leave
this process in a bad state. Imports no TensorFlow; the child imports it.

Example:
    >>> trial = isolated_trial("tfopt.models:compiled_model", {"name": "mlp", "size": "tiny"},
    ...                        batch_size=64, steps=1, memory_budget=None, timeout=120)
    >>> trial.fits
    True
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tfopt._supervisor import Supervisor
from tfopt._text import human_bytes
from tfopt.errors import TfoptError
from tfopt.tune.memory import MemoryProbe
from tfopt.tune.model import ModelState, load_model_spec, synthetic_batch
from tfopt.tune.oom import is_oom_error
from tfopt.tune.results import BatchTrial

__all__ = ["TRIAL_FLAG", "TRIAL_MODULE", "InProcessTrials", "isolated_trial"]

# A trial whose linear extrapolation from the trials before it needs more than this many times
# the budget is not run: on a CPU it would only swap or wake the OOM killer to say "no".
SKIP_FACTOR = 2.0
MIN_EXTRAPOLATION_BATCH = 16  # below this, fixed costs (tracing, kernels) hide the per-example trend
TRIAL_MODULE = "tfopt.tune.trials"  # what the child runs with -m: this module
TRIAL_FLAG = "--tfopt-batch-trial"


class InProcessTrials:
    """``fits(batch_size)`` by real training steps on ``model`` in this process."""

    def __init__(self, model, make_batch, steps: int, memory_budget: int | None, probe):
        self.model, self.make_batch, self.steps = model, make_batch, steps
        self.budget, self.probe = memory_budget, probe
        self.measured: list[tuple[int, int]] = []  # (batch size, bytes) of trials that fit
        # (batch size, bytes) of every trial measured before a larger one ran, fit or not: with
        # resident memory the only trustworthy ones (docs/tune.md)
        self.clean: list[tuple[int, int]] = []
        self.largest_run = 0
        self.warmed = False

    def _interpolated(self, batch_size: int) -> tuple[float, str] | None:
        """Memory of a trial smaller than one already run, from the clean measurements."""
        below = [point for point in self.clean if point[0] < batch_size]
        above = [point for point in self.clean if point[0] > batch_size]
        if below and above:
            (b1, m1), (b2, m2) = max(below), min(above)
        elif len(below) >= 2:
            (b1, m1), (b2, m2) = sorted(below)[-2:]
        else:
            return None
        bytes_needed = m1 + (m2 - m1) * (batch_size - b1) / (b2 - b1)
        return bytes_needed, (f"estimated from the trials at {b1} and {b2}: resident memory "
                              "keeps what a larger trial took")

    def _predicted(self, batch_size: int) -> float | None:
        if len(self.measured) < 2 or self.measured[-2][0] < MIN_EXTRAPOLATION_BATCH:
            return None  # tiny batches are dominated by fixed costs: no trend to extrapolate
        (b1, m1), (b2, m2) = self.measured[-2:]
        per_example = max(0.0, (m2 - m1) / (b2 - b1))
        return m2 + per_example * (batch_size - b2)

    def __call__(self, batch_size: int) -> BatchTrial:
        began = time.perf_counter()
        predicted = self._predicted(batch_size) if self.budget else None
        if predicted is not None and predicted > SKIP_FACTOR * self.budget:
            return BatchTrial(batch_size, False, int(predicted), 0.0,
                              f"not run: extrapolated {human_bytes(predicted)} > "
                              f"{SKIP_FACTOR:g}x budget")
        if not self.warmed:
            # the first step of a process also sets up kernels, thread pools and caches
            # (memory that does not grow with the batch): run it outside the measurement
            self.warmed = True
            self.model.train_on_batch(*self.make_batch(1))
            if self.probe is not None and self.probe.kind == "rss":
                self.probe.rebase()
        x, y = self.make_batch(batch_size)

        def step():
            for _ in range(self.steps):
                self.model.train_on_batch(x, y)

        rss = self.probe is not None and self.probe.kind == "rss"
        estimate = self._interpolated(batch_size) if rss and batch_size < self.largest_run \
            else None
        clean = rss and estimate is None and batch_size > self.largest_run
        self.largest_run = max(self.largest_run, batch_size)
        try:
            if estimate is not None:
                step()  # still run: a real out-of-memory error must count
                peak = int(estimate[0])
            else:
                peak = self.probe.measure(step) if self.probe else step()
        except Exception as error:
            if not is_oom_error(error):
                raise
            return BatchTrial(batch_size, False, None, time.perf_counter() - began,
                              f"{type(error).__name__}: out of memory")
        seconds = time.perf_counter() - began
        if clean and peak is not None:
            self.clean.append((batch_size, peak))
        note = estimate[1] if estimate is not None else ""
        if self.budget is not None and peak is not None and peak > self.budget:
            needs = f"needs {human_bytes(peak)} > budget"
            return BatchTrial(batch_size, False, peak, seconds,
                              f"{needs} ({note})" if note else needs)
        if peak is not None:
            self.measured.append((batch_size, peak))
        return BatchTrial(batch_size, True, peak, seconds, note)


def isolated_trial(spec: str, model_kwargs: dict, batch_size: int, steps: int,
                   memory_budget: int | None, timeout: float | None) -> BatchTrial:
    """One trial in a fresh Python process (this module run with ``-m``)."""
    request = {"spec": spec, "kwargs": model_kwargs, "batch_size": batch_size, "steps": steps,
               "memory_budget": memory_budget}
    env = dict(os.environ)
    # the child imports what this process imports, the current folder included
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *(p for p in sys.path if p)])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # complete allocator statistics on a CPU (docs/tune.md); set before start-up
    env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")
    began = time.perf_counter()
    # a supervised child: killed with this process (kill -9 included), so a trial never keeps
    # holding the accelerator's memory; Ctrl-C reaches this process, which then kills it
    with Supervisor(death_signal=signal.SIGKILL, forward_signals=False) as supervisor:
        process = supervisor.start(
            [sys.executable, "-m", TRIAL_MODULE, TRIAL_FLAG, json.dumps(request)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env)
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            supervisor.stop(signal.SIGKILL)
            process.communicate()
            return BatchTrial(batch_size, False, None, time.perf_counter() - began,
                              f"timed out after {timeout:g} s")
    seconds = time.perf_counter() - began
    if process.returncode < 0:
        # killed by a signal: SIGKILL is what the kernel's OOM killer sends
        return BatchTrial(batch_size, False, None, seconds,
                          f"trial process killed by signal {-process.returncode} "
                          "(out of memory?)")
    answer = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            answer = json.loads(line)
            break
    if process.returncode != 0 or answer is None:
        last = (stderr.strip().splitlines() or ["no output"])[-1]
        raise TfoptError(f"batch-size trial process for batch {batch_size} failed "
                         f"(exit code {process.returncode}): {last}")
    if "error" in answer:
        raise TfoptError(answer["error"])
    return BatchTrial(batch_size, answer["fits"], answer.get("peak_bytes"), seconds,
                      answer.get("detail", ""))


def trial_main(request_json: str) -> int:
    """The child's side of an isolated trial: one JSON line on stdout."""
    from tfopt._tf import import_tensorflow

    request = json.loads(request_json)
    try:
        tf = import_tensorflow()
        model = load_model_spec(request["spec"], **request["kwargs"])
        state = ModelState(model)
        probe = MemoryProbe(tf, state.variable_bytes())
        trials = InProcessTrials(model, lambda b: synthetic_batch(model, b),
                                 request["steps"], request["memory_budget"], probe)
        trial = trials(request["batch_size"])
        answer = {"fits": trial.fits, "peak_bytes": trial.peak_bytes, "detail": trial.detail}
    except TfoptError as error:
        answer = {"error": str(error)}
    except Exception as error:
        if not is_oom_error(error):
            raise
        answer = {"fits": False, "peak_bytes": None,
                  "detail": f"{type(error).__name__}: out of memory"}
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == TRIAL_FLAG:
    sys.exit(trial_main(sys.argv[2]))
