"""An inventory host whose ansible_connection rigger lacks (mitogen_doas, a typo) stops a
run only when a play targets it, as Ansible fails only when it connects to that host; no
play reaching it gives a warning naming where it was written.

Real: the rigger CLI, the inventory reader, the local connection running the play.
Nothing is stubbed."""

from __future__ import annotations

import pytest

INVENTORY = (
    "[gpus]\n"
    "localhost ansible_connection=local\n"
    "\n"
    "[bsd]\n"
    "jail1 ansible_host=192.0.2.9 ansible_connection=mitogen_doas\n"
)


def _book(tmp_path, hosts: str):
    marker = tmp_path / "ran"
    book = tmp_path / "play.yml"
    book.write_text(f"- hosts: {hosts}\n  gather_facts: false\n  tasks:\n    - copy: content=x dest={marker}\n")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(INVENTORY)
    return book, inventory, marker


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_host_no_play_targets_is_a_warning(rigger, tmp_path, command):
    book, inventory, marker = _book(tmp_path, "gpus")
    run = rigger(command, str(book), "-i", str(inventory), timeout_s=60)
    assert run.rc == 0, run.stdout + run.stderr
    shown = run.stdout + run.stderr  # run's warnings go to its output, validate's to stderr
    assert f"[WARNING] {inventory}:5: ansible_connection 'mitogen_doas' is not a connection type" in shown
    assert "host jail1; no play targets it" in shown
    assert marker.exists() == (command == "run")


@pytest.mark.parametrize("hosts,limit", [("all", None), ("bsd", None), ("all", "jail1")])
def test_a_targeted_host_is_refused_before_any_host_is_touched(rigger, tmp_path, hosts, limit):
    book, inventory, marker = _book(tmp_path, hosts)
    for command in ("validate", "run", "plan"):
        extra = ["--limit", limit] if limit and command != "validate" else []
        extra += ["-o", str(tmp_path / "plan.json")] if command == "plan" else []
        run = rigger(command, str(book), "-i", str(inventory), *extra, timeout_s=60)
        assert run.rc == 4, run.stdout + run.stderr
        assert f"{inventory}:5: ansible_connection 'mitogen_doas'" in run.stderr
        assert "host jail1, which a play targets" in run.stderr and "Traceback" not in run.stderr
    assert not marker.exists() and not (tmp_path / "plan.json").exists()


def test_a_limit_that_leaves_the_host_out_runs(rigger, tmp_path):
    book, inventory, marker = _book(tmp_path, "all")
    run = rigger("run", str(book), "-i", str(inventory), "--limit", "localhost", timeout_s=60)
    assert run.rc == 0, run.stdout + run.stderr
    assert marker.exists()
