"""Signals answered as exceptions while a block runs, so that what the block started (worker
processes, servers, a journal) is cleaned up by the ``finally`` clauses that handle Ctrl-C.

Python runs a signal handler between bytecodes of the main thread, wherever it is. When that is
inside a ``__del__`` or a callback (TensorFlow's iterators and datasets have many), the raised
exception is printed as "Exception ignored in ..." and swallowed, and the program carries on
as if no signal had come: Python's own Ctrl-C handler has that flaw too. So the handlers here
also record the signal: :meth:`PendingSignal.check` raises it again at the next safe point,
and the block's end always does.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping

# what each signal's handler is when nobody has replaced it
_DEFAULT_HANDLERS = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}


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
def signals_raise(
        exceptions: Mapping[int, Callable[[], BaseException]]) -> Iterator[PendingSignal]:
    """Raise ``exceptions[signum]()`` on each of those signals while the block runs.

    Only in the main thread, and only for signals that still have their default handler (a
    program that handles one itself keeps its handler); the defaults are restored after. A
    block that ends normally although a signal came (its exception was swallowed) raises it at
    its end.
    """
    pending = PendingSignal()
    if threading.current_thread() is not threading.main_thread():
        yield pending
        return
    taken = [signum for signum in exceptions if replaceable(signum)]

    def on_signal(signum, frame):
        pending.record(exceptions[signum])
        raise exceptions[signum]()

    for signum in taken:
        signal.signal(signum, on_signal)
    try:
        yield pending
    finally:
        for signum in taken:
            signal.signal(signum, _DEFAULT_HANDLERS[signum])
    pending.check()


def sigterm_raises(make_exception: Callable[[], BaseException]):
    """:func:`signals_raise` for SIGTERM alone (Ctrl-C keeps Python's KeyboardInterrupt)."""
    return signals_raise({signal.SIGTERM: make_exception})
