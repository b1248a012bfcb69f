"""Core modules called through the module contract on the real local connection.

Real: files, subprocesses, the guarded connection. Each module is shown idempotent
(after apply, plan says nothing to do) and its refusals are exercised.
"""

from __future__ import annotations

import os

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed, WriteRefused
from engine.module_api import Change, TaskContext, Unchanged


def ctx(planning: bool, variables=None) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext(
        host_name="localhost",
        conn=conn.planning() if planning else conn,
        facts={},
        vars=variables or {},
    )


def converge(name: str, args: dict, variables=None):
    spec = registry.get(name)
    full = spec.with_defaults(args)
    change = spec.plan(ctx(True, variables), full)
    result = spec.apply(ctx(False, variables), full, change) if isinstance(change, Change) else None
    return change, result, spec.plan(ctx(True, variables), full)


def test_write_file_is_idempotent_and_keeps_mode(tmp_path):
    path = tmp_path / "f.txt"
    change, result, again = converge("write_file", {"path": str(path), "content": "a\n", "mode": "0640"})
    assert isinstance(change, Change) and result.changed
    assert isinstance(again, Unchanged)
    assert path.read_text() == "a\n" and oct(path.stat().st_mode & 0o777) == "0o640"
    os.chmod(path, 0o600)
    change, _, again = converge("write_file", {"path": str(path), "content": "a\n", "mode": "0640"})
    assert isinstance(change, Change) and "mode" in change.diffs[0].label
    assert isinstance(again, Unchanged)


def test_write_file_from_template(tmp_path):
    (tmp_path / "t.j2").write_text("tp={{ tp }}\n")
    path = tmp_path / "out"
    variables = {"tp": 8, "playbook_dir": str(tmp_path)}
    converge("write_file", {"path": str(path), "template": "t.j2"}, variables)
    assert path.read_text() == "tp=8\n"


def test_write_file_refuses_a_directory(tmp_path):
    with pytest.raises(TaskFailed, match="not a regular file"):
        converge("write_file", {"path": str(tmp_path), "content": "x"})


def test_plan_cannot_write(tmp_path):
    with pytest.raises(WriteRefused):
        ctx(True).conn.write_file(str(tmp_path / "x"), b"x")
    with pytest.raises(WriteRefused):
        ctx(True).conn.run(["touch", str(tmp_path / "x")])
    with pytest.raises(WriteRefused):
        ctx(True).conn.run_probe("remove_path", {"path": str(tmp_path)})
    assert not (tmp_path / "x").exists()


def test_ensure_absent_removes_tree_and_reports_bytes(tmp_path):
    target = tmp_path / "weights"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "shard").write_bytes(b"0" * 10_000)
    _, result, again = converge("ensure_absent", {"path": str(target)})
    assert result.data["bytes_freed"] >= 10_000
    assert not target.exists() and isinstance(again, Unchanged)


def test_ensure_absent_removes_a_symlink_not_its_target(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep").write_text("k")
    link = tmp_path / "link"
    link.symlink_to(real)
    converge("ensure_absent", {"path": str(link)})
    assert not link.exists() and (real / "keep").exists()


@pytest.mark.parametrize("path", ["/", "/usr", "/etc/", "/var/../usr", "relative/path", "/root", "~"])
def test_ensure_absent_refuses_system_paths(path):
    with pytest.raises(TaskFailed, match="refusing"):
        registry.get("ensure_absent").plan(ctx(True), {"path": path})


def test_ensure_absent_refuses_the_home_directory(tmp_path, monkeypatch):
    home = tmp_path / "home" / "ops"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(TaskFailed, match="home directory"):
        registry.get("ensure_absent").plan(ctx(True), {"path": str(home) + "/"})
    assert home.exists()


def test_command_forms_and_guards(tmp_path):
    spec = registry.get("command")
    marker = tmp_path / "m"
    change = spec.plan(ctx(True), spec.with_defaults({"cmd": f"touch '{marker}'"}))
    assert change.payload["argv"] == ["touch", str(marker)]
    result = spec.apply(ctx(False), {"cmd": ""}, change)
    assert result.changed and marker.exists()
    guarded = spec.with_defaults({"cmd": "false", "creates": str(marker)})
    assert isinstance(spec.plan(ctx(True), guarded), Unchanged)
    shell = spec.with_defaults({"cmd": "echo a | tr a b", "shell": True})
    out = spec.apply(ctx(False), shell, spec.plan(ctx(True), shell))
    assert out.data["stdout"] == "b\n"
    argv = spec.with_defaults({"argv": ["sh", "-c", "echo $0", "x y"], "chdir": str(tmp_path)})
    assert spec.apply(ctx(False), argv, spec.plan(ctx(True), argv)).data["stdout"] == "x y\n"


def test_command_failure_carries_rc_and_output():
    spec = registry.get("command")
    args = spec.with_defaults({"cmd": "sh -c 'echo boom >&2; exit 3'"})
    with pytest.raises(TaskFailed) as err:
        spec.apply(ctx(False), args, spec.plan(ctx(True), args))
    assert err.value.data["rc"] == 3 and "boom" in err.value.msg


def test_raw_runs_the_line_through_the_shell_and_fails_on_exit(tmp_path):
    spec = registry.get("raw")
    args = spec.with_defaults({"cmd": f"cd {tmp_path} && echo $((6 * 7)) > out && cat out"})
    result = spec.apply(ctx(False), args, spec.plan(ctx(True), args))
    assert result.changed and result.data["stdout"] == "42\n" and (tmp_path / "out").read_text() == "42\n"
    failing = spec.with_defaults({"cmd": "echo no >&2; exit 5"})
    with pytest.raises(TaskFailed) as err:
        spec.apply(ctx(False), failing, spec.plan(ctx(True), failing))
    assert err.value.data["rc"] == 5 and "no" in err.value.msg


def test_package_on_this_debian_host_is_apt_and_a_foreign_manager_is_refused():
    spec = registry.get("package")
    args = spec.with_defaults({"name": "coreutils", "state": "present"})
    assert isinstance(spec.plan(ctx(True), args), Unchanged)  # /etc/os-release: Debian family -> apt
    gathered = {"ansible_facts": {"pkg_mgr": "zypper"}}
    with pytest.raises(TaskFailed, match="package manager is 'zypper'"):
        spec.plan(ctx(True, gathered), args)


def test_every_module_documents_every_argument():
    for name in registry.module_names():
        spec = registry.get(name)
        for prop in spec.schema.get("properties", {}).values():
            assert prop.get("description"), name
        if spec.schema.get("properties"):
            assert spec.schema.get("additionalProperties") is False, name
