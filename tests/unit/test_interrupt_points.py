"""Where a stop signal acts while a playbook runs (engine/run/interrupt.py): never between a
command's start and its bookkeeping, only where the main thread waits for its forks.

Real: this process's own signals (os.kill on itself, the handlers rigger installs), the
main thread, a thread standing in for a fork. Nothing is faked."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from engine.errors import Interrupted
from engine.run import interrupt


def test_a_signal_outside_a_wait_only_sets_the_stop_flag_and_the_next_wait_raises_it() -> None:
    stop = threading.Event()
    with interrupt.handled(), interrupt.deferred(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # the handler runs between bytecodes: give it many
            pass
        assert stop.is_set()  # not raised here: this could have been inside subprocess.Popen
        with pytest.raises(Interrupted) as raised, interrupt.waiting():
            pass
        assert raised.value.signum == signal.SIGTERM


def test_a_signal_during_a_wait_raises_there_once() -> None:
    stop = threading.Event()
    with interrupt.handled(), interrupt.deferred(stop):
        # SIGTERM, not SIGINT: a test session started in the background of a shell ignores
        # SIGINT, and handled() leaves an ignored signal ignored (as nohup means)
        with pytest.raises(Interrupted), interrupt.waiting():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted long before this ends
        os.kill(os.getpid(), signal.SIGHUP)  # a second signal during the clean-up: remembered only
        with interrupt.waiting():
            pass


def test_without_a_running_playbook_the_signal_raises_where_it_lands() -> None:
    with interrupt.handled(), pytest.raises(Interrupted):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)


def test_the_main_threads_wait_notices_a_stop_within_its_slice() -> None:
    """A stop set from another thread ends the wait within a slice, whatever the length asked."""
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    started = time.monotonic()
    assert interrupt.wait_unless_stopped(stop, 30)
    assert time.monotonic() - started < 10
    assert not interrupt.wait_unless_stopped(threading.Event(), 0.05)


def test_the_run_names_the_signal_received_not_a_forks_bare_interrupted() -> None:
    """A fork that saw the stop flag raises a bare Interrupted (SIGINT by default); when it
    reaches the run first, the run still names the signal that came."""
    stop = threading.Event()
    with interrupt.handled(), interrupt.deferred(stop):
        os.kill(os.getpid(), signal.SIGHUP)
        for _ in range(1000):
            pass
        assert interrupt.signal_name(Interrupted()) == "SIGHUP"
        with pytest.raises(Interrupted), interrupt.waiting():
            pass
