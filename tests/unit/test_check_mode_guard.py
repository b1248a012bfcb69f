"""Check mode's guarantee: a probe that changes the host never runs while planning,
whichever interpreter runs it.

Real: the probe (remove_path, MUTATES), the local connection, a python subprocess, the
file it would delete. Nothing is mocked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import WriteRefused
from engine.module_api import TaskContext


def test_a_mutating_probe_under_another_python_is_refused_while_planning(tmp_path: Path) -> None:
    victim = tmp_path / "keep-me"
    victim.write_text("precious")
    ctx = TaskContext("localhost", ScopedConnection(LocalConnection()).planning(), {}, {})
    with pytest.raises(WriteRefused, match="remove_path"):
        ctx.conn.run_probe_under(sys.executable, "remove_path", {"path": str(victim)})
    assert victim.read_text() == "precious"


def test_a_read_only_probe_under_another_python_runs_while_planning(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("abc")
    conn = ScopedConnection(LocalConnection()).planning()
    answer = conn.run_probe_under(sys.executable, "path_info", {"paths": [str(tmp_path / "f")]})
    assert answer["paths"][str(tmp_path / "f")]["exists"] is True
