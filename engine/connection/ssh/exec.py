"""Run one command on an open exec channel: feed stdin, drain stdout and stderr together.

Both streams are read as they arrive (the SSH window is shared, so reading only one
could stall the other) into capped buffers, so a command printing 20 MB neither hangs
nor eats memory. The wait is bounded by a deadline; a transport that dies mid-command
is reported as ``lost``.
"""

from __future__ import annotations

import select
import time
from dataclasses import dataclass

import paramiko

from engine.connection.capture import DEFAULT_CAP_BYTES, CappedBuffer

CHUNK = 65536
IDLE_POLL_S = 1.0
STDIN_POLL_S = 0.01


@dataclass
class ExecOutcome:
    rc: int | None
    stdout: CappedBuffer
    stderr: CappedBuffer
    timed_out: bool = False
    lost: bool = False


class _Pump:
    def __init__(self, chan: paramiko.Channel, stdin: bytes, cap: int):
        self.chan = chan
        self.stdin = stdin
        self.sent = 0
        self.out = CappedBuffer.new(cap)
        self.err = CappedBuffer.new(cap)
        if not stdin:
            chan.shutdown_write()

    def move(self) -> bool:
        """Move whatever can be moved now; True if anything moved."""
        moved = False
        while self.chan.recv_ready():
            self.out.feed(self.chan.recv(CHUNK))
            moved = True
        while self.chan.recv_stderr_ready():
            self.err.feed(self.chan.recv_stderr(CHUNK))
            moved = True
        if self.sending and self.chan.send_ready():
            self._send_chunk()
            moved = True
        return moved

    def _send_chunk(self) -> None:
        """A command that exited before reading its stdin closes the channel: like a broken
        pipe locally, stop feeding it and collect its exit status and stderr, which say why."""
        try:
            self.sent += self.chan.send(self.stdin[self.sent : self.sent + CHUNK])
            if not self.sending:
                self.chan.shutdown_write()
        except OSError:
            self.sent = len(self.stdin)

    @property
    def sending(self) -> bool:
        return self.sent < len(self.stdin)

    def finished(self) -> bool:
        return self.chan.exit_status_ready() and not self.chan.recv_ready() and not self.chan.recv_stderr_ready()

    def wait(self, seconds: float) -> None:
        if self.sending:
            seconds = min(seconds, STDIN_POLL_S)
        if self.chan.eof_received:
            self.chan.status_event.wait(seconds)
        else:
            select.select([self.chan], [], [], seconds)


def pump(
    chan: paramiko.Channel,
    transport: paramiko.Transport,
    stdin: bytes | None,
    deadline: float | None,
    cap: int = DEFAULT_CAP_BYTES,
) -> ExecOutcome:
    state = _Pump(chan, stdin or b"", cap)
    while True:
        if state.move():
            continue
        if state.finished():
            status = chan.recv_exit_status()
            lost = status == -1 and not transport.is_active()
            return ExecOutcome(None if lost else status, state.out, state.err, lost=lost)
        if not transport.is_active():
            return ExecOutcome(None, state.out, state.err, lost=True)
        remaining = IDLE_POLL_S if deadline is None else deadline - time.monotonic()
        if remaining <= 0:
            chan.close()
            return ExecOutcome(None, state.out, state.err, timed_out=True)
        state.wait(min(remaining, IDLE_POLL_S))
