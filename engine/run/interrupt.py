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
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from engine.errors import Interrupted

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


_received: list[int] = []  # the signals received since handlers were installed, first first


def signal_name(exc: BaseException | None = None) -> str:
    """The name of the signal that stopped the run (SIGINT for a bare KeyboardInterrupt)."""
    if isinstance(exc, Interrupted):
        return signal.Signals(exc.signum).name
    return signal.Signals(_received[0]).name if _received else "SIGINT"


def _on_signal(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)
    if len(_received) == 1:
        raise Interrupted(signum)


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
    # a signal ignored on purpose stays ignored: SIGHUP under nohup, SIGINT in a shell's
    # background job
    wanted = [sig for sig in STOP_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]
    previous: dict[int, Any] = {sig: signal.signal(sig, _on_signal) for sig in wanted}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _received.clear()
