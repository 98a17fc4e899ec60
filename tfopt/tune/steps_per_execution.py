"""``steps_per_execution`` by experiment: the fewest training steps per call that run as fast
as more.

Each candidate (1, 4, 16) compiles a fresh model and warms up on one in-memory batch; then
three alternating rounds time 16 steps of each and the median counts. The smallest candidate
within 3 % of the fastest wins: fewer steps per call keep callbacks and logs finer-grained for
the same speed. The input is one batch held in memory, so the trial sees the per-call overhead
against the compute, not the pipeline.

Example:
    >>> from tfopt.models import build_model
    >>> spe, rates = tune_steps_per_execution(lambda: build_model("mlp", 32, 10), 64, 32, 10)
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
import warnings
from collections.abc import Callable

import keras
import tensorflow as tf

from tfopt._validate import whole_number
from tfopt.errors import InvalidArgumentError
from tfopt.models import compile_model
from tfopt.train.callbacks import InputProbe

__all__ = ["HALF_PRECISION_GAIN", "SPE_CANDIDATES", "EpochClock", "held_batches",
           "quiet_fit_warnings", "time_candidates", "time_setups", "tune_precision_and_steps_on",
           "tune_steps_per_execution", "tune_steps_per_execution_on"]

SPE_CANDIDATES = (1, 4, 16)
SPE_TRIAL_STEPS = 16  # steps per timed pass: a whole number of calls for every candidate
SPE_TRIAL_ROUNDS = 3  # timed passes per candidate, alternating; the median counts
SPE_TOLERANCE = 0.03  # a smaller steps_per_execution within 3 % of the fastest is preferred
# half precision loses digits in every activation: a policy that computes in it must beat
# float32 by this factor in the trial, or float32 is kept
HALF_PRECISION_GAIN = 1.10


class EpochClock(keras.callbacks.Callback):
    """Wall time and examples (counted by an :class:`tfopt.InputProbe`) of each epoch's training.

    Args:
        probe: The probe instrumenting the dataset that ``fit`` reads.

    Example:
        >>> probe = InputProbe(); clock = EpochClock(probe)
        >>> model.fit(probe.instrument(dataset), epochs=2, callbacks=[clock])
        >>> clock.examples[-1] / clock.seconds[-1]  # examples/s of the last epoch
    """

    def __init__(self, probe: InputProbe):
        super().__init__()
        self.probe = probe
        self.seconds: list[float] = []
        self.examples: list[int] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._examples = self.probe.read()[1]
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._started)
        self.examples.append(self.probe.read()[1] - self._examples)


@contextlib.contextmanager
def quiet_fit_warnings():
    """Silence Keras's warnings about datasets that are as meant: not shuffled by fit (tf.data
    shuffles) and ending the epoch (one pass per epoch)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*shuffle=True.*", category=UserWarning)
        warnings.filterwarnings("ignore", message=r".*ran out of data.*", category=UserWarning)
        yield


def _timed_pass_steps(candidates) -> int:
    return max(SPE_TRIAL_STEPS, *candidates)


def trial_steps(candidates=SPE_CANDIDATES) -> int:
    """Training steps :func:`tune_steps_per_execution` runs in all: per candidate, one warm-up
    call of that many steps and ``SPE_TRIAL_ROUNDS`` timed passes (a model is compiled for
    each candidate besides)."""
    return sum(candidates) + len(candidates) * SPE_TRIAL_ROUNDS * _timed_pass_steps(candidates)


