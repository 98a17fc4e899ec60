"""Preemption: SIGTERM (and a first Ctrl-C) during ``fit`` answered with a backup at the next
step boundary and a clean exit, instead of the loss of the epoch under way.

Spot and preemptible VMs, Kubernetes and Slurm (``--signal``) send SIGTERM and wait a grace
period before SIGKILL. Python runs a signal handler only between bytecodes of the main thread,
so the handler here only notes the signal; the backup callback looks at the note after each
step (:meth:`SignalWatch.requested`), writes its backup as every backup is written (atomic,
checksummed) and raises :class:`TrainingPreempted`, a ``SystemExit`` with
:data:`PREEMPTED_EXIT`: the script ends there, with a status that says "run me again".

Under several workers (``tfopt launch``, ``MultiWorkerMirroredStrategy``) each worker gets the
signal at its own moment, and all must stop at one step, or the others wait in the next
step's all-reduce forever. So at each step boundary the workers sum their notes in one
collective (:class:`WorkerAgreement`): when any worker has one, every worker backs up at that
same boundary (the chief writes) and exits with :data:`PREEMPTED_EXIT`.

A step boundary may not come in time (a step that takes minutes, a fit that ended by an
exception and left the handler in place): :data:`GRACE_S` after a SIGTERM, a watchdog thread
ends the process as the signal would have, with no backup. A second SIGTERM while the backup
is written is ignored (the backup finishes; the previous one is intact whatever happens, since
each is written under a temporary name); a second Ctrl-C raises ``KeyboardInterrupt`` as
Python's own handler does.
"""

from __future__ import annotations

import inspect
import logging
import os
import signal
import threading
import weakref

from tfopt._signals import PREEMPTED_EXIT, default_handler, replaceable

logger = logging.getLogger("tfopt")

__all__ = ["GRACE_S", "PREEMPTED_EXIT", "SignalWatch", "TrainingPreempted", "WorkerAgreement"]
# a step boundary is awaited this long after SIGTERM; then the process ends without a backup.
# Kubernetes' default grace period is 30 s, and a scheduler's SIGKILL must not come first
GRACE_S = 25.0
_WATCHED = (signal.SIGTERM, signal.SIGINT)


class TrainingPreempted(SystemExit):
    """The fit stopped at a step boundary after SIGTERM (or Ctrl-C), its backup written: the
    process exits with :data:`PREEMPTED_EXIT`, and the same command run again resumes there.

    Attributes:
        signal_name: "SIGTERM" or "SIGINT".
        epoch: Epochs finished when the backup was taken.
        steps: Steps of the next epoch trained by then (0: at an epoch's end).
    """

    def __init__(self, signal_name: str, epoch: int, steps: int):
        super().__init__(PREEMPTED_EXIT)
        self.signal_name, self.epoch, self.steps = signal_name, epoch, steps

    def __str__(self) -> str:
        where = (f"epoch {self.epoch + 1}, step {self.steps}" if self.steps
                 else f"the end of epoch {self.epoch}")
        return (f"{self.signal_name}: training stopped at {where}, its backup written; run "
                "the same command again to resume there")


def _running_fit(model, code=None):
    """The code of the ``fit`` running ``model`` on this thread's stack (a frame of ``code``,
    or by default the innermost one named ``fit``), or None where none runs."""
    frame = inspect.currentframe().f_back
    while frame is not None:
        found = frame.f_code is code if code is not None else frame.f_code.co_name == "fit"
        if found and frame.f_locals.get("self") is model:
            return frame.f_code
        frame = frame.f_back
    return None


class SignalWatch:
    """Notes SIGTERM and a first SIGINT while a fit runs (main thread only, and only where the
    program left Python's default handlers), for the fit to answer at its next step.

    Keras calls no callback when a fit ends by an exception, so the handlers may outlive their
    fit. They know it: a signal that comes when that fit's frame is no longer on the stack gets
    the default handlers back and does what it would have done, and ``tfopt._signals`` (and
    the next fit) may replace such an idle handler (``tfopt_idle``).
    """

    def __init__(self, grace_s: float = GRACE_S):
        self.grace_s = grace_s
        self.requested: str | None = None  # the signal's name, once one came
        self._taken: list[int] = []
        self._timer: threading.Timer | None = None
        self._fit: tuple | None = None  # (fit's code, a weak reference to its model)

    def start(self, model=None) -> None:
        if self._taken or threading.current_thread() is not threading.main_thread():
            return
        code = _running_fit(model) if model is not None else None
        self._fit = None if code is None else (code, weakref.ref(model))
        self.requested = None
        for signum in _WATCHED:
            if replaceable(signum):
                signal.signal(signum, self._handler())
                self._taken.append(signum)

    def _handler(self):
        def on_signal(signum, frame):
            self._on_signal(signum, frame)

        on_signal.tfopt_idle = self._idle
        return on_signal

    def _idle(self) -> bool:
        """Whether the fit these handlers serve is over (its frame gone from the stack)."""
        if self._fit is None:
            return False
        code, model = self._fit
        return _running_fit(model(), code) is None

    def stop(self) -> None:
        """Give the signals their default handlers back, the watchdog cancelled."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self._taken:
            handler = signal.getsignal(signum)
            if getattr(handler, "tfopt_idle", None) == self._idle:  # still ours
                signal.signal(signum, default_handler(signum))
        self._taken = []

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.requested is None and self._idle():  # left by a fit that ended by an exception
            self.stop()
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            os.kill(os.getpid(), signum)  # the default action, now
            return
        if self.requested is not None:
            if signum == signal.SIGINT:  # a second Ctrl-C: stop now, as Python would
                self.stop()
                raise KeyboardInterrupt
            return  # a second SIGTERM: the backup under way finishes
        self.requested = name
        logger.warning("%s: training stops at the next step boundary, after a backup", name)
        if signum == signal.SIGTERM:
            self._timer = threading.Timer(self.grace_s, self._give_up, (signum,))
            self._timer.daemon = True
            self._timer.start()

    def _give_up(self, signum: int) -> None:
        logger.error("%s: no step boundary within %g s: exiting without a backup (the newest "
                     "one before it is kept)", signal.Signals(signum).name, self.grace_s)
        logging.shutdown()
        os._exit(128 + signum)  # as the signal's default action would end it


class WorkerAgreement:
    """Whether any of the workers of ``strategy`` noted a signal: a sum of one flag per worker,
    a collective op every worker makes at the same step boundary (in the same order as the
    training step's own collectives, so it cannot deadlock them). Compiled once; a scalar
    all-reduce per call (``docs/train.md``, "Preemption", gives its cost)."""

    def __init__(self, strategy):
        from tfopt._tf import import_tensorflow

        tf = import_tensorflow()
        self._tf = tf

        @tf.function
        def any_requested(flag):
            per_replica = strategy.run(lambda: tf.identity(flag))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._any = any_requested

    def __call__(self, requested: bool) -> bool:
        flag = self._tf.constant(1.0 if requested else 0.0)
        return float(self._any(flag)) > 0
