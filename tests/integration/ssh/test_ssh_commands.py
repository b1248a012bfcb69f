"""Commands, files and probes over a real SSH connection.

Real: Debian OpenSSH sshd (started by conftest), paramiko, the remote /bin/sh, python3,
coreutils. Nothing is mocked; the host is this machine reached through 127.0.0.2.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from pathlib import Path

import pytest

from engine.connection.base import ScopedConnection, TaskScope
from engine.connection.ssh.connection import SSHConnection
from engine.errors import CommandFailed, TaskFailed, WriteRefused

pytestmark = pytest.mark.slow


def test_argv_is_quoted_once_and_reaches_the_host_verbatim(conn: SSHConnection) -> None:
    tricky = ["a b", "$HOME", "it's", '"q"', "*", ";rm -rf /", "", "line\nbreak"]
    result = conn.run(["python3", "-c", "import sys, json; print(json.dumps(sys.argv[1:]))", *tricky])
    assert result.rc == 0
    import json

    assert json.loads(result.stdout) == tricky


def test_stdin_env_and_cwd(conn: SSHConnection) -> None:
    result = conn.run(
        ["sh", "-c", 'printf "%s|" "$GREETING" "$(pwd)"; cat'],
        env={"GREETING": "hello 'world' $x"},
        cwd="/tmp",
        stdin=b"from stdin",
    )
    assert result.stdout == "hello 'world' $x|/tmp|from stdin"


def test_runs_as_the_inventory_user_and_reuses_one_transport(conn: SSHConnection) -> None:
    assert conn.run(["id", "-un"]).stdout.strip() == "rigger-ssh"
    first = conn.transport()
    for _ in range(5):
        conn.run(["true"])
    assert conn.transport() is first
    sock = first.sock
    assert isinstance(sock, socket.socket)
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    # a silently vanished host is dropped after 3 keepalive periods (default 15 s), not ~15 min
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 45000


def test_nonzero_exit_with_and_without_check(conn: SSHConnection) -> None:
    result = conn.run(["sh", "-c", "echo oops >&2; exit 3"], check=False)
    assert (result.rc, result.stderr) == (3, "oops\n")
    with pytest.raises(CommandFailed, match="exited 3"):
        conn.run(["sh", "-c", "echo oops >&2; exit 3"])


def test_missing_program_is_rc_127(conn: SSHConnection) -> None:
    assert conn.run(["no-such-program-rigger"], check=False).rc == 127


def test_timeout_ends_the_command_on_the_host(conn: SSHConnection, tmp_path: Path) -> None:
    marker = f"/tmp/rigger-timeout-{os.getpid()}"
    started = time.monotonic()
    with pytest.raises(CommandFailed, match="timed out after 1s"):
        conn.run(["sh", "-c", f"sleep 30; touch {marker}"], timeout_s=1)
    assert time.monotonic() - started < 5
    time.sleep(0.3)
    alive = conn.run(["pgrep", "-u", "rigger-ssh", "-f", f"touch {marker}"], check=False)
    assert alive.rc == 1, f"the timed-out command still runs: {alive.stdout}"


def test_20_mb_of_output_on_both_streams_is_capped_without_hanging(conn: SSHConnection) -> None:
    started = time.monotonic()
    result = conn.run(
        ["sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' x; head -c 20000000 /dev/zero >&2"],
        timeout_s=60,
    )
    assert time.monotonic() - started < 30
    assert result.truncated
    assert "output truncated at" in result.stdout
    assert result.stdout.startswith("x" * 1000)
    assert len(result.stdout) < 9 * 2**20 and len(result.stderr) < 9 * 2**20


def test_write_file_is_atomic_keeps_mode_and_leaves_no_temp(conn: SSHConnection) -> None:
    directory = Path(conn.run(["mktemp", "-d"]).stdout.strip())
    target = directory / "app.conf"
    conn.write_file(str(target), b"first\n", mode=0o640)
    assert target.read_bytes() == b"first\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    inode = target.stat().st_ino
    conn.write_file(str(target), b"second\n")
    assert target.read_bytes() == b"second\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != inode, "not replaced by rename"
    assert sorted(p.name for p in directory.iterdir()) == ["app.conf"]
    assert target.stat().st_uid == int(conn.run(["id", "-u"]).stdout)


def test_read_file_and_missing_file(conn: SSHConnection) -> None:
    path = conn.run(["mktemp"]).stdout.strip()
    Path(path).write_bytes(b"\x00binary\xff")
    assert conn.read_file(path) == b"\x00binary\xff"
    assert conn.read_file(path + ".missing") is None


def test_write_without_permission_is_a_clear_task_failure(conn: SSHConnection) -> None:
    with pytest.raises(TaskFailed, match="cannot write /root/rigger-denied on gpu1: Permission denied"):
        conn.write_file("/root/rigger-denied", b"x")


def test_probe_runs_with_the_host_python(conn: SSHConnection) -> None:
    facts = conn.run_probe("host", {})
    assert facts["user"] == "rigger-ssh"
    host_python = conn.run(["sh", "-c", "command -v python3"]).stdout.strip()
    assert Path(facts["python"]["executable"]).resolve() == Path(host_python).resolve()


def test_probe_with_a_missing_interpreter_names_it(lab) -> None:  # type: ignore[no-untyped-def]
    connection = lab.connect(ansible_python_interpreter="/opt/no/python9")
    try:
        with pytest.raises(Exception, match="/opt/no/python9"):
            connection.run_probe("host", {})
    finally:
        connection.close()


def test_scoped_ssh_connection_refuses_writes_while_planning(conn: SSHConnection) -> None:
    scoped = ScopedConnection(conn, TaskScope()).planning()
    with pytest.raises(WriteRefused):
        scoped.write_file("/tmp/rigger-never", b"x")
    with pytest.raises(WriteRefused):
        scoped.run(["touch", "/tmp/rigger-never"])
    assert not Path("/tmp/rigger-never").exists()
    assert scoped.run(["echo", "ok"], read_only=True).stdout == "ok\n"


def test_timeout_holds_for_a_command_that_closed_its_output(conn: SSHConnection) -> None:
    started = time.monotonic()
    with pytest.raises(CommandFailed, match="timed out after 1s"):
        conn.run(["sh", "-c", "exec >&- 2>&-; sleep 30"], timeout_s=1)
    assert time.monotonic() - started < 5