def tune_steps_per_execution(model_fn: Callable[[], keras.Model], batch_size: int,
                             image_size: int, classes: int,
                             candidates=SPE_CANDIDATES,
                             seed: int = 0) -> tuple[int, dict[int, float]]:
    """Pick ``steps_per_execution`` by a short trial on one in-memory batch.

    Each candidate compiles a fresh model (``model_fn()``, built under the policy in force, as
    :func:`tfopt.models.compile_model` does, with the accuracy metric) and runs one untimed
    call (tracing, warm-up); then three alternating rounds time a pass of 16 steps of each, and
    the median counts.

    Args:
        model_fn: Returns an uncompiled model taking uint8 images and giving logits.
        batch_size: Examples per step.
        image_size: Side of the images, px.
        classes: Number of classes.
        candidates: Values to try. Defaults to (1, 4, 16).
        seed: For the trial batch. Defaults to 0.

    Returns:
        (chosen value, {candidate: examples/s}); the chosen value is the smallest candidate
        within 3 % of the fastest.

    Raises:
        tfopt.errors.InvalidArgumentError: A count below 1, or no candidates.

    Example:
        >>> spe, rates = tune_steps_per_execution(lambda: build_model("mlp", 32, 10), 64, 32, 10)
    """
    batch_size = whole_number(batch_size, "batch_size", 1)
    image_size = whole_number(image_size, "image_size", 1)
    seed = whole_number(seed, "seed")
    classes = whole_number(classes, "classes", 2)
    candidates = tuple(whole_number(c, "candidates", 1) for c in candidates)
    rng = tf.random.Generator.from_seed(seed)
    images = tf.cast(rng.uniform((batch_size, image_size, image_size, 3), maxval=256,
                                 dtype=tf.int32), tf.uint8)
    labels = tf.cast(rng.uniform((batch_size,), maxval=classes, dtype=tf.int32), tf.int64)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()

    def compile_fn(model, steps_per_execution):
        compile_model(model, steps_per_execution=steps_per_execution, metrics=["accuracy"])

    return time_candidates(model_fn, compile_fn, dataset, candidates)


def tune_steps_per_execution_on(model_fn: Callable[[], keras.Model],
                                compile_fn: Callable[[keras.Model, int], None],
                                batches: tf.data.Dataset,
                                candidates=SPE_CANDIDATES) -> tuple[int, dict[int, float]]:
    """Pick ``steps_per_execution`` by a short trial on real batches of the user's data.

    Args:
        model_fn: Returns a fresh copy of the model (built, uncompiled).
        compile_fn: ``compile_fn(model, steps_per_execution)`` compiles it as the user does.
        batches: A few batches of the training data (read into memory here, once).
        candidates: Values to try. Defaults to (1, 4, 16).

    Returns:
        As :func:`tune_steps_per_execution`.

    Raises:
        tfopt.errors.InvalidArgumentError: No candidates, or no batch in ``batches``.
    """
    candidates = tuple(whole_number(c, "candidates", 1) for c in candidates)
    return time_candidates(model_fn, compile_fn, held_batches(batches), candidates)


def tune_precision_and_steps_on(model_fn: Callable[[str], keras.Model],
                                compile_fn: Callable[[keras.Model, int], None],
                                batches: tf.data.Dataset, policies: tuple[str, ...],
                                candidates=SPE_CANDIDATES):
    """Pick the precision policy and ``steps_per_execution`` together, by one trial on real
    batches of the user's data: each policy at each candidate, alternating.

    A half-precision policy is kept only where its fastest candidate beats float32's by
    :data:`HALF_PRECISION_GAIN`: it costs the model precision, which a small gain does not pay
    for. ``steps_per_execution`` is then chosen among the kept policy's rates as
    :func:`tune_steps_per_execution` chooses.

    Args:
        model_fn: ``model_fn(policy)`` returns a fresh copy of the model computing under that
            policy (built, uncompiled).
        compile_fn: ``compile_fn(model, steps_per_execution)`` compiles it as the user does.
        batches: A few batches of the training data (read into memory here, once).
        policies: The policies to try, e.g. ("mixed_bfloat16", "float32").
        candidates: ``steps_per_execution`` values to try. Defaults to (1, 4, 16).

    Returns:
        (policy, steps_per_execution, rates): rates maps (policy, candidate) to examples/s.
    """
    candidates = tuple(whole_number(c, "candidates", 1) for c in candidates)
    if not policies or not candidates:
        raise InvalidArgumentError("policies, candidates: expected at least one of each")
    setups = {(policy, candidate): (functools.partial(model_fn, policy), candidate)
              for policy in policies for candidate in candidates}
    rates = time_setups(setups, compile_fn, held_batches(batches), _timed_pass_steps(candidates))
    best = {policy: max(rates[(policy, c)] for c in candidates) for policy in policies}
    policy = max(policies, key=best.__getitem__)
    if "float32" in best and policy != "float32" and (
            best[policy] < HALF_PRECISION_GAIN * best["float32"]):
        policy = "float32"
    return policy, _smallest_within({c: rates[(policy, c)] for c in candidates}), rates


