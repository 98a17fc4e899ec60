"""The shard writers of ``convert``: worker processes and a thread of this process.

``workers - 1`` spawned processes and a local thread share the shard tasks; each finished shard
is journaled as it arrives. Ctrl-C is held back while workers start, and answered by the main
process, and so is SIGTERM, the first of them alone (:func:`interruptions_answered_once`). The
stop they start is bounded, and no worker process outlives ``run_tasks``, so that none is left
starting up once its pool is gone. A worker that dies (OOM killer) is an interruption, which
keeps the finished shards, and so are workers that cannot start here
(:class:`~tfopt.errors.WorkerStartError`). The workers do not import the caller's main
module (:func:`~tfopt._spawn.worker_context`): no ``if __name__ == "__main__":`` guard is
needed around ``convert``.

Example:
    >>> run_tasks(tasks, Path("shards"), workers=4, journal=journal, done={}, bar=bar)
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import os
import signal
import threading
import time
from pathlib import Path

from tfopt._signals import Terminated, signals_raise
from tfopt._spawn import worker_context
from tfopt._supervisor import die_with_parent, start_failure, stop_processes
from tfopt.errors import TfoptError, WorkerStartError
from tfopt.records.convert.journal import Journal
from tfopt.records.sources.images import single_threaded_decodes
from tfopt.records.writer import ShardResult, ShardTask, write_shard

_worker_state: dict = {}


def _init_worker(queue, stop_event, parent_pid: int) -> None:
    _worker_state.update(queue=queue, stop=stop_event, parent=parent_pid)
    # the process was started with SIGINT and SIGTERM blocked (see _signals_held): a Ctrl-C
    # reaches the whole process group, and so does a service manager's SIGTERM; the main
    # process, not each worker, answers them. SIGTERM is unblocked once its handler (which
    # reads the state above) is in place: stop_processes sends it to a worker told to stop
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_worker_sigterm)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    # no TensorFlow here: records are framed and encoded without it, and an image source
    # imports it only at an image that needs a decode, one thread per op (one shard per
    # process and eager per-image ops: thread pools would only contend)
    single_threaded_decodes()
    # end with the parent (kill -9): an idle worker waits on a queue whose pipe it also holds
    # open, so it would never see the parent go and would linger forever. Linux's parent-death signal; a polling thread where there is none.
    if not die_with_parent(parent_pid, signal.SIGKILL):
        threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True,
                         name="tfopt-parent-watch").start()


def _on_worker_sigterm(signum, frame) -> None:
    """End this worker on the SIGTERM the main process sends once it told the workers to stop
    (stop_processes); ignore one sent to the whole group before that (the main process got it
    too, and stops the workers itself)."""
    try:
        stopping = _worker_should_stop()
    except Exception:  # this worker's interpreter is being torn down: its state is gone
        stopping = True
    if stopping:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)


def _exit_with_parent(parent_pid: int) -> None:
    """End this worker when its parent is gone, where the OS has no parent-death signal."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    os._exit(1)


def _worker_should_stop() -> bool:
    # a killed parent (kill -9) leaves workers orphaned: they notice and stop
    return _worker_state["stop"].is_set() or os.getppid() != _worker_state["parent"]


def _worker_write_shard(task: ShardTask, folder: str) -> ShardResult:
    return write_shard(task, Path(folder), report=_worker_state["queue"].put,
                       should_stop=_worker_should_stop)


