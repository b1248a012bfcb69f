"""The three ways a host's run lock is held, behind one ``LockHolder`` interface.

- ``RemotePythonHolder``: inside the host's remote python (SSH; one round trip);
- ``ChannelHolder`` (``channel_holder.py``): a holder process on its own SSH channel
  (a host without a remote python);
- ``ProcessHolder``: a holder process as a local child.

A holder process learns that the run is over when its stdin closes (the channel or the
pipe; if the whole SSH connection drops, sshd closes it for us).
"""

from __future__ import annotations

import contextlib
import json
import select
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.runlock import ANSWER_TIMEOUT_S, LockHolder, read_answer


def start_holder(holder: LockHolder, host_name: str, request: Mapping[str, Any]) -> tuple[LockHolder, dict[str, Any]]:
    """Send a started holder process its request; its answer says whether it got the lock."""
    try:
        holder.send(json.dumps(dict(request)).encode() + b"\n")
        line = holder.read_line(ANSWER_TIMEOUT_S)
        if line.startswith("Traceback"):  # the holder's python failed: its last line says why
            line = _last_line(holder, line)
        return holder, read_answer(host_name, line)
    except BaseException:
        holder.close()
        raise


TRACEBACK_LINES = 200
TRACEBACK_WAIT_S = 2.0


def _last_line(holder: LockHolder, first: str) -> str:
    """The exception a failed holder printed after its traceback (bounded: lines, time)."""
    last = first
    for _ in range(TRACEBACK_LINES):
        try:
            line = holder.read_line(TRACEBACK_WAIT_S)
        except (TimeoutError, OSError):
            break
        if not line:
            break
        if line.strip():
            last = line
    return last


class RemotePythonHolder:
    """The lock kept inside the host's remote python (it lives as long as the connection)."""

    def __init__(self, release: Callable[[], None], heartbeat: Callable[[], None]):
        self._release, self._heartbeat = release, heartbeat

    def send(self, data: bytes) -> None:
        if data == b"release\n":
            self._release()
        else:
            self._heartbeat()

    def read_line(self, timeout_s: float) -> str:
        return "released\n"

    def close(self) -> None:
        return None


class ProcessHolder:
    """The holder as a local child process in its own session (Ctrl-C does not reach it)."""

    def __init__(self, argv: Sequence[str]):
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._lock = threading.Lock()

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        with self._lock:
            if self.process.stdin.closed:  # released while a heartbeat was on its way
                raise BrokenPipeError("the run-lock holder's stdin is closed")
            self.process.stdin.write(data)
            self.process.stdin.flush()

    def read_line(self, timeout_s: float) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not ready:
            raise TimeoutError("run-lock holder did not answer")
        return self.process.stdout.readline().decode("utf-8", errors="replace")

    def close(self) -> None:
        with self._lock, contextlib.suppress(OSError):
            if self.process.stdin is not None and not self.process.stdin.closed:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
