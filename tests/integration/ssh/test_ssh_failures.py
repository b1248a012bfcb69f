"""Unreachable hosts: refused, silent, wrong key, sshd killed mid-command.

Real: sshd processes (killed with SIGKILL for the mid-run case), TCP sockets on
127.0.0.x, paramiko. The "silent host" is a real listening socket that never speaks SSH.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
import sshlab
from sshlab import Lab

from engine.connection.ssh.connection import SSHConnection
from engine.errors import HostUnreachable

pytestmark = pytest.mark.slow


def test_auth_failure_is_unreachable_and_names_user(lab: Lab, tmp_path: Path) -> None:
    stranger = sshlab.keygen(tmp_path / "stranger")
    connection = lab.connect(ansible_ssh_private_key_file=str(stranger))
    with pytest.raises(HostUnreachable) as caught:
        connection.run(["true"])
    message = str(caught.value)
    assert "authentication failed for rigger-ssh@" in message
    assert str(stranger) in message
    assert "\n" not in message


def test_a_host_slow_to_authenticate_is_a_timeout_not_a_refused_key(lab: Lab, tmp_path: Path) -> None:
    """A real sshd whose AuthorizedKeysCommand takes 4 s (as a CPU-starved sshd or a slow LDAP
    lookup does) and a client that waits 1 s: paramiko raises the exception it raises for a
    refused key; the message must say the host did not answer in time, not that the key
    failed (a CI rollout over SSH on a busy box said "authentication failed" for a good key)."""
    # sshd runs AuthorizedKeysCommand only from a root-owned path no one else can write
    # (not under /tmp), so the script lives in a private directory under /run.
    scripts = Path(f"/run/rigger-test-slow-keys-{os.getpid()}")
    scripts.mkdir(mode=0o755)
    slow = scripts / "slow_keys.sh"
    slow.write_text("#!/bin/sh\nsleep 4\n")
    slow.chmod(0o755)
    server = sshlab.start_sshd(tmp_path, "slowkeys", ["127.0.0.8"], extra_config=[
        f"AuthorizedKeysCommand {slow} %u", "AuthorizedKeysCommandUser root"])  # fmt: skip
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(server.known_hosts_lines())
    # a key in no authorized_keys file: whichever source sshd asks first, it reaches the command
    stranger = sshlab.keygen(tmp_path / "stranger")
    try:
        connection = SSHConnection.from_host_vars(
            "gpu1", sshlab.host_vars(server, stranger, known_hosts, ssh_connect_timeout_s=1)
        )
        with pytest.raises(HostUnreachable) as caught:
            connection.run(["true"])
        message = str(caught.value)
        assert "no answer to authentication" in message and "within 1s" in message, message
        assert "authentication failed" not in message
        assert "ssh_connect_timeout_s" in message
    finally:
        server.stop()
        shutil.rmtree(scripts)


def test_unreadable_key_file_is_named(lab: Lab, tmp_path: Path) -> None:
    connection = lab.connect(ansible_ssh_private_key_file=str(tmp_path / "missing_key"))
    with pytest.raises(HostUnreachable, match="missing_key"):
        connection.run(["true"])


def test_connection_refused_fails_fast(lab: Lab) -> None:
    port = sshlab.free_port(["127.0.0.8"])
    connection = lab.connect(ansible_host="127.0.0.8", ansible_port=port)
    started = time.monotonic()
    with pytest.raises(HostUnreachable, match=f"gpu1: 127.0.0.8:{port}: connection refused"):
        connection.run(["true"])
    assert time.monotonic() - started < 2


def test_host_that_never_answers_times_out_within_the_connect_timeout(lab: Lab) -> None:
    silent = socket.create_server(("127.0.0.8", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True).start()
    connection = lab.connect(ansible_host="127.0.0.8", ansible_port=silent.getsockname()[1], ssh_connect_timeout_s=1)
    started = time.monotonic()
    try:
        with pytest.raises(HostUnreachable, match=r"gpu1: .*handshake failed"):
            connection.run(["true"])
        assert time.monotonic() - started < 4
    finally:
        silent.close()
        for sock in accepted:
            sock.close()


def test_sshd_killed_mid_command_is_unreachable_then_fails_fast(lab: Lab, tmp_path: Path) -> None:
    doomed = sshlab.start_sshd(tmp_path, "doomed", ["127.0.0.10"])
    known = tmp_path / "known_hosts"
    known.write_text(doomed.known_hosts_lines())
    connection = SSHConnection.from_host_vars("doomed1", sshlab.host_vars(doomed, lab.client_key, known))
    try:
        assert connection.run(["echo", "up"]).stdout == "up\n"
        threading.Timer(0.5, doomed.kill_all).start()
        started = time.monotonic()
        with pytest.raises(HostUnreachable, match="doomed1: connection lost"):
            connection.run(["sleep", "30"], timeout_s=60)
        assert time.monotonic() - started < 10
        started = time.monotonic()
        with pytest.raises(HostUnreachable, match="doomed1"):
            connection.run(["true"])
        with pytest.raises(HostUnreachable, match="doomed1"):
            connection.read_file("/etc/hostname")
        assert time.monotonic() - started < 1
    finally:
        connection.close()
        doomed.stop()


def test_key_from_a_real_ssh_agent_when_no_key_file_is_given(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real: OpenSSH's ssh-agent holding the lab key; no key file in the inventory."""
    import subprocess

    socket_path = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 5
        while not socket_path.exists():
            assert time.monotonic() < deadline, "ssh-agent did not start"
            time.sleep(0.02)
        env = {"SSH_AUTH_SOCK": str(socket_path), "PATH": "/usr/bin:/bin"}
        subprocess.run(["ssh-add", "-q", str(lab.client_key)], env=env, check=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket_path))
        monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/id_* to fall back on
        host_vars = lab.vars()
        del host_vars["ansible_ssh_private_key_file"]
        connection = SSHConnection.from_host_vars("gpu1", host_vars)
        try:
            assert connection.run(["id", "-un"]).stdout == "rigger-ssh\n"
        finally:
            connection.close()
    finally:
        agent.terminate()
        agent.wait()
