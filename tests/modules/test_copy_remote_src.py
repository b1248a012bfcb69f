"""copy with remote_src: a file or a tree already on the host copied there.

Real: the local connection, files on this machine, the host-side probes, plan() on the
planning connection (which refuses writes). Nothing is mocked. Ansible's answers for the
same copies (modes, checksums, statuses) are compared in
tests/differential/cases/copy-remote-src (real ansible-core).
"""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged
from modules.files.probes.file_mode import host_umask


def _ctx(planning: bool) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext("localhost", conn.planning() if planning else conn, {}, {})


def _converge(args: dict[str, object]) -> tuple[object, object]:
    spec = registry.get("copy")
    full = spec.with_defaults({**args, "remote_src": True})
    change = spec.plan(_ctx(True), full)
    if isinstance(change, Change):
        spec.apply(_ctx(False), full, change)
    return change, spec.plan(_ctx(True), full)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src.txt"
    src.write_text("source\n")
    src.chmod(0o750)
    return src


def test_a_new_copy_gets_the_default_mode_and_a_replaced_one_the_sources(tmp_path: Path, source: Path) -> None:
    new, old = tmp_path / "new.txt", tmp_path / "old.txt"
    old.write_text("old\n")
    old.chmod(0o600)
    for dest in (new, old):
        change, again = _converge({"src": str(source), "dest": str(dest)})
        assert isinstance(change, Change) and isinstance(again, Unchanged) and dest.read_text() == "source\n"
    assert (_mode(new), _mode(old)) == (0o666 & ~host_umask(), 0o750)


def test_check_mode_changes_nothing(tmp_path: Path, source: Path) -> None:
    dest = tmp_path / "dest.txt"
    dest.write_text("old\n")
    spec = registry.get("copy")
    change = spec.plan(_ctx(True), spec.with_defaults({"src": str(source), "dest": str(dest), "remote_src": True}))
    assert isinstance(change, Change) and [d.label for d in change.diffs] == [str(dest), f"{dest} (mode)"]
    assert dest.read_text() == "old\n"


def test_a_tree_keeps_its_modes_and_a_trailing_slash_copies_the_contents(tmp_path: Path, source: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a").write_text("a\n")
    (tree / "a").chmod(0o700)
    (tree / "sub" / "b").write_text("b\n")
    (tree / "sub" / "b").chmod(0o640)
    _, again = _converge({"src": str(tree), "dest": str(tmp_path / "copy")})
    assert isinstance(again, Unchanged)
    assert _mode(tmp_path / "copy" / "tree" / "a") == 0o700 and _mode(tmp_path / "copy" / "tree" / "sub" / "b") == 0o640
    _converge({"src": f"{tree}/", "dest": str(tmp_path / "contents")})
    assert (tmp_path / "contents" / "sub" / "b").read_text() == "b\n"


def test_a_missing_source_fails_and_writes_nothing(tmp_path: Path) -> None:
    spec = registry.get("copy")
    args = spec.with_defaults({"src": str(tmp_path / "nope"), "dest": str(tmp_path / "x"), "remote_src": True})
    with pytest.raises(TaskFailed, match=r"Source .* not found"):
        spec.plan(_ctx(True), args)
    assert not (tmp_path / "x").exists()
