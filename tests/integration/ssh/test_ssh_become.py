"""become over SSH through the real sudo with real sudoers rules.

Real: sudo, /etc/sudoers.d rules written by the lab (NOPASSWD user, user without any
rule, user whose rule needs a password), sshd. Nothing is mocked.
"""

from __future__ import annotations

import time

import pytest
import sshlab
from sshlab import Lab

from engine.errors import TaskFailed

pytestmark = pytest.mark.slow


def test_become_with_a_nopasswd_rule_runs_as_root(lab: Lab) -> None:
    connection = lab.connect()
    try:
        result = connection.run(["sh", "-c", "id -un; cat"], sudo=True, stdin=b"piped")
        assert result.stdout == "root\npiped"
        assert connection.run_probe("host", {}, sudo=True)["user"] == "root"
        connection.write_file("/root/rigger-become-test", b"as root\n", sudo=True)
        assert connection.read_file("/root/rigger-become-test", sudo=True) == b"as root\n"
    finally:
        connection.run(["rm", "-f", "/root/rigger-become-test"], sudo=True)
        connection.close()


def test_become_env_is_passed_without_appearing_in_sudo_argv(lab: Lab) -> None:
    connection = lab.connect()
    try:
        result = connection.run(
            ["sh", "-c", 'echo "$TOKEN"; cat /proc/$PPID/cmdline | tr "\\0" " "'],
            sudo=True,
            env={"TOKEN": "s3cr3t-value"},
        )
    finally:
        connection.close()
    first, parent_cmdline = result.stdout.split("\n", 1)
    assert first == "s3cr3t-value"
    assert "s3cr3t-value" not in parent_cmdline


def test_become_without_a_sudo_rule_fails_fast_and_clearly(lab: Lab) -> None:
    connection = lab.connect(ansible_user=sshlab.USER_NOSUDO)
    started = time.monotonic()
    try:
        with pytest.raises(TaskFailed) as caught:
            connection.run(["id", "-un"], sudo=True)
    finally:
        connection.close()
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "become failed on gpu1" in message and "password is required" in message
    assert sshlab.USER_NOSUDO in message


def test_become_password_goes_through_stdin_only(lab: Lab) -> None:
    connection = lab.connect(ansible_user=sshlab.USER_PASSWORD, become_password=sshlab.PASSWORD)
    try:
        result = connection.run(["sh", "-c", "id -un; ps -eo args; cat"], sudo=True, stdin=b"in")
    finally:
        connection.close()
    assert result.stdout.startswith("root\n")
    assert result.stdout.endswith("in")
    assert sshlab.PASSWORD not in result.stdout + result.stderr, "password leaked to argv/output"


def test_wrong_become_password_fails_fast_without_leaking_it(lab: Lab) -> None:
    connection = lab.connect(ansible_user=sshlab.USER_PASSWORD, become_password="wrong-pass-123")
    started = time.monotonic()
    try:
        with pytest.raises(TaskFailed) as caught:
            connection.run(["id", "-un"], sudo=True)
    finally:
        connection.close()
    assert time.monotonic() - started < 10
    assert "sudo rejected the become password" in str(caught.value)
    assert "wrong-pass-123" not in str(caught.value)


def test_password_rule_without_a_password_fails_fast(lab: Lab) -> None:
    connection = lab.connect(ansible_user=sshlab.USER_PASSWORD)
    started = time.monotonic()
    try:
        with pytest.raises(TaskFailed, match="password is required"):
            connection.run(["id", "-un"], sudo=True)
    finally:
        connection.close()
    assert time.monotonic() - started < 5


def test_password_never_reaches_a_command_when_sudo_does_not_ask(lab: Lab) -> None:
    connection = lab.connect(become_password="not-needed-pw")
    try:
        result = connection.run(["cat"], sudo=True, stdin=b"only this")
    finally:
        connection.close()
    assert result.stdout == "only this"
