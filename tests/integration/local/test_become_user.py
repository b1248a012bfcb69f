"""become_user other than root, with become_method sudo, as Ansible does it: commands run as
that user (with its HOME, sudo -H), files are written by a process of that user, so they and
their temp files are its own, and it cannot write where it has no right.

Real: sudo, a real user made for this module with useradd (removed after), the rigger CLI,
the local connection and its file primitive. The probes run under /usr/bin/python3 (the
test's venv python lives under /root, which the user cannot reach; a host's own python is
what ansible_python_interpreter names). Needs root, as the fast tier does.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RiggerRun, run_rigger

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("sudo") or not Path("/usr/bin/python3").exists(),
    reason="needs root, sudo and /usr/bin/python3 (the fast tier runs as root)",
)
INVENTORY = "localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n"


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    name = f"rgbu{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "--remove", name], check=False, capture_output=True)


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder the user can reach (pytest's tmp_path sits under a 0700 folder of root's)."""
    made = Path(tempfile.mkdtemp(prefix="rigger-become-user-", dir="/tmp"))
    made.chmod(0o755)
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _owned_dir(base: Path, user: pwd.struct_passwd) -> Path:
    own = base / "own"
    own.mkdir()
    os.chown(own, user.pw_uid, user.pw_gid)
    return own


def _run(tmp_path: Path, tasks: str, *extra: str, play: str = "") -> RiggerRun:
    (tmp_path / "hosts").write_text(INVENTORY)
    book = tmp_path / "site.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n" + play + "  tasks:\n" + tasks)
    args = ["-i", str(tmp_path / "hosts"), "-e", "rigger_run_lock=false", "--output", "jsonl", *extra]
    return run_rigger("run", str(book), *args, cwd=tmp_path)


def _messages(run: RiggerRun) -> list[str]:
    return [r["msg"] for r in run.results() if r["status"] == "ok" and r["msg"].startswith("as ")]


def test_commands_run_as_the_user_with_its_home(tmp_path, user):
    run = _run(
        tmp_path,
        f"    - shell: echo $(id -un) $HOME\n      become: true\n      become_user: {user.pw_name}\n"
        "      register: who\n"
        "    - debug: msg='as {{ who.stdout }}'\n"
        "    - command: id -un\n      become: true\n      register: root\n"
        "    - debug: msg='as {{ root.stdout }}'\n",
    )
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run) == [f"as {user.pw_name} {user.pw_dir}", "as root"]


def test_files_are_written_by_the_user_and_are_its_own(tmp_path, base, user):
    """copy and lineinfile through the file primitive, become_user from -e as a variable:
    the file and its edit are the user's, and the atomic write's temp file (made by the
    user's process beside it) left nothing behind. As root the same play writes root's file."""
    own = _owned_dir(base, user)
    tasks = f'    - copy: {{content: "a=1\\n", dest: {own}/conf}}\n    - lineinfile: {{path: {own}/conf, line: b=2}}\n'
    as_root = _run(tmp_path, tasks, "-e", "ansible_become=true")
    assert as_root.rc == 0, as_root.stdout + as_root.stderr
    assert (own / "conf").stat().st_uid == 0
    (own / "conf").unlink()
    run = _run(tmp_path, tasks, "-e", "ansible_become=true", "-e", f"ansible_become_user={user.pw_name}")
    assert run.rc == 0, run.stdout + run.stderr
    written = own / "conf"
    assert written.read_text() == "a=1\nb=2\n"
    assert (written.stat().st_uid, written.stat().st_gid) == (user.pw_uid, user.pw_gid)
    assert sorted(p.name for p in own.iterdir()) == ["conf"]


def test_the_user_cannot_write_where_it_has_no_right(tmp_path, base, user):
    """Proof the write really ran as the user, not as root: root's folder refuses it."""
    run = _run(
        tmp_path,
        f"    - copy: {{content: x, dest: {base}/f}}\n      become: true\n      become_user: {user.pw_name}\n",
    )
    assert run.rc == 2, run.stdout + run.stderr
    assert not (base / "f").exists()
    failed = [r for r in run.results() if r["status"] == "failed"]
    assert failed and "Permission denied" in failed[0]["msg"], failed


