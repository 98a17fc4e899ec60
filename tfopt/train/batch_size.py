"""Batch size by experiment: the largest batch that fits, and the fastest one.

Two measurements, one question each:

- :func:`find_batch_size` answers "how large can the batch be?": trial training steps at
  1, 2, 4, ... examples until one runs out of memory (or reaches ``max_batch_size``), then a
  binary search between the last batch that fit and the first that did not, in steps of
  ``granularity`` (8: multiples of 8 suit tensor cores and vector units). A safety margin
  keeps 90 % of the largest batch that fit, rounded down to a multiple of 8, since memory use
  varies from step to step (ragged inputs, allocator fragmentation, a validation pass). The
  model's weights and optimizer variables are restored after the trials.
- :func:`throughput_sweep` answers "which batch size trains fastest?": a few timed steps per
  batch size (warm-up excluded), examples/s for each; it picks the fastest, or the smallest
  within ``tolerance`` of the fastest (smaller batches generalise as well or better and leave
  memory free).

What "out of memory" means:

- On a GPU it is TensorFlow's ``ResourceExhaustedError`` and its other forms
  (:func:`is_oom_error`). TensorFlow does not always recover from a real GPU OOM in the same
  process, so ``isolate=True`` runs every trial in a fresh Python process; the model is then
  given as an importable ``"module:function"`` spec.
- On a CPU, running out of RAM means swapping or the kernel's OOM killer, not an exception, so
  a memory budget stands in for GPU memory: a trial whose step needs more than
  ``memory_budget`` bytes counts as out of memory. The bytes are the peak of TensorFlow's own
  allocator during the step (``tf.config.experimental.get_memory_info``), which counts the
  tensors alive at the time (weights, optimizer slots, activations, gradients) as a GPU's
  memory does. On a CPU the allocator keeps complete statistics only when TensorFlow started
  with ``TF_CPU_ALLOCATOR_USE_BFC=1`` (its default allocator missed small tensors here: 0 bytes
  for a whole training step at batch 128); isolated trials and ``tfopt tune batch-size`` set
  it. Otherwise the process's resident memory is sampled every millisecond during the step:
  its growth over the resident memory before the trials, plus the model's and optimizer's
  variables. That fallback is approximate and errs on the large side. It can measure a trial
  only while no larger one has run: the memory a larger trial took stays resident (malloc and
  TensorFlow keep it, ``malloc_trim`` does not give it back), so a later, smaller trial would
  count it again (measured: 115 MB for batch 136 after 256 had needed 105 MB, and 58 MB for 128
  before it), or, taken as the new baseline, hardly grow at all (0.1 MB for batch 504). So
  the binary search's trials, all smaller than the first one that failed, still run their step
  (a real out-of-memory error still counts) but their memory is interpolated linearly between
  the nearest trials measured below and above them (memory per step is close to linear in the
  batch size: 23, 35, 58 and 105 MB at 32, 64, 128 and 256 here); the detail column says so.

The OOM decision is a plain function ``fits(batch_size) -> bool`` (:func:`search_batch_size`),
so the search is tested, and can be driven, without a model.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tfopt._text import human_bytes, table
from tfopt._validate import whole_number
from tfopt.errors import InvalidArgumentError, TfoptError

__all__ = [
    "BatchSizeResult",
    "BatchTrial",
    "SweepPoint",
    "SweepResult",
    "apply_margin",
    "find_batch_size",
    "is_oom_error",
    "load_model_spec",
    "pick_batch_size",
    "search_batch_size",
    "throughput_sweep",
]

logger = logging.getLogger("tfopt")

DEFAULT_MAX_BATCH_SIZE = 4096
DEFAULT_GRANULARITY = 8  # binary-search step; multiples of 8 fill tensor cores and SIMD lanes
DEFAULT_MARGIN = 0.9  # keep 90 % of the largest batch that fit: steps vary in memory use
MARGIN_MULTIPLE = 8  # the recommended batch is rounded down to a multiple of this
DEFAULT_TOLERANCE = 0.05  # the sweep's "within 5 % of the best"
# A trial whose linear extrapolation from the trials before it needs more than this many times
# the budget is not run: on a CPU it would only swap or wake the OOM killer to say "no".
SKIP_FACTOR = 2.0
MIN_EXTRAPOLATION_BATCH = 16  # below this, fixed costs (tracing, kernels) hide the per-example trend
_RSS_SAMPLE_SECONDS = 0.001  # 1 ms between resident-memory samples during a CPU trial step

# Lower-case fragments of the messages TensorFlow, XLA, cuDNN and the allocators give when
# memory runs out in a form other than ResourceExhaustedError (InternalError, UnknownError).
_OOM_PHRASES = ("out of memory", "resource exhausted", "resource_exhausted", "failed to allocate",
                "cuda_error_out_of_memory", "cudnn_status_alloc_failed")


def is_oom_error(error: BaseException) -> bool:
    """Whether an exception means "out of memory", in any of the forms TensorFlow raises it.

    True for ``tf.errors.ResourceExhaustedError``, Python's ``MemoryError``, and other
    TensorFlow errors (``InternalError``, ``UnknownError``, XLA's ``RuntimeError``) whose message
    says so ("OOM", "out of memory", "failed to allocate", ...). The exception's causes
    (``__cause__``/``__context__``) are checked too, since Keras re-raises some of them.

    Args:
        error: The exception caught around a training step.

    Example:
        >>> is_oom_error(MemoryError())
        True
    """
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, MemoryError) or type(error).__name__ == "ResourceExhaustedError":
            return True
        message = str(error).lower()
        if any(phrase in message for phrase in _OOM_PHRASES):
            return True
        # "OOM" as a word ("OOM when allocating tensor"), not inside "room" or "zoom"
        if "oom" in "".join(ch if ch.isalnum() else " " for ch in message).split():
            return True
        error = error.__cause__ or error.__context__
    return False


# -- results ---------------------------------------------------------------------------------


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
    """What :func:`find_batch_size` or :func:`search_batch_size` found.

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
    """The throughput of one batch size in :func:`throughput_sweep`.

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


# -- the search ------------------------------------------------------------------------------


def _check_positive_int(name: str, value) -> int:
    return whole_number(value, name, 1, "a positive integer")


def _check_compiled(model, function: str) -> None:
    """A compiled Keras model, or an error that says what ``model`` is and what to do."""
    if not hasattr(model, "train_on_batch"):
        raise InvalidArgumentError(
            f"{function}(model): expected a compiled Keras model"
            f"{' or a module:function spec' if function == 'find_batch_size' else ''}, got "
            f"{type(model).__name__} {model!r:.80}")
    if getattr(model, "optimizer", None) is None:
        raise InvalidArgumentError(
            f"{function}(model): model {getattr(model, 'name', '')!r} is not compiled; call "
            "model.compile(optimizer, loss) first (the trials train it)")


def apply_margin(largest_fit: int, margin: float = DEFAULT_MARGIN,
                 multiple: int = MARGIN_MULTIPLE) -> int:
    """The batch size to use, given the largest that fit: ``margin`` of it, rounded down.

    Rounded down to a multiple of ``multiple`` when the result is at least ``multiple``; below
    that, rounded down to an integer of at least 1.

    Args:
        largest_fit: The largest batch size that fit.
        margin: Fraction kept, in (0, 1]. Defaults to 0.9.
        multiple: Round down to a multiple of this. Defaults to 8.

    Raises:
        InvalidArgumentError: A value out of range.

    Example:
        >>> apply_margin(296)
        264
    """
    largest_fit = _check_positive_int("largest_fit", largest_fit)
    multiple = _check_positive_int("multiple", multiple)
    if not 0 < margin <= 1:
        raise InvalidArgumentError(f"margin={margin!r}: expected a fraction in (0, 1], e.g. 0.9")
    # 1e-9: 0.9 * 80 is 72.00000000000001 or 71.99999999999999 depending on the operands
    kept = math.floor(largest_fit * margin + 1e-9)
    if kept >= multiple:
        return kept - kept % multiple
    return max(1, kept)


def _as_trial(batch_size: int, answer, seconds: float) -> BatchTrial:
    if isinstance(answer, BatchTrial):
        return answer
    return BatchTrial(batch_size, bool(answer), seconds=seconds)


def search_batch_size(
    fits: Callable[[int], bool | BatchTrial],
    *,
    start: int = 1,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    granularity: int = DEFAULT_GRANULARITY,
    margin: float = DEFAULT_MARGIN,
    on_trial: Callable[[BatchTrial], None] | None = None,
) -> BatchSizeResult:
    """The largest batch size for which ``fits`` says yes: doubling, then binary search.

    Growth: ``start``, ``2*start``, ``4*start``, ... until a trial fails or ``max_batch_size``
    is reached (the limit itself is tried). Then a binary search between the largest size that
    fit and the smallest that failed, over multiples of ``granularity`` (over all integers
    while the largest fit is below ``granularity``). ``fits`` is assumed monotonic (a batch
    that fits makes every smaller one fit). The number of trials is about
    ``log2(largest / start) + log2(largest / granularity)``.

    Args:
        fits: ``fits(batch_size)`` returns True/False or a :class:`BatchTrial`; an exception
            that :func:`is_oom_error` recognises counts as False, any other propagates.
        start: The first batch size tried. Defaults to 1.
        max_batch_size: The largest batch size tried. Defaults to 4096.
        granularity: Step of the binary search. Defaults to 8.
        margin: Fraction of the largest fit recommended. Defaults to 0.9.
        on_trial: Called with each :class:`BatchTrial` as it ends (progress lines).
            Defaults to None.

    Returns:
        A :class:`BatchSizeResult` with every trial.

    Raises:
        InvalidArgumentError: A value out of range.

    Example:
        >>> result = search_batch_size(lambda b: b <= 300)
        >>> result.largest_power_of_two, result.largest_fit, result.recommended
        (256, 296, 264)
    """
    start = _check_positive_int("start", start)
    max_batch_size = _check_positive_int("max_batch_size", max_batch_size)
    granularity = _check_positive_int("granularity", granularity)
    if start > max_batch_size:
        raise InvalidArgumentError(f"start={start} is above max_batch_size={max_batch_size}")
    apply_margin(1, margin)  # validates the margin before any trial runs
    trials: list[BatchTrial] = []

    def attempt(batch_size: int) -> bool:
        began = time.perf_counter()
        try:
            answer = fits(batch_size)
        except Exception as error:
            if not is_oom_error(error):
                raise
            answer = BatchTrial(batch_size, False, seconds=time.perf_counter() - began,
                                detail=f"{type(error).__name__}: out of memory")
        trial = _as_trial(batch_size, answer, time.perf_counter() - began)
        trials.append(trial)
        if on_trial is not None:
            on_trial(trial)
        logger.info("batch-size trial %d: %s", batch_size, "fits" if trial.fits else
                    f"does not fit ({trial.detail})" if trial.detail else "does not fit")
        return trial.fits

    largest, failed, capped = 0, None, False
    size = start
    while True:
        size = min(size, max_batch_size)
        if not attempt(size):
            failed = size
            break
        largest = size
        if size == max_batch_size:
            capped = True
            break
        size *= 2
    if failed is not None:
        # invariant: largest fits (0 = nothing known), failed does not
        while True:
            step = granularity if largest >= granularity else 1
            low, high = largest // step, -(-failed // step)  # candidates: step * (low, high)
            if high - low <= 1:
                break
            candidate = step * ((low + high) // 2)
            if attempt(candidate):
                largest = candidate
            else:
                failed = candidate
    if largest == 0:
        return BatchSizeResult(None, None, tuple(trials), max_batch_size, margin, False)
    recommended = largest if capped else apply_margin(largest, margin)
    return BatchSizeResult(largest, recommended, tuple(trials), max_batch_size, margin, capped)


# -- models and data -------------------------------------------------------------------------


def _split_spec(spec) -> tuple[str, str]:
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise InvalidArgumentError(
            f"model spec {spec!r}: expected 'module:function' (e.g. 'my_models:build_cnn'), a "
            "function that returns a compiled Keras model")
    module_name, function_name = spec.split(":")
    return module_name, function_name


def load_model_spec(spec: str, **kwargs):
    """Call the ``module:function`` named by ``spec`` and return the model it builds.

    The current directory is importable (as for ``python -m``), so ``models:build`` finds
    ``./models.py``. The function must return a compiled Keras model.

    Args:
        spec: ``"package.module:function"``.
        **kwargs: Passed to the function.

    Raises:
        InvalidArgumentError: The spec is malformed, the module or function cannot be found,
            or the result is not a compiled Keras model.

    Example:
        >>> model = load_model_spec("my_project.models:build_classifier")
    """
    module_name, function_name = _split_spec(spec)
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidArgumentError(
            f"model spec {spec!r}: cannot import module {module_name!r} ({error}); run from "
            "the folder that holds it or add that folder to PYTHONPATH") from error
    function = getattr(module, function_name, None)
    if not callable(function):
        raise InvalidArgumentError(
            f"model spec {spec!r}: module {module_name!r} has no function {function_name!r}")
    model = function(**kwargs)
    if not hasattr(model, "train_on_batch") or getattr(model, "optimizer", None) is None:
        raise InvalidArgumentError(
            f"model spec {spec!r}: {function_name}() returned {type(model).__name__}, expected a "
            "compiled Keras model (call model.compile(...) before returning it)")
    return model


_BUILTINS = ("cnn", "mlp")
MIN_BUILTIN_IMAGE_SIZE = 8  # the built-in cnn halves its input three times


def _builtin_model(name: str, image_size: int = 32, classes: int = 10):
    """A tiny compiled model for ``tfopt tune batch-size --builtin`` (private to this module).

    Deliberately small so that trials run in seconds on a CPU; ``tfopt bench train`` has its
    own, larger built-in models. Both take uint8 images of ``image_size`` px and scale them in
    the model (the way tfopt pipelines deliver images); labels are class indices.
    """
    import keras

    if name not in _BUILTINS:
        raise InvalidArgumentError(f"builtin={name!r}: expected one of {', '.join(_BUILTINS)}")
    if not isinstance(image_size, int) or image_size < MIN_BUILTIN_IMAGE_SIZE:
        raise InvalidArgumentError(f"image_size={image_size!r}: expected an int of at least "
                                   f"{MIN_BUILTIN_IMAGE_SIZE} px")
    layers = keras.layers
    inputs = keras.Input((image_size, image_size, 3), dtype="uint8")
    x = layers.Rescaling(1 / 255)(inputs)
    if name == "mlp":
        x = layers.Flatten()(x)
        x = layers.Dense(128, activation="relu")(x)
    else:
        for filters in (16, 32, 64):
            x = layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
            x = layers.BatchNormalization()(x)
            x = layers.MaxPooling2D()(x)
        x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(classes, dtype="float32")(x)
    model = keras.Model(inputs, outputs, name=f"tfopt_tune_{name}")
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _loss_name(model) -> str:
    loss = getattr(model, "loss", None)
    if isinstance(loss, str):
        return loss
    return str(getattr(loss, "name", None) or getattr(loss, "__name__", None)
               or type(loss).__name__)


def _synthetic_batch(model, batch_size: int, seed: int = 0):
    """Random ``(x, y)`` of the model's input and output shapes: memory depends on shapes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if not getattr(model, "inputs", None):
        raise InvalidArgumentError(
            f"model {model.name!r} has no known input shape (a subclassed model?): pass "
            "make_batch=lambda batch_size: (x, y)")
    xs = []
    for tensor in model.inputs:
        shape = tuple(tensor.shape)[1:]
        if any(side is None for side in shape):
            raise InvalidArgumentError(
                f"model input {tensor.name!r} has shape {tensor.shape} with unknown sides: pass "
                "make_batch=lambda batch_size: (x, y)")
        dtype = str(tensor.dtype)
        if "int" in dtype:
            high = 256 if dtype == "uint8" else 2
            xs.append(rng.integers(0, high, (batch_size, *shape)).astype(dtype))
        else:
            xs.append(rng.random((batch_size, *shape), dtype="float32"))
    out_shape = tuple(model.outputs[0].shape)[1:]
    if "sparse" in _loss_name(model).lower():
        y = rng.integers(0, max(1, out_shape[-1] if out_shape else 1), (batch_size,))
    else:
        y = rng.random((batch_size, *out_shape), dtype="float32")
    return (xs[0] if len(xs) == 1 else xs), y


# -- state and memory ------------------------------------------------------------------------


class _ModelState:
    """Weights and optimizer variables saved before trials and put back after them."""

    def __init__(self, model):
        self.model = model
        optimizer = getattr(model, "optimizer", None)
        if optimizer is not None and not getattr(optimizer, "built", True):
            # build it now, so the variables the trials create exist (at their initial values)
            # in the snapshot and are reset with the rest
            optimizer.build(model.trainable_variables)
        self.optimizer_variables = list(getattr(optimizer, "variables", None) or [])
        self.weights = model.get_weights()
        self.optimizer_values = [v.numpy() for v in self.optimizer_variables]

    def variable_bytes(self) -> int:
        return int(sum(w.nbytes for w in self.weights) + sum(v.nbytes for v in self.optimizer_values))

    def restore(self) -> None:
        self.model.set_weights(self.weights)
        for variable, value in zip(self.optimizer_variables, self.optimizer_values, strict=True):
            variable.assign(value)
        if hasattr(self.model, "reset_metrics"):
            self.model.reset_metrics()


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class _RssSampler:
    """The peak resident memory of this process while a block runs (sampled every 1 ms)."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _resident_bytes() or 0)
            self._stop.wait(_RSS_SAMPLE_SECONDS)

    def __enter__(self):
        self.peak = _resident_bytes() or 0
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _resident_bytes() or 0)
        return False


class _MemoryProbe:
    """Measures the memory a training step needs, the best way this process allows."""

    def __init__(self, tf, extra_bytes: int):
        self.tf = tf
        self.extra_bytes = extra_bytes
        gpus = tf.config.list_logical_devices("GPU")
        self.device = "GPU:0" if gpus else "CPU:0"
        self.kind = "rss"
        if gpus or os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() in ("1", "true"):
            self.kind = "tf-allocator"
        self.baseline = _resident_bytes()
        if self.kind == "rss" and self.baseline is None:
            self.kind = "none"

    def rebase(self) -> None:
        """Take the resident memory now as the baseline (after the warm-up step)."""
        self.baseline = _resident_bytes()

    def measure(self, step: Callable[[], None]) -> int | None:
        if self.kind == "tf-allocator":
            self.tf.config.experimental.reset_memory_stats(self.device)
            step()
            return int(self.tf.config.experimental.get_memory_info(self.device)["peak"])
        if self.kind == "rss":
            with _RssSampler() as sampler:
                step()
            return max(0, sampler.peak - self.baseline) + self.extra_bytes
        step()
        return None


def _default_budget(tf) -> int | None:
    """Half of the memory available now on a CPU-only machine; None where there is a GPU."""
    if tf.config.list_logical_devices("GPU"):
        return None
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    return 2 << 30


class _InProcessTrials:
    """``fits(batch_size)`` by real training steps on ``model`` in this process."""

    def __init__(self, model, make_batch, steps: int, memory_budget: int | None, probe):
        self.model, self.make_batch, self.steps = model, make_batch, steps
        self.budget, self.probe = memory_budget, probe
        self.measured: list[tuple[int, int]] = []  # (batch size, bytes) of trials that fit
        # (batch size, bytes) of every trial measured before a larger one ran, fit or not: with
        # resident memory the only trustworthy ones (module docstring)
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
            # (about 20 MB on a CPU here, whatever the batch): run it outside the measurement
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


# -- isolated trials -------------------------------------------------------------------------

_TRIAL_FLAG = "--tfopt-batch-trial"


def _isolated_trial(spec: str, model_kwargs: dict, batch_size: int, steps: int,
                    memory_budget: int | None, timeout: float | None) -> BatchTrial:
    """One trial in a fresh Python process (this module run with ``-m``)."""
    request = {"spec": spec, "kwargs": model_kwargs, "batch_size": batch_size, "steps": steps,
               "memory_budget": memory_budget}
    env = dict(os.environ)
    # the child imports what this process imports, the current folder included
    env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *(p for p in sys.path if p)])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # complete allocator statistics on a CPU (see the module docstring); set before start-up
    env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "1")
    began = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tfopt.train.batch_size", _TRIAL_FLAG, json.dumps(request)],
            capture_output=True, text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return BatchTrial(batch_size, False, None, time.perf_counter() - began,
                          f"timed out after {timeout:g} s")
    seconds = time.perf_counter() - began
    if done.returncode < 0:
        # killed by a signal: SIGKILL is what the kernel's OOM killer sends
        return BatchTrial(batch_size, False, None, seconds,
                          f"trial process killed by signal {-done.returncode} (out of memory?)")
    answer = None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            answer = json.loads(line)
            break
    if done.returncode != 0 or answer is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise TfoptError(f"batch-size trial process for batch {batch_size} failed "
                         f"(exit code {done.returncode}): {last}")
    if "error" in answer:
        raise TfoptError(answer["error"])
    return BatchTrial(batch_size, answer["fits"], answer.get("peak_bytes"), seconds,
                      answer.get("detail", ""))


def _trial_main(request_json: str) -> int:
    """The child's side of an isolated trial: one JSON line on stdout."""
    from tfopt._tf import import_tensorflow

    request = json.loads(request_json)
    try:
        tf = import_tensorflow()
        model = load_model_spec(request["spec"], **request["kwargs"])
        state = _ModelState(model)
        probe = _MemoryProbe(tf, state.variable_bytes())
        trials = _InProcessTrials(model, lambda b: _synthetic_batch(model, b),
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


# -- the finder ------------------------------------------------------------------------------


def find_batch_size(
    model,
    *,
    isolate: bool = False,
    model_kwargs: dict | None = None,
    make_batch: Callable[[int], tuple] | None = None,
    memory_budget: int | None | str = "auto",
    start: int = 1,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
    granularity: int = DEFAULT_GRANULARITY,
    margin: float = DEFAULT_MARGIN,
    steps: int = 1,
    trial_timeout: float | None = None,
    on_trial: Callable[[BatchTrial], None] | None = None,
) -> BatchSizeResult:
    """The largest batch size a model trains with, found by real training steps.

    Runs ``steps`` training steps (``model.train_on_batch``) per trial batch size, searching as
    :func:`search_batch_size` does. In process, the model's weights, optimizer variables and
    metrics are restored afterwards (an unbuilt optimizer is built first, so its variables are
    reset to their initial values). With ``isolate=True`` every trial runs in a new Python
    process that builds the model from its spec, so a real GPU OOM cannot leave this process
    in a bad state (each trial then pays for TensorFlow's start-up, a few seconds).

    Args:
        model: A compiled Keras model, or a ``"module:function"`` spec that builds one
            (required with ``isolate=True``).
        isolate: Run each trial in a subprocess. Defaults to False.
        model_kwargs: Keyword arguments for the spec's function. Defaults to none.
        make_batch: ``make_batch(batch_size) -> (x, y)`` for the trials. Defaults to random
            data of the model's input and output shapes (memory depends only on shapes).
            Not available with ``isolate=True``.
        memory_budget: Bytes a trial step may use, standing in for GPU memory on a CPU;
            ``"auto"`` means half of the RAM available now on a CPU-only machine and no
            budget where there is a GPU (its own memory limits). None: no budget.
            Defaults to "auto".
        start: The first batch size tried. Defaults to 1.
        max_batch_size: The largest batch size tried. Defaults to 4096.
        granularity: Step of the binary search. Defaults to 8.
        margin: Fraction of the largest fit recommended. Defaults to 0.9.
        steps: Training steps per trial (the peak of a step is reached in the first).
            Defaults to 1.
        trial_timeout: Seconds an isolated trial may take before it counts as failed.
            Defaults to None (no limit).
        on_trial: Called with each :class:`BatchTrial` as it ends. Defaults to None.

    Returns:
        A :class:`BatchSizeResult`.

    Raises:
        InvalidArgumentError: A bad spec or value, ``isolate=True`` with a model object.
        TfoptError: An isolated trial failed for a reason other than memory.

    Example:
        >>> result = find_batch_size(model, memory_budget=2 << 30)
        >>> print(result.describe())
        >>> model.fit(data.batch(result.recommended))
    """
    from tfopt._tf import import_tensorflow

    tf = import_tensorflow()
    steps = _check_positive_int("steps", steps)
    model_kwargs = dict(model_kwargs or {})
    budget = _default_budget(tf) if memory_budget == "auto" else memory_budget
    if budget is not None:
        budget = _check_positive_int("memory_budget", budget)
    notes = []
    search = dict(start=start, max_batch_size=max_batch_size, granularity=granularity,
                  margin=margin, on_trial=on_trial)
    if isolate:
        if not isinstance(model, str):
            raise InvalidArgumentError(
                f"isolate=True needs the model as a 'module:function' spec (each trial builds "
                f"it in a new process), got a {type(model).__name__}")
        if make_batch is not None:
            raise InvalidArgumentError("make_batch cannot cross into isolated trials: leave it "
                                       "unset (trials use random data of the model's shapes)")
        _split_spec(model)  # the child imports it; its form is checked here, before a trial
        result = search_batch_size(
            lambda b: _isolated_trial(model, model_kwargs, b, steps, budget, trial_timeout),
            **search)
        measure = "isolated"
        notes.append("each trial ran in its own process")
    else:
        if isinstance(model, str):
            model = load_model_spec(model, **model_kwargs)
        _check_compiled(model, "find_batch_size")
        state = _ModelState(model)
        probe = _MemoryProbe(tf, state.variable_bytes()) if budget is not None or \
            tf.config.list_logical_devices("GPU") else None
        batch_fn = make_batch or (lambda b: _synthetic_batch(model, b))
        trials = _InProcessTrials(model, batch_fn, steps, budget, probe)
        try:
            result = search_batch_size(trials, **search)
        finally:
            state.restore()
        measure = probe.kind if probe else "none"
        if measure == "rss":
            notes.append("memory is the process's resident-memory growth during a step plus the "
                         "variables: approximate, on the large side, and interpolated for "
                         "trials smaller than one already run; for exact numbers set "
                         "TF_CPU_ALLOCATOR_USE_BFC=1 before TensorFlow starts, or isolate=True")
    if make_batch is None:
        notes.append("trials trained on random data of the model's shapes")
    return dataclasses.replace(result, memory_budget=budget, memory_measure=measure,
                               notes=tuple(notes))


# -- the sweep -------------------------------------------------------------------------------


def pick_batch_size(rates: dict[int, float], tolerance: float = DEFAULT_TOLERANCE) -> tuple[int, int]:
    """The best batch size by examples/s, and the smallest within ``tolerance`` of it.

    Args:
        rates: Examples/s per batch size.
        tolerance: Fraction of the best's examples/s a smaller batch may lose, in [0, 1).
            Defaults to 0.05.

    Returns:
        ``(best, chosen)``.

    Raises:
        InvalidArgumentError: No rates, or a tolerance out of range.

    Example:
        >>> pick_batch_size({32: 900.0, 64: 980.0, 128: 1000.0})
        (128, 64)
    """
    if not rates:
        raise InvalidArgumentError("rates is empty: sweep at least one batch size")
    if not 0 <= tolerance < 1:
        raise InvalidArgumentError(f"tolerance={tolerance!r}: expected a fraction in [0, 1), "
                                   "e.g. 0.05 for 5 %")
    best = max(rates, key=lambda b: (rates[b], -b))
    floor = rates[best] * (1 - tolerance)
    chosen = min(b for b, rate in rates.items() if rate >= floor)
    return best, chosen


def throughput_sweep(
    model,
    batch_sizes: Sequence[int],
    *,
    dataset_fn: Callable[[int], Any] | None = None,
    steps: int = 10,
    warmup: int = 2,
    tolerance: float = DEFAULT_TOLERANCE,
    restore: bool = True,
    clock: Callable[[], float] = time.perf_counter,
    on_point: Callable[[SweepPoint], None] | None = None,
) -> SweepResult:
    """Training examples/s of a model at each batch size, and the batch size to pick.

    For each batch size: ``warmup`` untimed steps (tracing, allocator growth), then ``steps``
    steps timed one by one with ``clock``; examples/s is the batch size over the median step
    time, which shrugs off a step disturbed by other work on the machine. With ``dataset_fn``
    each step takes its next batch from that dataset, so input time counts as in ``fit``;
    without it one random batch of the model's shapes is reused (compute only).

    Args:
        model: A compiled Keras model.
        batch_sizes: The batch sizes to time, e.g. ``[32, 64, 128]``.
        dataset_fn: ``dataset_fn(batch_size)`` returns an iterable of ``(x, y)`` batches
            (a ``tf.data.Dataset``, repeating or long enough). Defaults to random data.
        steps: Timed steps per batch size. Defaults to 10.
        warmup: Untimed steps first. Defaults to 2.
        tolerance: See :func:`pick_batch_size`. Defaults to 0.05.
        restore: Put back weights and optimizer variables afterwards. Defaults to True.
        clock: Time source in seconds. Defaults to time.perf_counter.
        on_point: Called with each :class:`SweepPoint` as it is measured. Defaults to None.

    Returns:
        A :class:`SweepResult`.

    Raises:
        InvalidArgumentError: No batch sizes, a count below 1, a dataset that ran out.

    Example:
        >>> sweep = throughput_sweep(model, [32, 64, 128], steps=10)
        >>> print(sweep.describe()); sweep.chosen
        64
    """
    _check_compiled(model, "throughput_sweep")
    if isinstance(batch_sizes, (str, bytes)) or not isinstance(batch_sizes, Iterable):
        raise InvalidArgumentError(
            f"batch_sizes={batch_sizes!r}: expected a list of batch sizes, e.g. [32, 64, 128] "
            f"(one size: [{batch_sizes!r}])")
    sizes = [_check_positive_int("batch size", b) for b in batch_sizes]
    if not sizes:
        raise InvalidArgumentError("batch_sizes is empty: give at least one, e.g. [32, 64, 128]")
    steps = _check_positive_int("steps", steps)
    warmup = whole_number(warmup, "warmup", 0, "an integer >= 0")
    pick_batch_size({1: 1.0}, tolerance)  # validate before the slow part
    state = _ModelState(model) if restore else None
    points = []
    try:
        for batch_size in sizes:
            if dataset_fn is None:
                fixed = _synthetic_batch(model, batch_size)
                batches = iter(lambda fixed=fixed: fixed, None)  # the same batch forever
            else:
                batches = iter(dataset_fn(batch_size))
            times = []
            for index in range(warmup + steps):
                began = clock()
                try:
                    x, y = next(batches)
                except StopIteration:
                    raise InvalidArgumentError(
                        f"dataset_fn({batch_size}) ran out after {index} batches; it needs "
                        f"{warmup + steps} (use .repeat())") from None
                model.train_on_batch(x, y)  # returns host values: the step has finished
                if index >= warmup:
                    times.append(clock() - began)
            median = statistics.median(times)
            rate = batch_size / median if median > 0 else math.inf
            points.append(SweepPoint(batch_size, rate, median, steps))
            if on_point is not None:
                on_point(points[-1])
            logger.info("batch-size sweep %d: %.1f examples/s", batch_size, rate)
    finally:
        if state is not None:
            state.restore()
    best, chosen = pick_batch_size({p.batch_size: p.examples_per_second for p in points},
                                   tolerance)
    return SweepResult(tuple(points), best, chosen, tolerance, synthetic=dataset_fn is None)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == _TRIAL_FLAG:
    sys.exit(_trial_main(sys.argv[2]))
