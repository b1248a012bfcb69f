"""Controller side of the persistent remote interpreter (see ``server.py``).

One remote python per host (plus one under sudo when needed) on one exec channel of the host's
SSH transport: a command costs one framed round trip and a fork on the host instead of a
new SSH session, and a probe runs in the already-started interpreter (no python start-up).
A command line still passes through the same ``engine.connection.ssh.command`` builder, so become, its
markers and the password handshake are shared with the exec-channel path.
"""

from __future__ import annotations

import contextlib
import json
import select
import struct
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import paramiko

from engine.errors import HostUnreachable

HELLO = "rigger-remote-python"
POLL_S = 1.0
STDERR_KEEP_BYTES = 16384


class RemoteInterpreterDied(Exception):
    """The remote python ended (or spoke garbage) while the transport is still up."""


@lru_cache(maxsize=1)
def server_source() -> str:
    return (Path(__file__).parent / "server.py").read_text(encoding="utf-8")


class RemoteInterpreter:
    """One running remote python: send a request, wait for its answer (one at a time)."""

    def __init__(self, chan: paramiko.Channel, host_name: str, leftover: bytes = b""):
        self.chan = chan
        self.host_name = host_name
        self._buffer = bytearray(leftover)
        self._stderr = bytearray()
        self._lock = threading.Lock()  # one request at a time
        self._send_lock = threading.Lock()  # heartbeats may interleave with a waiting call
        self.sent_probes: set[str] = set()

    def hello(self, deadline: float) -> dict[str, Any]:
        answer = self._read_frame(deadline)
        if answer.get("hello") != HELLO:
            raise RemoteInterpreterDied(f"unexpected greeting {str(answer)[:200]}")
        return answer

    def call(self, request: dict[str, Any], deadline: float | None) -> dict[str, Any]:
        with self._lock:
            body = json.dumps(request).encode("utf-8")
            self._send(struct.pack(">I", len(body)) + body)
            return self._read_frame(deadline)

    def call_if_idle(self, request: dict[str, Any], deadline: float | None) -> dict[str, Any] | None:
        """Like ``call``, but None at once when another call is in progress (Ctrl-C while a
        command runs: closing the connection then ends the remote python and what it holds)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            body = json.dumps(request).encode("utf-8")
            self._send(struct.pack(">I", len(body)) + body)
            return self._read_frame(deadline)
        finally:
            self._lock.release()

    def heartbeat(self) -> None:
        """An empty frame: the remote python answers nothing, its run-lock watchdog stays quiet."""
        self._send(b"\0\0\0\0")

    def _send(self, data: bytes) -> None:
        with self._send_lock:
            try:
                self.chan.sendall(data)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                raise self._gone(f"sending to the remote python failed: {exc}") from None

    def alive(self) -> bool:
        chan = self.chan
        return not (chan.closed or chan.eof_received or chan.exit_status_ready())

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", errors="replace").strip()[-2000:]

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self.chan.shutdown_write()
        self.chan.close()

    # -- framing -----------------------------------------------------------------------

    def _read_frame(self, deadline: float | None) -> dict[str, Any]:
        header = self._read_exact(4, deadline)
        body = self._read_exact(struct.unpack(">I", header)[0], deadline)
        try:
            answer: dict[str, Any] = json.loads(body.decode("utf-8"))
        except ValueError:
            raise RemoteInterpreterDied(f"garbled answer: {body[:200]!r}") from None
        return answer

    def _read_exact(self, size: int, deadline: float | None) -> bytes:
        while len(self._buffer) < size:
            self._pull(deadline)
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _pull(self, deadline: float | None) -> None:
        chan = self.chan
        if chan.recv_stderr_ready():
            self._stderr += chan.recv_stderr(65536)
            del self._stderr[:-STDERR_KEEP_BYTES]
            return
        if chan.recv_ready():
            chunk = chan.recv(65536)
            if chunk:
                self._buffer += chunk
                return
        ended = chan.eof_received or chan.closed or chan.exit_status_ready()
        if ended and not chan.recv_ready() and not chan.recv_stderr_ready():
            raise self._gone("the remote python exited")
        transport = chan.get_transport()
        if transport is None or not transport.is_active():
            raise HostUnreachable(f"{self.host_name}: connection lost")
        wait = POLL_S if deadline is None else min(POLL_S, deadline - time.monotonic())
        if wait <= 0:
            raise TimeoutError(f"{self.host_name}: the remote python did not answer in time")
        select.select([chan], [], [], wait)

    def _gone(self, why: str) -> Exception:
        transport = self.chan.get_transport()
        if transport is None or not transport.is_active():
            return HostUnreachable(f"{self.host_name}: connection lost ({why})")
        tail = self.stderr_tail()
        return RemoteInterpreterDied(f"{why}{': ' + tail.splitlines()[-1] if tail else ''}")