def test_a_play_keyword_and_check_mode(tmp_path, base, user):
    """become_user on the play reaches every task; in check mode nothing is written."""
    own = _owned_dir(base, user)
    play = f"  become: true\n  become_user: {user.pw_name}\n"
    tasks = f"    - copy: {{content: x, dest: {own}/f}}\n"
    checked = _run(tmp_path, tasks, "--check", play=play)
    assert checked.rc == 0 and not (own / "f").exists(), checked.stdout + checked.stderr
    applied = _run(tmp_path, tasks, play=play)
    assert applied.rc == 0, applied.stdout + applied.stderr
    assert (own / "f").stat().st_uid == user.pw_uid


def test_a_name_that_is_no_user_never_reaches_sudo_as_an_option(tmp_path):
    """A value is never an option: `-h` as become_user fails the task before sudo runs."""
    run = _run(tmp_path, "    - command: id -un\n      become: true\n      become_user: '-h'\n")
    assert run.rc == 2, run.stdout + run.stderr
    failed = [r for r in run.results() if r["status"] == "failed"]
    assert failed and "become_user '-h' is not a user name" in failed[0]["msg"], failed


def test_precedence_as_ansible_core(tmp_path, user):
    """ansible.cfg's become_user < the become_user keyword < the ansible_become_user variable
    (an inventory variable of root beats the task's keyword: checked with ansible-core 2.19)."""
    (tmp_path / "ansible.cfg").write_text(f"[privilege_escalation]\nbecome_user = {user.pw_name}\n")
    tasks = (
        "    - command: id -un\n      register: cfg\n"
        "    - debug: msg='as {{ cfg.stdout }}'\n"
        "    - command: id -un\n      become_user: nobody\n      register: keyword\n"
        "    - debug: msg='as {{ keyword.stdout }}'\n"
        "    - command: id -un\n      become_user: nobody\n"
        "      vars: {ansible_become_user: root}\n      register: var\n"
        "    - debug: msg='as {{ var.stdout }}'\n"
    )
    run = _run(tmp_path, tasks, play="  become: true\n")
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run) == [f"as {user.pw_name}", "as nobody", "as root"]


def test_a_become_method_variable_rigger_lacks_fails_the_task(tmp_path):
    """ansible_become_method: su is never silently done with sudo."""
    run = _run(tmp_path, "    - command: id -un\n      become: true\n      vars: {ansible_become_method: su}\n")
    assert run.rc == 2, run.stdout + run.stderr
    failed = [r for r in run.results() if r["status"] == "failed"]
    assert failed and "ansible_become_method 'su' is not supported" in failed[0]["msg"], failed


def test_facts_are_gathered_as_the_play_becomes(tmp_path, user):
    """As Ansible: a play with become_user gathers its facts as that user."""
    (tmp_path / "hosts").write_text(INVENTORY)
    book = tmp_path / "site.yml"
    book.write_text(
        f"- hosts: localhost\n  become: true\n  become_user: {user.pw_name}\n  gather_subset: [min]\n  tasks:\n"
        "    - debug: msg='as {{ ansible_user_id }} {{ ansible_facts.user_dir }}'\n"
    )
    args = ["-i", str(tmp_path / "hosts"), "-e", "rigger_run_lock=false", "--output", "jsonl"]
    run = run_rigger("run", str(book), *args, cwd=tmp_path)
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run) == [f"as {user.pw_name} {user.pw_dir}"]


def test_the_become_user_flag(tmp_path, user):
    """ansible-playbook's -b --become-user USER: every task becomes that user."""
    tasks = "    - command: id -un\n      register: who\n    - debug: msg='as {{ who.stdout }}'\n"
    run = _run(tmp_path, tasks, "-b", "--become-user", user.pw_name)
    assert run.rc == 0, run.stdout + run.stderr
    assert _messages(run) == [f"as {user.pw_name}"]
