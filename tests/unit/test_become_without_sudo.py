"""Become over SSH on a host without sudo: the login shell's own "sudo: not found" (exit
127) is reported as sudo missing, with what to do, not as a refused sudo rule.

Real: the shell (sh and bash, as sshd runs the command line) exec'ing sudo on a PATH
without it, and its stderr and exit code; the become code that reads them. Not real: the
SSH channel (the outcome is built from the shell's real answer).
"""

from __future__ import annotations

import subprocess

import pytest

from engine.connection.capture import CappedBuffer
from engine.connection.ssh.become import strip_become_marker
from engine.connection.ssh.command import BecomeMarkers
from engine.connection.ssh.exec import ExecOutcome
from engine.errors import TaskFailed


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_a_host_without_sudo_says_so(shell: str, tmp_path) -> None:
    done = subprocess.run(
        [f"/bin/{shell}", "-c", "exec sudo -n -- sh -c true"],
        env={"PATH": str(tmp_path)},
        capture_output=True,
        check=False,
    )
    outcome = ExecOutcome(done.returncode, CappedBuffer.new(), CappedBuffer.new())
    outcome.stderr.data += done.stderr
    with pytest.raises(TaskFailed) as failed:
        strip_become_marker(outcome, BecomeMarkers.new(), "gpu1", "ubuntu")
    assert "become failed on gpu1: sudo is not installed on the host" in failed.value.msg, failed.value.msg
    assert "needs a sudo rule" not in failed.value.msg


def test_a_refused_sudo_rule_is_still_called_one() -> None:
    outcome = ExecOutcome(1, CappedBuffer.new(), CappedBuffer.new())
    outcome.stderr.data += b"sudo: a password is required\n"
    with pytest.raises(TaskFailed) as failed:
        strip_become_marker(outcome, BecomeMarkers.new(), "gpu1", "ubuntu")
    assert "needs a sudo rule" in failed.value.msg and "not installed" not in failed.value.msg
