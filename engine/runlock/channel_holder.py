"""The run-lock holder process on its own SSH channel (a host without a remote python).

Closing the channel closes the holder's stdin, which is how it learns that the run is
over; if the whole connection drops, sshd closes it for us.
"""

from __future__ import annotations

import contextlib
import threading
import time

import paramiko

from engine.errors import HostUnreachable

POLL_S = 0.05


class ChannelHolder:
    """A holder process on its own SSH channel, talked to line by line."""

    def __init__(self, host_name: str, chan: paramiko.Channel):
        self.host_name = host_name
        self.chan = chan
        self._pending = b""
        self._send_lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self._send_lock:
            try:
                self.chan.sendall(data)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                why = self._death_notice() or str(exc)
                raise HostUnreachable(f"{self.host_name}: run-lock holder lost: {why}") from None

    def _death_notice(self) -> str:
        """What a holder that died at start said: its stderr's last line and exit status."""
        chunks = []
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            while self.chan.recv_stderr_ready():
                chunks.append(self.chan.recv_stderr(65536))
        lines = b"".join(chunks).decode("utf-8", errors="replace").strip().splitlines()
        status = self.chan.recv_exit_status() if self.chan.exit_status_ready() else None
        parts = [lines[-1]] if lines else []
        if status is not None:
            parts.append(f"exit status {status}")
        return "; ".join(parts)

    def read_line(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._pending:
            if self.chan.recv_ready():
                self._pending += self.chan.recv(65536)
                continue
            if self.chan.recv_stderr_ready():
                self._pending += self.chan.recv_stderr(65536)
                continue
            if self.chan.exit_status_ready() or self.chan.closed:
                line, self._pending = self._pending, b""
                return line.decode("utf-8", errors="replace")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.host_name}: run-lock holder did not answer")
            time.sleep(POLL_S)
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode("utf-8", errors="replace") + "\n"

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self.chan.shutdown_write()
        self.chan.close()
