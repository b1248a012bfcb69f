"""``become`` over SSH: answer sudo's password prompt from stdin, recognise sudo failures.

The command line (see ``command.py``) makes sudo print our random prompt on stderr when
it wants a password and makes the shell under sudo print a random success line first.
So the password is sent only to a real sudo prompt (never into a command's stdin), a
second prompt means the password was wrong, and a missing success line means sudo itself
refused: each is a clear, immediate failure instead of a hang.
"""

from __future__ import annotations

import select
import time

import paramiko

from engine.connection.base import sudo_missing
from engine.connection.ssh.command import BecomeMarkers
from engine.connection.ssh.exec import ExecOutcome
from engine.errors import TaskFailed

POLL_S = 0.05


def become_handshake(
    chan: paramiko.Channel,
    markers: BecomeMarkers,
    password: str | None,
    deadline: float,
    host: str,
    user: str = "the login user",
) -> bytes:
    """Wait for sudo's prompt (answer it) or the success line. Returns stdout after it.

    Without a password (``sudo -n``) there is never a prompt: this only waits for the
    success line or sudo's refusal."""
    out, err = b"", b""
    prompt, success = markers.prompt.encode(), markers.success.encode() + b"\n"
    answered = False
    while True:
        while chan.recv_ready():
            out += chan.recv(65536)
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
        if success in out:
            return out.split(success, 1)[1]
        if err.count(prompt) > (1 if answered else 0):
            if answered or password is None:
                raise TaskFailed(f"become failed on {host}: sudo rejected the become password")
            chan.sendall(password.encode() + b"\n")
            answered = True
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            if _no_sudo(chan.recv_exit_status(), err):
                raise TaskFailed(sudo_missing(host))
            raise TaskFailed(
                f"become failed on {host}: {_first_line(err, prompt)} (user {user} needs a "
                "sudo rule: NOPASSWD, or set become_password)"
            )
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TaskFailed(f"become failed on {host}: sudo gave no answer in time")
        select.select([chan], [], [], min(remaining, POLL_S))


def strip_become_marker(outcome: ExecOutcome, markers: BecomeMarkers, host: str, user: str) -> None:
    """Remove the success line; without it sudo refused, which is a clear task failure."""
    success = markers.success.encode() + b"\n"
    data = outcome.stdout.data
    if data.startswith(success):
        del data[: len(success)]
        return
    if outcome.timed_out:
        return
    if success in bytes(data[:4096]) or outcome.rc is None:
        return
    if _no_sudo(outcome.rc, bytes(outcome.stderr.data)):
        raise TaskFailed(sudo_missing(host), {"rc": outcome.rc, "stderr": outcome.stderr.text()})
    reason = _first_line(bytes(outcome.stderr.data), markers.prompt.encode())
    raise TaskFailed(
        f"become failed on {host}: {reason} (user {user} needs a sudo rule: NOPASSWD, or set become_password)",
        {"rc": outcome.rc, "stderr": outcome.stderr.text()},
    )


def _no_sudo(rc: int | None, err: bytes) -> bool:
    """The shell's "sudo: not found" (exit 127): the command line execs sudo first."""
    return rc == 127 and b"sudo" in err and b"not found" in err


def _first_line(err: bytes, prompt: bytes) -> str:
    text = err.replace(prompt, b"").decode("utf-8", errors="replace").strip()
    return text.splitlines()[0] if text else "sudo exited without running the command"
