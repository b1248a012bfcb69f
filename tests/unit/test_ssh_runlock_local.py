"""The run lock on the local connection: the holder is a real child process and a real
flock on a temp lock file. Nothing is mocked."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from engine import runlock
from engine.connection.local import LocalConnection


def test_local_lock_refuses_a_second_run_and_is_released(tmp_path: Path) -> None:
    path = str(tmp_path / "run.lock")
    conn = LocalConnection()
    handle = runlock.acquire(conn, "first", path=path)
    assert json.loads(Path(path).read_text())["owner"] == "first"
    with pytest.raises(runlock.RunLocked, match="first"):
        runlock.acquire(conn, "second", path=path, run_id="another-run")
    runlock.release(handle)
    assert Path(path).read_text() == ""
    second = runlock.acquire(conn, "second", path=path)
    assert second.warning is None
    runlock.release(second)


def test_local_lock_of_a_dead_holder_is_taken_over(tmp_path: Path) -> None:
    path = str(tmp_path / "run.lock")
    conn = LocalConnection()
    handle = runlock.acquire(conn, "crashed run", path=path)
    os.kill(handle.record["holder_pid"], signal.SIGKILL)
    handle.holder.close()
    taken = runlock.acquire(conn, "next", path=path)
    assert taken.warning and "crashed run" in taken.warning
    runlock.release(taken)


def test_owner_description_names_user_controller_and_playbook() -> None:
    import getpass
    import socket

    text = runlock.owner_description("site.yml")
    assert text.startswith(f"{getpass.getuser()}@{socket.gethostname()}: rigger run /")
    assert text.endswith("/site.yml")
