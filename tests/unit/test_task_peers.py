"""TaskContext.peer: a module acting on a group reaches the other hosts with this task's scope.

Real: the local connection and its write guard. Not real: the peer "host" is this machine
under another name (a multi-host run over real sshd is in the serving group's tests).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.connection.base import Connection, ScopedConnection, TaskScope
from engine.connection.local import LocalConnection
from engine.module_api import TaskContext, TaskFailed, WriteRefused


def context(planning: bool, reached: list[str]) -> TaskContext:
    def connect(host: str) -> Connection:
        reached.append(host)
        return LocalConnection()

    conn = ScopedConnection(LocalConnection(), TaskScope(environment={"RIGGER_T": "1"})).planning(planning)
    return TaskContext("head", conn, {}, {}, connect=connect)


def test_a_peer_refuses_writes_while_planning_and_keeps_the_tasks_environment(tmp_path: Path) -> None:
    reached: list[str] = []
    peer = context(True, reached).peer("node-b")
    assert reached == ["node-b"]
    assert peer.run(["sh", "-c", "echo $RIGGER_T"], read_only=True).stdout.strip() == "1"
    with pytest.raises(WriteRefused):
        peer.write_file(str(tmp_path / "x"), b"x")
    assert not (tmp_path / "x").exists()


def test_a_peer_writes_when_applying(tmp_path: Path) -> None:
    context(False, []).peer("node-b").write_file(str(tmp_path / "x"), b"x")
    assert (tmp_path / "x").read_bytes() == b"x"


def test_without_a_play_there_is_no_peer() -> None:
    ctx = TaskContext("head", ScopedConnection(LocalConnection()), {}, {})
    with pytest.raises(TaskFailed, match="no connection to node-b"):
        ctx.peer("node-b")
