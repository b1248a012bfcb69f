"""file, copy, template, stat, lineinfile, blockinfile, fail, shell and wait_for through the module contract.

Real: the local connection, files on this machine, os.chown to a real system user, real
sockets for wait_for, /bin/sh. Plans run on the planning connection, which refuses writes,
so a plan that tried to change something would raise. Nothing is mocked.
"""

from __future__ import annotations

import os
import pwd
import socket
import threading
import time
from pathlib import Path

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, TaskContext, Unchanged

NOBODY = pwd.getpwnam("nobody")


def ctx(planning: bool, variables=None, progress=None) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext(
        host_name="localhost",
        conn=conn.planning() if planning else conn,
        facts={},
        vars=variables or {},
        progress=progress or (lambda _: None),
    )


def converge(name: str, args: dict, variables=None):
    spec = registry.get(name)
    full = spec.with_defaults(args)
    change = spec.plan(ctx(True, variables), full)
    result = spec.apply(ctx(False, variables), full, change) if isinstance(change, Change) else None
    return change, result, spec.plan(ctx(True, variables), full)


def test_file_directory_with_owner_mode_and_recurse(tmp_path):
    target = tmp_path / "a" / "b"
    args = {"path": str(target), "state": "directory", "mode": "0750", "owner": "nobody"}
    change, result, again = converge("file", args)
    assert isinstance(change, Change) and result.changed and isinstance(again, Unchanged)
    st = target.stat()
    assert (st.st_mode & 0o777, st.st_uid) == (0o750, NOBODY.pw_uid)
    (target / "inner").write_text("x")
    recursive = {**args, "recurse": True, "mode": 0o750}
    change, _, again = converge("file", recursive)
    assert isinstance(change, Change) and any("contents" in d.label for d in change.diffs)
    assert (target / "inner").stat().st_uid == NOBODY.pw_uid and isinstance(again, Unchanged)


def test_file_link_hard_touch_absent(tmp_path):
    source = tmp_path / "src"
    source.write_text("s")
    link = tmp_path / "link"
    _, _, again = converge("file", {"path": str(link), "state": "link", "src": str(source)})
    assert os.readlink(link) == str(source) and isinstance(again, Unchanged)
    other = tmp_path / "other"
    converge("file", {"path": str(link), "state": "link", "src": str(other)})
    assert os.readlink(link) == str(other)
    hard = tmp_path / "hard"
    _, _, again = converge("file", {"path": str(hard), "state": "hard", "src": str(source)})
    assert hard.stat().st_ino == source.stat().st_ino and isinstance(again, Unchanged)
    touched = tmp_path / "t"
    keep = {"path": str(touched), "state": "touch", "modification_time": "preserve", "access_time": "preserve"}
    change, _, again = converge("file", keep)
    assert touched.exists() and isinstance(change, Change) and isinstance(again, Unchanged)
    tree = tmp_path / "tree"
    (tree / "x").mkdir(parents=True)
    _, _, again = converge("file", {"path": str(tree), "state": "absent"})
    assert not tree.exists() and isinstance(again, Unchanged)


