"""tfopt._signals: SIGTERM as an exception, and not lost when its first raise is swallowed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tfopt._signals import signals_raise, sigterm_raises


class Stopped(Exception):
    pass


def test_sigterm_raises_in_the_block_and_the_default_comes_back():
    with pytest.raises(Stopped):
        with sigterm_raises(Stopped):
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between bytecodes, soon after
                pass
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


class _SignalsWhileDeleted:
    def __init__(self, signum=signal.SIGTERM):
        self.signum = signum

    def __del__(self):
        # the handler's exception is raised here, in a __del__: Python prints "Exception
        # ignored" and carries on, as it does inside TensorFlow's iterators' finalizers
        os.kill(os.getpid(), self.signum)
        for _ in range(1000):
            pass


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_swallowed_in_a_del_is_raised_at_the_next_check_and_at_the_end():
    with pytest.raises(Stopped):
        with sigterm_raises(Stopped) as pending:
            _SignalsWhileDeleted()  # deleted at once: the raise inside it is lost
            assert pending.received
            pending.check()
    with pytest.raises(Stopped):
        with sigterm_raises(Stopped) as pending:
            _SignalsWhileDeleted()
    # without the recorded signal, nothing is raised
    with sigterm_raises(Stopped) as pending:
        pending.check()


def test_a_program_with_its_own_sigterm_handler_keeps_it():
    def own(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, own)
    try:
        with sigterm_raises(Stopped):
            assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_taken_over_too_where_asked_and_python_s_handler_restored():
    with pytest.raises(KeyboardInterrupt):
        with signals_raise({signal.SIGINT: KeyboardInterrupt}) as pending:
            _SignalsWhileDeleted(signal.SIGINT)  # swallowed in the __del__, raised at the end
    assert pending.received
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_once_a_second_signal_cannot_cut_the_first_one_s_cleanup_short():
    cleaned = []
    with pytest.raises(KeyboardInterrupt):
        with signals_raise({signal.SIGINT: KeyboardInterrupt}, once=True):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):
                    pass
            finally:  # the cleanup the first one started
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):
                    pass
                cleaned.append(True)
    assert cleaned == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_exiting_leaves_the_signals_ignored_after_one_came_and_restores_them_otherwise():
    with signals_raise({signal.SIGINT: KeyboardInterrupt}, exiting=True):
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    try:
        with pytest.raises(KeyboardInterrupt):
            with signals_raise({signal.SIGINT: KeyboardInterrupt}, exiting=True):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(1000):
                    pass
        # the process is exiting: a Ctrl-C now, in the joins of its exit, is let be
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
        ignoring = signal.getsignal(signal.SIGINT)
        assert callable(ignoring) and ignoring is not signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


QUIET_EXIT_SCRIPT = """
import os, signal, sys, time
import tfopt.cli as cli

sys.argv = ["tfopt", "--version"]
try:
    cli.main()
except SystemExit as done:
    status = done.code
os.kill(os.getpid(), signal.SIGINT)  # as the process exits, its status decided
time.sleep(0.3)
print("ignored", status, flush=True)
cli.QUIET_EXIT_S = 0.0  # as if the exit had taken that long: a hung exit can be stopped
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
except KeyboardInterrupt:
    print("stopped", flush=True)
"""


def test_a_ctrl_c_as_the_command_line_exits_is_ignored_for_a_while_then_stops_it():
    # a real process: the handler is the one left after the command, in the interpreter's exit
    done = subprocess.run([sys.executable, "-c", QUIET_EXIT_SCRIPT], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[1:3] == ["ignored 0", "stopped"], done.stdout
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