def held_batches(batches: tf.data.Dataset) -> tf.data.Dataset:
    """``batches`` read once into memory, repeating (batches of another shape left out)."""
    held = [batch for batch in batches]  # one pass of the source: the trial then reads memory
    if not held:
        raise InvalidArgumentError("batches: the trial needs at least one batch of the data")
    shape = tf.nest.map_structure(lambda t: tuple(t.shape), held[0])
    held = [batch for batch in held
            if tf.nest.map_structure(lambda t: tuple(t.shape), batch) == shape]
    stacked = tf.nest.map_structure(lambda *parts: tf.stack(parts), *held)
    return tf.data.Dataset.from_tensor_slices(stacked).repeat()


def time_candidates(model_fn, compile_fn, dataset: tf.data.Dataset,
                    candidates) -> tuple[int, dict[int, float]]:
    """The trial itself: each candidate compiled on a fresh model and warmed up, then timed in
    alternating rounds on ``dataset`` (repeating batches); the median of each counts."""
    if not candidates:
        raise InvalidArgumentError("candidates=(): expected at least one, e.g. (1, 4, 16)")
    rates = time_setups({candidate: (model_fn, candidate) for candidate in candidates},
                         compile_fn, dataset, _timed_pass_steps(candidates))
    return _smallest_within(rates), rates


def _smallest_within(rates: dict[int, float]) -> int:
    """The smallest ``steps_per_execution`` within SPE_TOLERANCE of the fastest."""
    fastest = max(rates.values())
    return min(c for c, rate in rates.items() if rate >= (1 - SPE_TOLERANCE) * fastest)


def time_setups(setups: dict, compile_fn, dataset: tf.data.Dataset, steps: int,
                warmups: dict | None = None, rounds: dict | None = None) -> dict:
    """examples/s of each setup (key -> (make_model, steps_per_execution)): each compiled on a
    fresh model and warmed up, then timed in alternating rounds; the median counts.
    ``warmups``, where given, receives each setup's first call in seconds (tracing and
    compiling included); ``rounds`` each setup's rates round by round."""
    trials = {}
    for key, (make_model, candidate) in setups.items():
        model = make_model()
        compile_fn(model, candidate)
        probe = InputProbe()
        clock = EpochClock(probe)
        started = time.perf_counter()
        with quiet_fit_warnings():
            # one call traces and warms up; later fit() calls reuse the compiled function
            model.fit(probe.instrument(dataset), epochs=1, steps_per_epoch=candidate,
                      verbose=0)
        if warmups is not None:
            warmups[key] = time.perf_counter() - started
        trials[key] = (model, probe.instrument(dataset), clock)
    timed: dict = {key: [] for key in setups}
    for _ in range(SPE_TRIAL_ROUNDS):  # alternating rounds: load from elsewhere hits all alike
        for key, (model, data, clock) in trials.items():
            with quiet_fit_warnings():
                model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[clock])
            timed[key].append(clock.examples[-1] / clock.seconds[-1])
    del trials
    if rounds is not None:
        rounds.update(timed)
    return {key: statistics.median(values) for key, values in timed.items()}