def test_file_refuses_to_replace_a_file_with_a_link_unless_forced(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("keep")
    with pytest.raises(TaskFailed, match="force"):
        converge("file", {"path": str(plain), "state": "link", "src": "/etc/hostname"})
    assert plain.read_text() == "keep"
    with pytest.raises(TaskFailed, match="is absent"):
        converge("file", {"path": str(tmp_path / "nope"), "state": "file"})


def test_file_removal_checks_identity(tmp_path):
    """A path swapped between plan and apply is not removed."""
    victim = tmp_path / "victim"
    victim.mkdir()
    spec = registry.get("file")
    args = spec.with_defaults({"path": str(victim), "state": "absent"})
    change = spec.plan(ctx(True), args)
    victim.rename(tmp_path / "planned")  # kept, so its inode cannot be reused
    victim.mkdir()
    (victim / "precious").write_text("p")
    with pytest.raises(TaskFailed, match="not the object that was planned"):
        spec.apply(ctx(False), args, change)
    assert (victim / "precious").exists()


def test_unknown_owner_is_planned_and_fails_in_apply_before_any_change(tmp_path):
    """Check mode shows the owner an earlier task would create; apply changes nothing without it."""
    for module, args in (
        ("file", {"path": str(tmp_path / "d"), "state": "directory", "owner": "no-such-user-x"}),
        ("copy", {"content": "x", "dest": str(tmp_path / "f"), "owner": "no-such-user-x"}),
    ):
        spec = registry.get(module)
        full = spec.with_defaults(args)
        change = spec.plan(ctx(True), full)
        assert isinstance(change, Change)
        with pytest.raises(TaskFailed, match="no user named 'no-such-user-x'"):
            spec.apply(ctx(False), full, change)
    assert list(tmp_path.iterdir()) == []


def test_copy_content_src_file_and_tree(tmp_path):
    files = tmp_path / "play" / "files"
    (files / "conf.d").mkdir(parents=True)
    (files / "conf.d" / "a.conf").write_text("a=1\n")
    (files / "one.txt").write_text("one\n")
    variables = {"playbook_dir": str(tmp_path / "play")}
    dest = tmp_path / "dest"
    dest.mkdir()
    change, _, again = converge("copy", {"src": "one.txt", "dest": f"{dest}/"}, variables)
    assert (dest / "one.txt").read_text() == "one\n" and isinstance(again, Unchanged)
    _, _, again = converge("copy", {"src": "conf.d", "dest": str(dest), "mode": "0600"}, variables)
    assert (dest / "conf.d" / "a.conf").read_text() == "a=1\n" and isinstance(again, Unchanged)
    assert (dest / "conf.d" / "a.conf").stat().st_mode & 0o777 == 0o600
    target = dest / "literal"
    target.write_text("old\n")
    change, result, again = converge("copy", {"content": "new\n", "dest": str(target), "backup": True})
    assert change.diffs[0].before == "old\n" and change.diffs[0].after == "new\n"
    assert target.read_text() == "new\n" and Path(result.data["backup_file"]).read_text() == "old\n"
    assert isinstance(again, Unchanged)


def test_copy_validate_failure_leaves_the_file(tmp_path):
    target = tmp_path / "sudoers"
    target.write_text("good\n")
    with pytest.raises(TaskFailed, match="validation failed"):
        converge("copy", {"content": "bad\n", "dest": str(target), "validate": "grep -q good %s"})
    assert target.read_text() == "good\n"
    assert [p.name for p in tmp_path.iterdir()] == ["sudoers"]
    converge("copy", {"content": "good too\n", "dest": str(target), "validate": "grep -q good %s"})
    assert target.read_text() == "good too\n"


def test_template_from_templates_dir(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "app.conf.j2").write_text("port={{ port }}\n{% for m in models %}{{ m }}\n{% endfor %}")
    variables = {"playbook_dir": str(tmp_path), "port": 8000, "models": ["kimi"]}
    dest = tmp_path / "app.conf"
    _, _, again = converge("template", {"src": "app.conf.j2", "dest": str(dest), "mode": "0640"}, variables)
    assert dest.read_text() == "port=8000\nkimi\n" and isinstance(again, Unchanged)
    with pytest.raises(TaskFailed, match="undefined"):
        converge("template", {"src": "app.conf.j2", "dest": str(dest)}, {"playbook_dir": str(tmp_path)})


def test_template_drops_the_newline_after_block_tags_as_ansible_does(tmp_path):
    (tmp_path / "hosts.j2").write_text("{# managed #}\n{% for h in hosts %}\n{{ h }}\n{% endfor %}\nend\n")
    dest = tmp_path / "hosts"
    converge("template", {"src": "hosts.j2", "dest": str(dest)}, {"playbook_dir": str(tmp_path), "hosts": ["a", "b"]})
    assert dest.read_text() == "a\nb\nend\n"


def test_stat_reports_and_never_changes(tmp_path):
    target = tmp_path / "f"
    target.write_bytes(b"abc")
    os.chmod(target, 0o640)
    for algorithm, digest in (
        ("sha1", "a9993e364706816aba3e25717850c26c9cd0d89d"),
        ("sha256", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
    ):
        spec = registry.get("stat")
        answer = spec.plan(ctx(True), spec.with_defaults({"path": str(target), "checksum_algorithm": algorithm}))
        stat = answer.data["stat"]
        assert stat["checksum"] == digest
    assert (stat["exists"], stat["isreg"], stat["size"], stat["mode"], stat["pw_name"]) == (
        True,
        True,
        3,
        "0640",
        "root",
    )
    absent = spec.plan(ctx(True), spec.with_defaults({"path": str(tmp_path / "no")}))
    assert absent.data["stat"] == {"exists": False}


def test_lineinfile_replace_insert_absent_backrefs(tmp_path):
    target = tmp_path / "sshd_config"
    target.write_text("Port 22\n#PermitRootLogin yes\nUsePAM yes")
    base = {"path": str(target)}
    _, _, again = converge("lineinfile", {**base, "regexp": r"^#?PermitRootLogin", "line": "PermitRootLogin no"})
    assert target.read_text() == "Port 22\nPermitRootLogin no\nUsePAM yes" and isinstance(again, Unchanged)
    converge("lineinfile", {**base, "line": "MaxSessions 4", "insertafter": "^Port"})
    converge("lineinfile", {**base, "line": "# managed", "insertbefore": "BOF"})
    converge("lineinfile", {**base, "line": "X11Forwarding no"})
    assert target.read_text().splitlines() == [
        "# managed",
        "Port 22",
        "MaxSessions 4",
        "PermitRootLogin no",
        "UsePAM yes",
        "X11Forwarding no",
    ]
    converge("lineinfile", {**base, "regexp": r"^Port (\d+)", "line": r"Port \g<1>0", "backrefs": True})
    assert "Port 220" in target.read_text()
    change, _, again = converge("lineinfile", {**base, "regexp": "^Nothing", "line": "x", "backrefs": True})
    assert isinstance(change, Unchanged)
    converge("lineinfile", {**base, "regexp": "^Max", "state": "absent"})
    assert "MaxSessions" not in target.read_text()
    with pytest.raises(TaskFailed, match="create: true"):
        converge("lineinfile", {"path": str(tmp_path / "missing"), "line": "a"})
    _, _, again = converge("lineinfile", {"path": str(tmp_path / "new"), "line": "a", "create": True})
    assert (tmp_path / "new").read_text() == "a\n" and isinstance(again, Unchanged)


def test_blockinfile_inserts_replaces_removes_and_creates(tmp_path):
    target = tmp_path / "hosts"
    target.write_text("127.0.0.1 localhost")
    target.chmod(0o640)
    base = {"path": str(target), "block": "10.0.0.1 node1\n10.0.0.2 node2"}
    change, result, again = converge("blockinfile", {**base, "backup": True})
    marked = "# BEGIN ANSIBLE MANAGED BLOCK\n10.0.0.1 node1\n10.0.0.2 node2\n# END ANSIBLE MANAGED BLOCK\n"
    assert target.read_text() == "127.0.0.1 localhost\n" + marked and isinstance(again, Unchanged)
    assert [d.label for d in change.diffs] == [str(target)] and result.changed
    assert target.stat().st_mode & 0o777 == 0o640
    assert [p.read_text() for p in tmp_path.glob("hosts.*")] == ["127.0.0.1 localhost"]
    converge("blockinfile", {**base, "block": "10.0.0.3 node3", "insertbefore": "BOF"})
    assert target.read_text().startswith("127.0.0.1 localhost\n# BEGIN") and "node3" in target.read_text()
    change, _, again = converge("blockinfile", {"path": str(target), "state": "absent"})
    assert target.read_text() == "127.0.0.1 localhost\n" and isinstance(again, Unchanged)
    with pytest.raises(TaskFailed, match="create: true"):
        converge("blockinfile", {"path": str(tmp_path / "missing"), "block": "a"})
    _, _, again = converge("blockinfile", {"path": str(tmp_path / "new"), "block": "a", "create": True, "mode": "0600"})
    assert (tmp_path / "new").read_text() == "# BEGIN ANSIBLE MANAGED BLOCK\na\n# END ANSIBLE MANAGED BLOCK\n"
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o600 and isinstance(again, Unchanged)


def test_fail_fails_with_the_message():
    with pytest.raises(TaskFailed, match=r"^stop here$"):
        converge("fail", {"msg": "stop here"})


def test_shell_runs_pipes_with_guards_and_warns(tmp_path):
    marker = tmp_path / "marker"
    spec = registry.get("shell")
    args = spec.with_defaults({"cmd": f"echo hi | tr a-z A-Z > {marker}", "creates": str(marker)})
    _, result, again = converge("shell", args)
    assert marker.read_text() == "HI\n" and not result.warnings and isinstance(again, Unchanged)
    _, result, _ = converge("shell", {"cmd": "true", "chdir": str(tmp_path)})
    assert result.warnings and "command module" in result.warnings[0]
    with pytest.raises(TaskFailed, match="non-zero return code 3"):
        converge("shell", {"cmd": "exit 3"})


def _listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def test_wait_for_port_open_closed_drained_with_progress():
    server = _listener()
    port = server.getsockname()[1]
    spec = registry.get("wait_for")
    answer = spec.plan(ctx(True), spec.with_defaults({"port": port, "timeout": 5}))
    assert answer.data["port"] == port
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = server.accept()
    seen = []
    with pytest.raises(TaskFailed, match=f"Timeout when waiting for 127.0.0.1:{port} to be drained"):
        spec.plan(
            ctx(True, progress=seen.append),
            spec.with_defaults(
                {
                    "port": port,
                    "state": "drained",
                    "timeout": 1,
                    "sleep": 0.2,
                    "active_connection_states": ["ESTABLISHED"],
                }
            ),
        )
    assert seen and "1 active connection(s)" in seen[0]
    client.close()
    accepted.close()
    spec.plan(
        ctx(True),
        spec.with_defaults(
            {"port": port, "state": "drained", "timeout": 5, "active_connection_states": ["ESTABLISHED"]}
        ),
    )
    threading.Timer(0.5, server.close).start()
    answer = spec.plan(ctx(True), spec.with_defaults({"port": port, "state": "stopped", "timeout": 5, "sleep": 0.1}))
    assert answer.data["state"] == "stopped"


def test_wait_for_regex_in_file_and_absent(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("starting\n")

    def later():
        time.sleep(0.4)
        log.write_text("starting\nlistening on port 8123\n")

    threading.Thread(target=later).start()
    spec = registry.get("wait_for")
    answer = spec.plan(
        ctx(True), spec.with_defaults({"path": str(log), "search_regex": r"port (\d+)", "timeout": 5, "sleep": 0.1})
    )
    assert answer.data["match_groups"] == ["8123"]
    with pytest.raises(TaskFailed, match="custom message"):
        spec.plan(
            ctx(True),
            spec.with_defaults(
                {"path": str(log), "state": "absent", "timeout": 0.3, "sleep": 0.1, "msg": "custom message"}
            ),
        )


def test_lineinfile_replaces_the_last_match_unless_firstmatch(tmp_path):
    target = tmp_path / "env"
    target.write_text("a=1\na=2\n")
    converge("lineinfile", {"path": str(target), "regexp": "^a=", "line": "a=3"})
    assert target.read_text() == "a=1\na=3\n"
    converge("lineinfile", {"path": str(target), "regexp": "^a=", "line": "a=0", "firstmatch": True})
    assert target.read_text() == "a=0\na=3\n"


# A regex that backtracks: Python's re tries every way to split 200 "a," into 12 groups (it
# ran for hours); the `regex` package stops at the time bound. The text is a real file.
BACKTRACKING = r"(.*,){12}X"
CSV_LINE = "a," * 200 + "\n"
REGEX_CASES = [
    ("lineinfile", {"regexp": BACKTRACKING, "line": "x=1"}, "regexp"),
    ("lineinfile", {"insertafter": BACKTRACKING, "line": "x=1"}, "insertafter"),
    ("blockinfile", {"insertbefore": BACKTRACKING, "block": "x=1"}, "insertbefore"),
    ("wait_for", {"search_regex": BACKTRACKING, "timeout": 5}, "search_regex"),
]


@pytest.mark.parametrize(("module", "args", "arg"), REGEX_CASES)
def test_a_backtracking_user_regex_fails_the_task_at_the_time_bound(tmp_path, monkeypatch, module, args, arg):
    """Fails before (hangs: run it under `timeout`): lineinfile, blockinfile and wait_for
    searched user regexes with Python's re, without a time bound."""
    monkeypatch.setattr("engine.userregex.TEXT_BUDGET_S", 0.2, raising=False)
    target = tmp_path / "data.csv"
    target.write_text(CSV_LINE)
    spec = registry.get(module)
    started = time.monotonic()
    with pytest.raises(TaskFailed, match=rf"{arg}: regex .* took more than 0.2s"):
        spec.plan(ctx(True), spec.with_defaults({"path": str(target), **args}))
    assert time.monotonic() - started < 3
    assert target.read_text() == CSV_LINE
