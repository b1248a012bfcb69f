"""A plan predicts the permission failures the host can already tell (issue 30): a non-root
user without become writing in /etc, or installing a package, is shown as "will fail:
permission" in every review format and counted by `rigger plan`; what that user may write
is not flagged, nor is anything when the run is root's.

Real: the rigger CLI: plan as the user nobody (a real setuid process through setpriv), plan
as root and show (in the test process); copy's and apt's plans (apt-get's own
simulation against this machine's dpkg database); the kernel's answer to whether the user
may write in /etc and /var/lib/dpkg. Nothing is installed or written but the plan file.
Not real: nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from unprivileged import nobody_owns, run_as_nobody, visible_dir

WILL_FAIL = "will fail: permission"
TARGET = "/etc/rigger-plan-permission-test.conf"


@pytest.fixture
def folder() -> Iterator[Path]:
    with visible_dir() as path:
        yield path


def playbook(folder: Path, own: Path, apt: bool = True) -> Path:
    book = folder / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f'    - name: a config in /etc\n      copy:\n        content: "x=1\\n"\n        dest: {TARGET}\n'
        + ("    - name: a tool\n      apt:\n        name: sl\n" if apt else "")
        # what a command writes is the command's doing (it may sudo itself): never judged
        + f"    - name: a command\n      command:\n        argv: ['true']\n        creates: {TARGET}.made\n"
        + f'    - name: a file of its own\n      copy:\n        content: "mine\\n"\n        dest: {own}/mine.conf\n'
    )
    book.chmod(0o644)
    return book


def test_a_user_without_become_is_told_which_changes_will_fail(rigger: Any, folder: Path) -> None:
    home = nobody_owns(folder / "home")
    book, plan = playbook(folder, home), home / "plan.json"
    env = {"HOME": str(home)}
    planned = run_as_nobody(["plan", str(book), "-o", str(plan)], cwd=folder, env=env)
    assert planned.rc == 0, planned.stdout + planned.stderr
    assert "4 changes pending on 1 host, 2 changes will fail: permission" in planned.stdout, planned.stdout
    assert f"would copy to {TARGET} ({WILL_FAIL}: the connection user (uid 65534) cannot write in /etc" in (
        planned.stdout
    )
    for fmt in ("text", "markdown", "html"):
        shown = rigger("show", str(plan), "--format", fmt)
        assert shown.rc == 0, shown.stdout + shown.stderr
        assert shown.stdout.count(WILL_FAIL) == 3, (fmt, shown.stdout)  # the headline and two changes, not the command
        assert "cannot write in /etc (owner uid 0" in shown.stdout and "in /var/lib/dpkg" in shown.stdout
        own_change = shown.stdout.split("a file of its own")[-1]
        assert WILL_FAIL not in own_change, (fmt, own_change)
    assert not Path(TARGET).exists()


def test_root_is_not_told_a_change_will_fail(rigger: Any, folder: Path) -> None:
    book = playbook(folder, folder, apt=False)  # apt as root: tests/modules' apt tests
    done = rigger("plan", str(book), "-o", str(folder / "plan.json"))
    assert done.rc == 0, done.stdout + done.stderr
    assert WILL_FAIL not in done.stdout, done.stdout
    assert not Path(TARGET).exists()
