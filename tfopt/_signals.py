"""Signals answered as exceptions while a block runs, so that what the block started (worker
processes, servers, a journal) is cleaned up by the ``finally`` clauses that handle Ctrl-C.

Python runs a signal handler between bytecodes of the main thread, wherever it is. When that is
inside a ``__del__`` or a callback (TensorFlow's iterators and datasets have many), the raised
exception is printed as "Exception ignored in ..." and swallowed, and the program carries on
as if no signal had come: Python's own Ctrl-C handler has that flaw too. So the handlers here
also record the signal: :meth:`PendingSignal.check` raises it again at the next safe point,
and the block's end always does.

A second signal is another hazard: raised while the first one's cleanup runs (workers being
stopped, half-written files being removed, the process exiting), it cuts that cleanup short and
prints a traceback from wherever it lands. A block that asks for ``once`` answers the first
signal alone.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping

# a training stopped by SIGTERM at a step boundary, its backup written: EX_TEMPFAIL
# (sysexits.h), a temporary failure to be run again. Here, below both the training
# (tfopt.train.preemption) and the launcher, which reports it as the job's
PREEMPTED_EXIT = 75

# what each signal's handler is when nobody has replaced it
_DEFAULT_HANDLERS = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}


class Terminated(KeyboardInterrupt):
    """SIGTERM answered as Ctrl-C is (convert: the workers stop, the finished shards and the
    journal stay for ``--resume``). A KeyboardInterrupt, so that every path that handles
    Ctrl-C handles it too; a command exits with 143 (128 + SIGTERM) for it, as a shell reports
    a process that SIGTERM ended."""

    signum = signal.SIGTERM


class PendingSignal:
    """The first signal that came while the block ran; :meth:`check` raises its exception."""

    def __init__(self):
        self._make_exception: Callable[[], BaseException] | None = None

    def record(self, make_exception: Callable[[], BaseException]) -> None:
        """Note a signal's exception (only the first one counts)."""
        if self._make_exception is None:
            self._make_exception = make_exception

    @property
    def received(self) -> bool:
        return self._make_exception is not None

    def check(self) -> None:
        """Raise the signal's exception if one came (even if its first raise was lost)."""
        if self._make_exception is not None:
            raise self._make_exception()


def replaceable(signum: int) -> bool:
    """Whether ``signum``'s handler may be replaced: Python's default, or a tfopt handler left
    idle (one whose ``tfopt_idle()`` says so: the preemption handler of a fit that ended by an
    exception, which Keras gives no callback for)."""
    handler = signal.getsignal(signum)
    if handler is _DEFAULT_HANDLERS[signum]:
        return True
    idle = getattr(handler, "tfopt_idle", None)
    return callable(idle) and bool(idle())


def default_handler(signum: int):
    """The handler ``signum`` has when nobody has replaced it."""
    return _DEFAULT_HANDLERS[signum]


@contextlib.contextmanager
def signals_raise(exceptions: Mapping[int, Callable[[], BaseException]], *, once: bool = False,
                  exiting: bool = False) -> Iterator[PendingSignal]:
    """Raise ``exceptions[signum]()`` on each of those signals while the block runs.

    Only in the main thread, and only for signals that still have their default handler (a
    program that handles one itself keeps its handler); the defaults are restored after. A
    block that ends normally although a signal came (its exception was swallowed) raises it at
    its end.

    Args:
        exceptions: Signal number -> what makes the exception to raise.
        once: Raise for the first signal only: any later one of these signals is ignored
            while the block runs, so that a second Ctrl-C cannot cut short the cleanup that
            the first one started.
        exiting: For the block of a command that ends its process (implies ``once``): after a
            signal, they stay ignored past the block's end, through the process's exit (a
            Ctrl-C raised there, in the joins of threads and worker pools that the exit
            waits for, would print "Exception ignored ... KeyboardInterrupt"). Ignored by a
            Python handler, not ``SIG_IGN``, which child processes would inherit, until the
            interpreter finalizes: it puts back the default action for a Python handler, and
            a signal then would end the process by that signal, not with the status it chose
            (143 for SIGTERM becoming a death by SIGINT), so ``SIG_IGN`` is set at exit.
    """
    pending = PendingSignal()
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    once = once or exiting
    taken = [signum for signum in exceptions if replaceable(signum)]

    def on_signal(signum, frame):
        if once and pending.received:
            return  # the first one's cleanup is running: let it finish
        pending.record(exceptions[signum])
        raise exceptions[signum]()

    for signum in taken:
        signal.signal(signum, on_signal)
    try:
        yield pending
    finally:
        keep_ignoring = exiting and pending.received
        for signum in taken:
            signal.signal(signum, _ignored if keep_ignoring else _DEFAULT_HANDLERS[signum])
        if keep_ignoring:
            atexit.register(_ignore_for_good, taken)
    pending.check()


def _ignored(signum, frame) -> None:
    """A signal that comes while the process exits after answering an earlier one."""


def _ignore_for_good(signums) -> None:
    for signum in signums:
        signal.signal(signum, signal.SIG_IGN)


def sigterm_raises(make_exception: Callable[[], BaseException]):
    """:func:`signals_raise` for SIGTERM alone (Ctrl-C keeps Python's KeyboardInterrupt)."""
    return signals_raise({signal.SIGTERM: make_exception})
