"""Interruption, one path for SIGINT, SIGTERM and SIGHUP (docs/safety.md, "Interruption").

Ctrl-C (SIGINT), ``timeout``/systemd/a cancelled CI job (SIGTERM) and a closed terminal or
SSH session (SIGHUP) all mean "stop": each raises ``Interrupted`` (a KeyboardInterrupt,
so the run's one interrupt path handles it) in the main thread. The run then starts no new
task, ends the commands it started, releases its run locks, writes the recap with an
``interrupted`` event and exits 99 (EXIT_INTERRUPTED, ansible-playbook's code for an
interrupted run), whichever signal it was.

Only the first signal raises: a second one while rigger cleans up is remembered, not
raised, so ending commands and releasing locks is never cut short. Worker threads (forks)
never see the exception: the runner sets its stop flag, which each task's connection reads
before and after every command, write and probe (engine/connection/base.py).

While a playbook runs (``deferred``), the signal sets the run's stop flag and raises only
where the main thread waits for its forks (``waiting``): an exception raised at any other
instant could land between a command's start and its bookkeeping (inside
``subprocess.Popen``: a started command nobody ends) or half-way through handing a host
to a fork (a fork nobody waits for). Everything a run does on a host runs in a fork, so
the main thread is at a wait, or on its way to one, whenever a command runs.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from engine.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The main thread waits this long at a time. A stop signal that lands just before a
# blocking wait begins (or on another thread) does not wake that wait: its handler runs
# when the wait returns, so a wait without a bound (seen: a Ctrl-C'd run waiting out its
# `sleep 300`) would run it only when what it waits for was done.
WAIT_SLICE_S = 0.1


_received: list[int] = []  # the signals received since handlers were installed, first first
_raised: list[int] = []  # the signal raised as Interrupted (at most one)
_stop_flags: list[threading.Event] = []  # the running playbook's stop flag, while it defers
_waits: list[None] = []  # one entry per ``waiting`` section the main thread is in


def signal_name(exc: BaseException | None = None) -> str:
    """The name of the signal that stopped the run: the first one received (a fork that
    saw the stop flag raises a bare Interrupted, which may reach the run first), else the
    exception's (SIGINT for a bare KeyboardInterrupt)."""
    if _received:
        return signal.Signals(_received[0]).name
    if isinstance(exc, Interrupted):
        return signal.Signals(exc.signum).name
    return "SIGINT"


def on_signal(signum: int, frame: FrameType | None) -> None:
    """The stop signals' handler (``rigger watch`` hands a round's signal here too)."""
    _received.append(signum)
    for flag in _stop_flags:
        flag.set()
    if _stop_flags and not _waits:
        return  # deferred: raised when the main thread next waits for its forks
    _raise_first()


def _raise_first() -> None:
    """Raise the first stop signal as Interrupted, once."""
    if _received and not _raised:
        _raised.append(_received[0])
        raise Interrupted(_received[0])


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def deferred(stop: threading.Event) -> Iterator[None]:
    """While a playbook runs: a stop signal sets ``stop`` and is raised only inside
    ``waiting`` (in the main thread; elsewhere signals never arrive, nothing changes)."""
    if not _in_main_thread():
        yield
        return
    _stop_flags.append(stop)
    if _received:
        stop.set()  # a signal came before the run began
    try:
        yield
    finally:
        _stop_flags.remove(stop)


def wait_unless_stopped(stop: threading.Event, seconds: float) -> bool:
    """``stop.wait(seconds)`` a slice at a time (the main thread's waits: see ``waiting``);
    True when ``stop`` was set."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        if stop.wait(min(left, WAIT_SLICE_S)):
            return True
    return stop.is_set()


@contextmanager
def waiting() -> Iterator[None]:
    """Where the main thread waits for its forks: a stop signal raises Interrupted here,
    at once if one came while the main thread was elsewhere."""
    if not _in_main_thread():
        yield
        return
    _raise_first()
    _waits.append(None)
    try:
        yield
    finally:
        _waits.pop()


@contextmanager
def handled() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` while inside (unless the process
    was started with one ignored); the previous handlers come back after. Signals reach
    the main thread only: elsewhere (a test harness running the CLI in a thread) nothing
    is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    _raised.clear()
    # a signal ignored on purpose stays ignored: SIGHUP under nohup, SIGINT in a shell's
    # background job
    wanted = [sig for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]
    previous: dict[int, Any] = {sig: signal.signal(sig, on_signal) for sig in wanted}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _received.clear()
        _raised.clear()
