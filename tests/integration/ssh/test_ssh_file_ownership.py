"""Writes over SSH keep who owns a file, with become (the remote python) and over SFTP.

Real: OpenSSH sshd on loopback, real sudo (NOPASSWD rule), the remote agent and plain
exec channels, paramiko's SFTP to the real sftp-server, write_file through the module
contract. The "host" is this machine, so the test sets up and checks files directly.
uid 4242 / gid 4243 need no passwd entry.
"""

from __future__ import annotations

import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import sshlab
from owned_files import GROUP, OWNER, identity, owned, world_writable_dir
from sshlab import Lab

from engine import registry
from engine.connection.base import ScopedConnection, TaskScope
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext

pytestmark = pytest.mark.slow


@pytest.fixture
def shared() -> Iterator[Path]:
    with world_writable_dir() as path:
        yield path


@pytest.mark.parametrize("agent", [True, False], ids=["agent", "exec-channels"])
def test_write_file_with_become_keeps_owner_and_a_private_backup(lab: Lab, shared: Path, agent: bool) -> None:
    """Fails today: the file and its 0644 backup became root's."""
    path = owned(shared / "token.env", 0o600)
    spec = registry.get("write_file")
    args = spec.with_defaults({"path": str(path), "content": "secret=2\n"})
    connection = lab.connect(ssh_remote_agent=agent)
    try:
        scoped = ScopedConnection(connection, TaskScope(become=True))
        change = spec.plan(TaskContext("gpu1", scoped.planning(), {}, {}), args)
        assert isinstance(change, Change)
        result = spec.apply(TaskContext("gpu1", scoped, {}, {}), args, change)
    finally:
        connection.close()
    assert path.read_text() == "secret=2\n" and identity(path) == (OWNER, GROUP, "0o600")
    backup = Path(result.data["backup"])
    assert backup.read_text() == "secret=1\n" and identity(backup) == (OWNER, GROUP, "0o600")


def test_sftp_write_keeps_mode_and_removes_temps_an_interrupted_write_left(lab: Lab, shared: Path) -> None:
    """Fails today: the temp file of an interrupted write stayed forever."""
    path = shared / "serve.env"
    path.write_text("old\n")
    user = sshlab.USER_NOPASSWD
    shutil.chown(path, user, user)
    path.chmod(0o640)
    stale = shared / ".serve.env.rigger-tmp-0123456789ab"
    stale.write_text("half-done")
    shutil.chown(stale, user, user)
    planted = owned(shared / ".serve.env.rigger-tmp-fedcba987654", 0o644, "another user's file")
    connection = lab.connect(ssh_remote_agent=False)
    try:
        connection.write_file(str(path), b"new\n")
    finally:
        connection.close()
    assert path.read_text() == "new\n"
    assert oct(stat.S_IMODE(path.stat().st_mode)) == "0o640" and path.stat().st_uid != 0
    assert sorted(p.name for p in shared.iterdir()) == [planted.name, "serve.env"]


def test_sftp_write_that_cannot_keep_the_owner_leaves_the_file_alone(lab: Lab, shared: Path) -> None:
    """Fails today: the login user replaced another user's file with its own copy."""
    path = owned(shared / "shared.cfg", 0o666)
    connection = lab.connect(ssh_remote_agent=False)
    try:
        with pytest.raises(TaskFailed, match="cannot keep the owner 4242:4243"):
            connection.write_file(str(path), b"taken over\n")
    finally:
        connection.close()
    assert path.read_text() == "secret=1\n" and identity(path) == (OWNER, GROUP, "0o666")
    assert [p.name for p in shared.iterdir()] == ["shared.cfg"]