def run_tasks(tasks, dst: Path, workers: int, journal: Journal, done: dict, bar) -> None:
    """Write ``tasks``; journal each result and add it to ``done``.

    With several workers, ``workers - 1`` spawned processes and a thread of this process share
    the shards. Spawning costs each process its start-up (Python, NumPy, protobuf; a TensorFlow
    import too where its images need decoding), so this process, idle otherwise, starts
    writing at once instead of waiting for a process of its own.
    """
    def finished(result: ShardResult) -> None:
        journal.append(result)
        done[result.file] = result

    workers = min(workers, len(tasks))
    if workers <= 1:
        for task in tasks:
            finished(write_shard(task, dst, report=bar.update))
        return
    # larger shards first: the last shard to finish is then a small one
    todo = collections.deque(sorted(tasks, key=lambda task: -len(task.items)))
    lock = threading.Lock()

    def next_task():
        with lock:
            return todo.popleft() if todo else None

    # spawn (fork is unsafe after TensorFlow, or any thread, started in this process); the
    # workers do not import the caller's __main__ (a script without a main guard, python -)
    context = worker_context()
    try:
        queue, stop = context.Queue(), context.Event()
        executor = concurrent.futures.ProcessPoolExecutor(
            workers - 1, mp_context=context, initializer=_init_worker,
            initargs=(queue, stop, os.getpid()))
    except (OSError, NotImplementedError) as error:  # no semaphores here (/dev/shm), no fork
        raise _cannot_start(error) from None
    local = _LocalWriter(next_task, dst, queue.put, stop.is_set)
    in_flight: set = set()
    try:
        local.start()
        while True:
            # one running and one queued task per process: no process waits between shards
            while len(in_flight) < 2 * (workers - 1) and (task := next_task()) is not None:
                with _signals_held():  # submit starts the worker processes
                    try:
                        in_flight.add(executor.submit(_worker_write_shard, task, str(dst)))
                    except OSError as error:  # fork or exec refused (process limit, memory)
                        raise _cannot_start(error) from None
            if not in_flight and local.finished:
                break
            completed, in_flight = concurrent.futures.wait(
                in_flight, timeout=0.1, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in completed:
                finished(future.result())  # re-raises a worker's SourceError here
            for result in local.take_results():  # re-raises the thread's errors here
                finished(result)
            _drain(queue, bar)
        _drain(queue, bar)
    except concurrent.futures.process.BrokenProcessPool:
        processes = _stop_all(stop, local, executor)
        code = start_failure(processes)
        if code is not None:
            raise WorkerStartError(
                f"the shard-writing worker processes cannot start here (one ended with exit "
                f"code {code} before writing; its own error, if any, is printed above); the "
                "shards finished so far are kept: run again with --resume --workers 1 "
                "(resume=True, workers=1) to write the rest in this process") from None
        raise WorkerDied(
            "a shard-writing process died (killed, or out of memory?); the shards finished so "
            "far are kept: run again with --resume") from None
    except BaseException:
        _stop_all(stop, local, executor)
        raise
    # every shard is in. The workers are stopped as after an error, not left to exit on their
    # own: a TensorFlow teardown (where one decoded images) is slow, and one still starting up
    # (spawned for a task that another took) would be joined at this process's exit, where a
    # Ctrl-C cuts the join short and the worker then fails to start, a traceback, once the
    # pool's semaphores are gone.
    _stop_all(stop, local, executor)


def _cannot_start(error: BaseException) -> WorkerStartError:
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return WorkerStartError(
        f"cannot start the shard-writing worker processes ({reason}); the shards finished so "
        "far are kept: run again with --resume --workers 1 (resume=True, workers=1) to write "
        "them in this process")


class WorkerDied(TfoptError):
    """A shard-writing process died (OOM killer, kill -9): an interruption, like Ctrl-C, so the
    finished shards and the journal stay for ``--resume`` instead of being discarded."""


# Seconds the worker processes get to stop at a shard's next record once told to, before they
# are terminated: one importing TensorFlow for a decode (seconds, more on busy cores) would
# otherwise hold a Ctrl-C up until its import is done. A terminated worker leaves at most a
# temporary file, which --resume removes; the shard it was writing is not journaled, so it is
# redone anyway.
_STOP_GRACE_S = 0.5
_MANAGER_JOIN_S = 5.0  # the pool's manager thread, its workers reaped: ends in milliseconds


def interruptions_answered_once():
    """Ctrl-C as KeyboardInterrupt and SIGTERM as :class:`~tfopt._signals.Terminated` while
    the block runs, instead of SIGTERM's death at once (which leaves the journal, temporary
    files and the pool's semaphores behind); only the first of them raises, so that a second
    Ctrl-C cannot cut short the stop that the first one started (workers left running, their
    temporary files kept, a traceback from wherever it landed). A caller that handles them
    itself (the CLI) keeps its handlers."""
    return signals_raise({signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated},
                         once=True)


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signals_held():
    """Hold Ctrl-C and SIGTERM back while worker processes start, and answer them after.

    The processes inherit the blocked signals, so a Ctrl-C during their start-up (the
    TensorFlow import) prints no traceback from each of them. Blocking them in this thread is
    not enough here: another thread of this process may take a signal, and Python then runs
    its handler in the main thread all the same (KeyboardInterrupt, Terminated), which could
    cut a start-up short (the child, left without its start-up data, prints an EOFError). So
    the handlers are swapped for ones that note the signal, and each noted signal is handed to
    the real handler afterwards.
    """
    can_mask = hasattr(signal, "pthread_sigmask")
    in_main = threading.current_thread() is threading.main_thread()
    noted: list[int] = []
    handlers = ({signum: signal.signal(signum, lambda signum, frame: noted.append(signum))
                 for signum in _HELD_SIGNALS} if in_main else {})
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(_HELD_SIGNALS)) if can_mask else None
    try:
        yield
    finally:
        if can_mask:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in handlers.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
    for signum in dict.fromkeys(noted):
        handler = handlers.get(signum)
        if callable(handler):
            handler(signum, None)  # Python's SIGINT one raises KeyboardInterrupt
        elif handler == signal.SIG_DFL:
            signal.raise_signal(signum)


