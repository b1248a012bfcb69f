"""Symbolic modes (``u+x``, ``g=u``, ``go+rX``, ``+x``) in file, copy and template.

Real: the local connection, files on this machine, the host-side probes that read and set
modes, the modules' plan() on the planning connection (which refuses writes). Nothing is
mocked. Ansible's own answers for the same modes are compared in
tests/differential/cases/symbolic-modes (real ansible-core).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged
from modules.files.probes import file_mode


def _ctx(planning: bool, variables: dict[str, str] | None = None) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext("localhost", conn.planning() if planning else conn, {}, variables or {})


def _converge(name: str, args: dict[str, object], variables: dict[str, str] | None = None):
    spec = registry.get(name)
    full = spec.with_defaults(args)
    change = spec.plan(_ctx(True, variables), full)
    result = spec.apply(_ctx(False, variables), full, change) if isinstance(change, Change) else None
    return change, result, spec.plan(_ctx(True, variables), full)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def _umask() -> int:
    return file_mode.host_umask()


def test_file_applies_a_symbolic_mode_to_the_current_one(tmp_path: Path) -> None:
    target = tmp_path / "a"
    target.write_text("x")
    target.chmod(0o600)
    change, result, again = _converge("file", {"path": str(target), "mode": "u+x,g=u"})
    assert isinstance(change, Change) and [d.after for d in change.diffs] == ["0770\n"]
    assert result is not None and result.changed and _mode(target) == 0o770
    assert isinstance(again, Unchanged)


def test_check_mode_shows_the_symbolic_change_and_touches_nothing(tmp_path: Path) -> None:
    target = tmp_path / "a"
    target.write_text("x")
    target.chmod(0o644)
    spec = registry.get("file")
    change = spec.plan(_ctx(True), spec.with_defaults({"path": str(target), "mode": "o=rwx,g-r"}))
    assert isinstance(change, Change) and [(d.before, d.after) for d in change.diffs] == [("0644\n", "0607\n")]
    assert _mode(target) == 0o644


def test_copy_creates_from_0666_less_umask_then_applies_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "b"
    change, _, again = _converge("copy", {"content": "y\n", "dest": str(target), "mode": "u+x,o="})
    base = 0o666 & ~_umask()
    assert isinstance(change, Change) and _mode(target) == (base | 0o100) & ~0o007
    assert isinstance(again, Unchanged)


def test_copy_over_an_existing_file_keeps_its_mode_under_a_relative_one(tmp_path: Path) -> None:
    target = tmp_path / "b"
    target.write_text("old")
    target.chmod(0o640)
    _converge("copy", {"content": "new\n", "dest": str(target), "mode": "g+w"})
    assert target.read_text() == "new\n" and _mode(target) == 0o660


def test_template_with_capital_x_adds_no_execute_to_a_plain_file(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "t.j2").write_text("{{ 1 + 1 }}\n")
    target = tmp_path / "c"
    variables = {"playbook_dir": str(tmp_path)}
    _, _, again = _converge("template", {"src": "t.j2", "dest": str(target), "mode": "a+X,go-w"}, variables)
    assert target.read_text() == "2\n" and _mode(target) == 0o666 & ~_umask() & ~0o022
    assert isinstance(again, Unchanged)


def test_recursive_directory_applies_the_mode_to_each_path_by_its_own_kind(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    for path, mode in ((tree, 0o700), (tree / "sub", 0o700)):
        path.chmod(mode)
    (tree / "sub" / "plain").write_text("p")
    (tree / "sub" / "plain").chmod(0o600)
    (tree / "sub" / "tool").write_text("t")
    (tree / "sub" / "tool").chmod(0o700)
    (tree / "sealed").mkdir()
    (tree / "sealed").chmod(0o600)  # X counts for a directory even without execute bits
    args = {"path": str(tree), "state": "directory", "recurse": True, "mode": "go+rX"}
    change, _, again = _converge("file", args)
    assert isinstance(change, Change) and any("contents" in d.label for d in change.diffs)
    paths = (tree, tree / "sub", tree / "sub" / "plain", tree / "sub" / "tool", tree / "sealed")
    found = {p.name: _mode(p) for p in paths}
    assert found == {"tree": 0o755, "sub": 0o755, "plain": 0o644, "tool": 0o755, "sealed": 0o655}
    assert isinstance(again, Unchanged)


def test_new_directory_shows_the_mode_it_will_get(tmp_path: Path) -> None:
    spec = registry.get("file")
    target = tmp_path / "new"
    change = spec.plan(_ctx(True), spec.with_defaults({"path": str(target), "state": "directory", "mode": "u=rwx,go="}))
    assert isinstance(change, Change) and change.diffs[0].after == "directory mode=0700\n"
    assert not target.exists()


@pytest.mark.parametrize("mode", ["u+q", "ua+x", "rwx", "u+x,z=r", "077777"])
def test_a_bad_mode_fails_before_touching_anything(tmp_path: Path, mode: str) -> None:
    target = tmp_path / "a"
    target.write_text("x")
    target.chmod(0o600)
    spec = registry.get("file")
    with pytest.raises(TaskFailed, match="must be in octal or symbolic form"):
        spec.plan(_ctx(True), spec.with_defaults({"path": str(target), "mode": mode}))
    assert _mode(target) == 0o600


def test_symbolic_forms_against_chmod(tmp_path: Path) -> None:
    """The pure function agrees with the real chmod(1) on forms both accept."""
    target = tmp_path / "f"
    target.write_text("x")
    for start, symbolic in ((0o640, "u+x,g=u"), (0o755, "go-rx"), (0o600, "a+X"), (0o711, "a+X"), (0o644, "o=g")):
        target.chmod(start)
        os.system(f"chmod {symbolic} {target}")
        assert file_mode.resulting(symbolic, start, False, _umask()) == _mode(target), symbolic
