"""The exec pump against a command that exited before reading its stdin.

Stand-in: the channel below replays what paramiko does in that timing window (the remote
command is gone, sending raises OSError "Socket is closed"); the real-sshd tests hit the
same window only by chance. Real: the pump and its buffers.
"""

from __future__ import annotations

from engine.connection.ssh.exec import pump


class ExitedCommandChannel:
    """A remote `sh` that could not exec its interpreter: stderr says so, exit 127."""

    def __init__(self) -> None:
        self.stderr = [b"sh: 1: exec: /opt/no/python9: not found\n"]
        self.eof_received = True

    def recv_ready(self) -> bool:
        return False

    def recv_stderr_ready(self) -> bool:
        return bool(self.stderr)

    def recv_stderr(self, _: int) -> bytes:
        return self.stderr.pop(0)

    def send_ready(self) -> bool:
        return True

    def send(self, _: bytes) -> int:
        raise OSError("Socket is closed")

    def shutdown_write(self) -> None:
        raise AssertionError("never reached: the send failed first")

    def exit_status_ready(self) -> bool:
        return not self.stderr

    def recv_exit_status(self) -> int:
        return 127


class LiveTransport:
    def is_active(self) -> bool:
        return True


def test_a_command_that_exited_before_its_stdin_reports_its_own_error():
    outcome = pump(ExitedCommandChannel(), LiveTransport(), b"x" * 100_000, deadline=None)  # type: ignore[arg-type]
    assert outcome.rc == 127
    assert "/opt/no/python9: not found" in outcome.stderr.text()
