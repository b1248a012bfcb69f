"""group_by changes the run's inventory as ansible-core 2.19 changes it.

Real: the rigger CLI, the inventory reader (group_vars beside the inventory), the local
connection. The expected messages and recap were recorded by running the same playbook
through ansible-core 2.19 (local connection, --forks 1 so the hosts' order is fixed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import RiggerRun, run_rigger

INVENTORY = "[fleet]\nh1 kind=e\nh2 kind=o\nh3 kind=e\n"
PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - group_by: key="{{ 'even' if kind == 'e' else 'odd number' }}"
      register: g
    - ansible.builtin.group_by:
        key: "{{ 'even' if kind == 'e' else 'odd number' }}"
        parents: [parity, fleet]
      register: g2
    - debug: msg="{{ inventory_hostname }} {{ group_names }} {{ g.changed }} {{ g2.changed }} {{ g.add_group }} {{ g2.parent_groups }} {{ flavour | default('none') }} {{ groups['even'] }}"
- hosts: even
  gather_facts: false
  tasks:
    - debug: msg="second {{ inventory_hostname }} {{ groups['parity'] }} {{ groups['odd-number'] }} {{ flavour | default('none') }}"
- hosts: "parity:!even"
  gather_facts: false
  tasks:
    - debug: msg="third {{ inventory_hostname }} {{ group_names }}"
"""  # noqa: E501
# ansible-core 2.19's messages for this playbook, in order
EXPECTED = [
    "h1 ['even', 'fleet', 'parity'] True True even ['parity', 'fleet'] sweet ['h1', 'h3']",
    "h2 ['fleet', 'odd-number', 'parity'] True True odd-number ['parity', 'fleet'] none ['h1', 'h3']",
    "h3 ['even', 'fleet', 'parity'] True False even ['parity', 'fleet'] sweet ['h1', 'h3']",
    "second h1 ['h1', 'h3', 'h2'] ['h2'] sweet",
    "second h3 ['h1', 'h3', 'h2'] ['h2'] sweet",
    "third h2 ['fleet', 'odd-number', 'parity']",
]


def _run(tmp_path: Path, *extra: str) -> RiggerRun:
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "even.yml").write_text("flavour: sweet\n")  # reaches h1, h3 once grouped
    (tmp_path / "hosts").write_text(INVENTORY)
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    args = ["-e", "ansible_connection=local", "-e", "rigger_run_lock=false", "--forks", "1", "--output", "jsonl"]
    return run_rigger("run", str(tmp_path / "site.yml"), "-i", str(tmp_path / "hosts"), *args, *extra, cwd=tmp_path)


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-mode"])
def test_groups_reach_later_tasks_and_plays_as_in_ansible(tmp_path, check):
    """Also in check mode: group_by runs there too, so later plays target the same hosts."""
    run = _run(tmp_path, *(["--check"] if check else []))
    assert run.rc == 0, run.stdout + run.stderr
    assert [r["msg"] for r in run.results() if r["msg"].startswith(("h", "second", "third"))] == EXPECTED
    assert {h: (run.recap[h]["ok"], run.recap[h]["changed"]) for h in ("h1", "h2", "h3")} == {
        "h1": (4, 2),
        "h2": (4, 2),
        "h3": (4, 1),
    }


def test_refresh_inventory_keeps_the_groups(tmp_path):
    """As ansible-core 2.19 does: meta: refresh_inventory reads the sources again and
    group_by's groups stay, in this play and the next (recorded with ansible-core 2.19)."""
    (tmp_path / "hosts").write_text("h1\n")
    (tmp_path / "site.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - group_by: key=made\n"
        "    - debug: msg=\"before {{ groups['made'] | default('gone') }}\"\n"
        "    - meta: refresh_inventory\n"
        "    - debug: msg=\"after {{ groups['made'] | default('gone') }}\"\n"
        "- hosts: made\n  gather_facts: false\n  tasks:\n"
        "    - debug: msg=\"next {{ groups['made'] | default('gone') }}\"\n"
    )
    args = ["-e", "ansible_connection=local", "-e", "rigger_run_lock=false", "--output", "jsonl"]
    run = run_rigger("run", str(tmp_path / "site.yml"), "-i", str(tmp_path / "hosts"), *args, cwd=tmp_path)
    assert run.rc == 0, run.stdout + run.stderr
    assert [r["msg"] for r in run.results() if r["msg"].startswith(("before", "after", "next"))] == [
        "before ['h1']",
        "after ['h1']",
        "next ['h1']",
    ]