def _stop_all(stop, local: _LocalWriter, executor) -> list:
    """Stop the local writer and the worker processes; return the processes, reaped.

    Those still starting up (SIGTERM blocked until their initializer runs) are killed after
    the grace, silently. The local writer gets the grace too, and is then left behind: it may
    be importing TensorFlow for a decode (seconds, half a minute on busy cores), which nothing
    can cut short, and it ends at its next record (a daemon thread: the process exits without
    it). The caller removes the temporary file it leaves; its shard is not journaled.
    """
    stop.set()
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    local.join(_STOP_GRACE_S)
    stop_processes(processes, _STOP_GRACE_S)
    # the pool's manager thread closes its wake-up pipe as it ends; Python 3.11's exit hook
    # writes to that pipe unguarded, so an exit while the thread is closing it prints
    # "OSError: Bad file descriptor" from threading._shutdown (a race 3.12 locks away). Its
    # workers are reaped now: the thread ends at once, and is awaited here
    manager = getattr(executor, "_executor_manager_thread", None)
    if manager is not None:
        manager.join(_MANAGER_JOIN_S)
    return processes


class _LocalWriter(threading.Thread):
    """Writes shards in this process, beside the worker processes, from the same task list."""

    def __init__(self, next_task, dst: Path, report, should_stop):
        super().__init__(name="tfopt-convert-local", daemon=True)
        self._next_task, self._dst = next_task, dst
        self._report, self._should_stop = report, should_stop
        self._results: list = []
        self._lock = threading.Lock()
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._should_stop() and (task := self._next_task()) is not None:
                result = write_shard(task, self._dst, report=self._report,
                                     should_stop=self._should_stop)
                with self._lock:
                    self._results.append(result)
        except BaseException as error:  # handed to the main thread by take_results
            self._error = error

    @property
    def finished(self) -> bool:
        with self._lock:
            return not self.is_alive() and not self._results and self._error is None

    def take_results(self) -> list[ShardResult]:
        with self._lock:
            results, self._results = self._results, []
        if self._error is not None and not results:
            error, self._error = self._error, None
            raise error
        return results


def _drain(queue, bar) -> None:
    while True:
        try:
            bar.update(queue.get_nowait())
        except Exception:  # queue.Empty, or a queue closed under us
            return
