"""The user and group modules against this machine's real useradd, usermod, userdel,
groupadd, groupmod, groupdel and chpasswd, as root.

Real: the tools, /etc/passwd, /etc/group and /etc/shadow of this machine, the local
connection, the planning connection (refuses writes), and the real CLI for the playbook
runs. Nothing is mocked. Every account has a name made for this test (checked absent
before it is created) and is removed afterwards, only if it is still the one the test
made (its uid/gid); homes live under the test's temporary directory.
"""

from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import registry
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, Result, TaskContext, Unchanged

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd"), reason="needs root and the shadow tools (useradd)"
)

# crypt hashes of two throwaway passwords (mkpasswd -m sha-512), never real credentials
HASH_ONE = "$6$rgtsalt1$Jr0aq0m.5I4mGyjKqr8yT0Xq2P9Vh3s2oJ8c1cX9rV3m2m7P0Y8m6H5oW1Yh0b5nQ7r1a1eS2cJ7y1y0Xg2aZ."
HASH_TWO = "$6$rgtsalt2$Pq1b2c3d4e5f6g7h8i9j0kLmNoPqRsTuVwXyZ0123456789abcdefghijABCDEFGHIJklmnopqrstuvwxyz01"


def _ctx(planning: bool) -> TaskContext:
    conn = ScopedConnection(LocalConnection())
    return TaskContext("localhost", conn.planning() if planning else conn, {}, {})


def _plan(module: str, args: dict[str, object]) -> Change | Unchanged | None:
    spec = registry.get(module)
    return spec.plan(_ctx(True), spec.with_defaults(args))  # type: ignore[no-any-return]


def _converge(module: str, args: dict[str, object]) -> tuple[Change | Unchanged | None, Result | None, object]:
    spec = registry.get(module)
    full = spec.with_defaults(args)
    change = spec.plan(_ctx(True), full)
    result = spec.apply(_ctx(False), full, change) if isinstance(change, Change) else None
    return change, result, spec.plan(_ctx(True), full)


def _exists(lookup: object, name: str) -> bool:
    try:
        lookup(name)  # type: ignore[operator]
    except KeyError:
        return False
    return True


class Accounts:
    """Names made for one test; cleanup removes only accounts still carrying the ids they got."""

    def __init__(self) -> None:
        self.users: dict[str, int] = {}
        self.groups: dict[str, int] = {}

    def name(self, kind: str) -> str:
        name = f"rgt{kind}{secrets.token_hex(4)}"
        assert not _exists(pwd.getpwnam, name) and not _exists(grp.getgrnam, name)
        return name

    def created_user(self, name: str) -> None:
        self.users[name] = pwd.getpwnam(name).pw_uid

    def created_group(self, name: str) -> None:
        self.groups[name] = grp.getgrnam(name).gr_gid

    def cleanup(self) -> None:
        for name, uid in self.users.items():
            if _exists(pwd.getpwnam, name) and pwd.getpwnam(name).pw_uid == uid:
                os.system(f"userdel {name} 2>/dev/null")
        for name, gid in self.groups.items():
            if _exists(grp.getgrnam, name) and grp.getgrnam(name).gr_gid == gid:
                os.system(f"groupdel {name} 2>/dev/null")


@pytest.fixture
def accounts() -> Iterator[Accounts]:
    made = Accounts()
    try:
        yield made
    finally:
        made.cleanup()


def _free_gid() -> int:
    used = {g.gr_gid for g in grp.getgrall()} | {u.pw_uid for u in pwd.getpwall()}
    return next(n for n in range(61000 + secrets.randbelow(500), 65000) if n not in used)


def _shadow_field(name: str) -> str:
    for line in Path("/etc/shadow").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":")[1]
    raise AssertionError(f"{name} not in /etc/shadow")


def test_group_created_with_gid_changed_and_removed(accounts: Accounts) -> None:
    name, gid = accounts.name("g"), _free_gid()
    planned = _plan("group", {"name": name, "gid": gid})
    assert isinstance(planned, Change) and not _exists(grp.getgrnam, name)  # check mode: nothing made
    change, result, again = _converge("group", {"name": name, "gid": gid})
    accounts.created_group(name)
    assert isinstance(change, Change) and result is not None and result.data["gid"] == gid
    assert grp.getgrnam(name).gr_gid == gid and isinstance(again, Unchanged)
    other = _free_gid()
    change, _, again = _converge("group", {"name": name, "gid": other})
    accounts.created_group(name)
    assert isinstance(change, Change) and change.summary == f"change group {name}"
    assert grp.getgrnam(name).gr_gid == other and isinstance(again, Unchanged)
    change, _, again = _converge("group", {"name": name, "state": "absent"})
    assert isinstance(change, Change) and not _exists(grp.getgrnam, name) and isinstance(again, Unchanged)


