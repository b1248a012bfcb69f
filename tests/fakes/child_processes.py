"""Waiting for a real process a rigger process started (a test harness, not a fake)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil


def wait_for_child(parent: psutil.Process, name: str, timeout_s: float = 60) -> psutil.Process:
    """The first descendant of ``parent`` named ``name``, once it runs (AssertionError after
    ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in parent.children(recursive=True):
            if child.name() == name:
                return child
        time.sleep(0.05)
    raise AssertionError(f"{name} never started under pid {parent.pid}")


def as_a_terminal_starts_it() -> None:
    """``preexec_fn`` for a process a test will stop with a signal: SIGINT, SIGTERM and SIGHUP
    at their defaults, as for a command typed at a terminal. A test session started in the
    background of a non-interactive shell ignores SIGINT, and an ignored signal stays
    ignored across exec (rigger keeps it so on purpose, as nohup means): without this the
    Ctrl-C tests would test that case instead."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


# A Python process started with this in its environment writes every thread's stack to
# its stderr when it gets SIGABRT (faulthandler): what a run that does not stop was doing.
STACKS_ON_ABORT = {"PYTHONFAULTHANDLER": "1"}


def output_of_stopped(proc: subprocess.Popen[str], timeout_s: float) -> tuple[str, str]:
    """The output of a process told to stop. One still running after ``timeout_s`` gets
    SIGABRT (its threads' stacks land in its stderr when it was started with
    ``STACKS_ON_ABORT``), then it and everything it started are killed, so it cannot hold
    this session's run lock for the tests after it; the AssertionError carries the stacks."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    tree = _tree(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGABRT)
    try:
        out, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        out, err = "", "(no stacks: the process did not end on SIGABRT)"
    out, err = out or "", err or ""  # None: the stream was not piped (stderr into stdout)
    for each in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            each.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    raise AssertionError(
        f"the run did not stop within {timeout_s:g} s\nstdout:\n{out[-12000:]}\nstderr:\n{err[-12000:]}"
    )


def _tree(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