def test_user_created_as_asked_then_unchanged_and_the_hash_never_shown(accounts: Accounts, tmp_path: Path) -> None:
    primary, extra, name = accounts.name("g"), accounts.name("x"), accounts.name("u")
    for group in (primary, extra):
        _converge("group", {"name": group})
        accounts.created_group(group)
    home = tmp_path / "homes" / name  # the parent does not exist yet: created first, as Ansible does
    args = {
        "name": name,
        "group": primary,
        "groups": [extra],
        "shell": "/bin/sh",
        "home": str(home),
        "comment": "rigger test",
        "password": HASH_ONE,
    }
    planned = _plan("user", args)
    assert isinstance(planned, Change) and not _exists(pwd.getpwnam, name)
    change, result, again = _converge("user", args)
    accounts.created_user(name)
    entry = pwd.getpwnam(name)
    assert (entry.pw_gid, entry.pw_shell, entry.pw_dir, entry.pw_gecos) == (
        grp.getgrnam(primary).gr_gid,
        "/bin/sh",
        str(home),
        "rigger test",
    )
    assert name in grp.getgrnam(extra).gr_mem and home.is_dir() and home.stat().st_uid == entry.pw_uid
    assert _shadow_field(name) == HASH_ONE
    assert isinstance(again, Unchanged), again
    assert result is not None and result.data["password"] == "NOT_LOGGING_PASSWORD"
    assert HASH_ONE not in repr((planned, change, result, again))


def test_user_changes_only_what_differs_and_groups_follow_ansible(accounts: Accounts, tmp_path: Path) -> None:
    one, two, name = accounts.name("a"), accounts.name("b"), accounts.name("u")
    for group in (one, two):
        _converge("group", {"name": group})
        accounts.created_group(group)
    base = {"name": name, "home": str(tmp_path / name), "groups": [one]}
    _converge("user", base)
    accounts.created_user(name)
    change, _, again = _converge("user", {**base, "groups": [two], "append": True, "shell": "/bin/bash"})
    assert isinstance(change, Change) and change.summary == f"change user {name}: groups, shell"
    assert {g.gr_name for g in grp.getgrall() if name in g.gr_mem} == {one, two} and isinstance(again, Unchanged)
    _converge("user", {**base, "groups": [two]})  # without append: exactly these
    assert {g.gr_name for g in grp.getgrall() if name in g.gr_mem} == {two}
    change, _, again = _converge("user", {**base, "groups": []})  # an empty list: none
    assert isinstance(change, Change) and not [g for g in grp.getgrall() if name in g.gr_mem]
    assert isinstance(again, Unchanged)


def test_password_changes_when_it_differs_unless_on_create(accounts: Accounts, tmp_path: Path) -> None:
    name = accounts.name("u")
    base = {"name": name, "home": str(tmp_path / name), "password": HASH_ONE}
    _converge("user", base)
    accounts.created_user(name)
    on_create = _plan("user", {**base, "password": HASH_TWO, "update_password": "on_create"})
    assert isinstance(on_create, Unchanged) and _shadow_field(name) == HASH_ONE
    change, result, again = _converge("user", {**base, "password": HASH_TWO})
    assert isinstance(change, Change) and _shadow_field(name) == HASH_TWO and isinstance(again, Unchanged)
    assert HASH_TWO not in repr((change, result)) and HASH_ONE not in repr((change, result))


def test_missing_group_is_planned_but_apply_changes_nothing(accounts: Accounts, tmp_path: Path) -> None:
    name, ghost = accounts.name("u"), accounts.name("g")
    args = registry.get("user").with_defaults({"name": name, "groups": [ghost], "home": str(tmp_path / name)})
    change = registry.get("user").plan(_ctx(True), args)
    assert isinstance(change, Change) and ghost in change.summary
    with pytest.raises(TaskFailed, match=f"Group {ghost} does not exist"):
        registry.get("user").apply(_ctx(False), args, change)
    assert not _exists(pwd.getpwnam, name)


def test_user_removed_and_home_kept(accounts: Accounts, tmp_path: Path) -> None:
    name = accounts.name("u")
    home = tmp_path / name
    _converge("user", {"name": name, "home": str(home)})
    accounts.created_user(name)
    change, _, again = _converge("user", {"name": name, "state": "absent"})
    assert isinstance(change, Change) and not _exists(pwd.getpwnam, name) and isinstance(again, Unchanged)
    assert home.is_dir()


def test_playbook_check_then_run_twice_over_the_cli(rigger, accounts: Accounts, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--check --diff changes no account and prints no hash; the second real run changes nothing."""
    group, name = accounts.name("g"), accounts.name("u")
    book = tmp_path / "site.yml"
    book.write_text(
        textwrap.dedent(f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: service group
              ansible.builtin.group: {{name: {group}, system: true}}
            - name: service user
              ansible.builtin.user:
                name: {name}
                group: {group}
                system: true
                shell: /usr/sbin/nologin
                home: {tmp_path}/srv/{name}
                password: "{HASH_ONE}"
        """)
    )
    check = rigger("run", str(book), "--check", "--diff", "--output", "jsonl")
    assert check.rc == 0, check.stdout + check.stderr
    assert not _exists(grp.getgrnam, group) and not _exists(pwd.getpwnam, name)
    assert HASH_ONE not in check.stdout + check.stderr
    first = rigger("run", str(book), "--diff")
    accounts.created_group(group)
    accounts.created_user(name)
    assert first.rc == 0, first.stdout + first.stderr
    assert HASH_ONE not in first.stdout + first.stderr
    assert pwd.getpwnam(name).pw_uid < 1000  # a system account
    second = rigger("run", str(book), "--output", "jsonl")
    assert second.rc == 0 and second.recap["localhost"]["changed"] == 0, second.stdout
