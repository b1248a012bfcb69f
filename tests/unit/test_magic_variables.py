"""The magic variables the static check accepts are the ones a run defines.

Real: the CLI (validate and a local run), the static check and the runner. The list lives
once (engine.templating.magicvars.MAGIC_VARIABLES); a name accepted but not defined would make the
run fail here, a name defined but not accepted would make validate fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.templating.magicvars import MAGIC_VARIABLES


def test_every_magic_variable_validates_and_renders(tmp_path: Path, rigger: Any) -> None:
    tasks = "".join(
        f'    - name: show {name}\n      debug:\n        msg: "{{{{ {name} is defined }}}}"\n'
        for name in sorted(MAGIC_VARIABLES)
    )
    book = tmp_path / "magic.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n{tasks}")
    # an inventory host: inventory_dir/inventory_file are undefined on the implicit localhost (as in Ansible)
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost ansible_connection=local\n")
    assert rigger("validate", str(book), "-i", str(hosts)).rc == 0
    run = rigger("run", str(book), "-i", str(hosts), "--output", "jsonl", "-e", "rigger_run_lock=false")
    results = run.results()
    assert len(results) == len(MAGIC_VARIABLES) and run.rc == 0, run.stdout + run.stderr
    assert all(r["data"]["msg"] is True for r in results), results


def test_vars_is_the_host_s_variables_in_scope(tmp_path: Path, rigger: Any) -> None:
    """``vars``: Ansible's dict of the variables in scope, read with ``in`` and ``[]``; a
    variable that cannot render yet (``later``) is not rendered by reading another."""
    book = tmp_path / "vars.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        '  vars: {port: 8000, wanted: [port, absent], later: "{{ 1 // 0 }}"}\n  tasks:\n'
        '    - debug: {msg: "{{ item }}"}\n      loop: "{{ wanted }}"\n      when: item not in vars\n'
        "    - debug: {msg: \"{{ vars['port'] + 1 }} {{ 'port' in vars }} {{ vars.extra }}\"}\n"
    )
    assert rigger("validate", str(book)).rc == 0
    run = rigger("run", str(book), "--output", "jsonl", "-e", "rigger_run_lock=false", "-e", "extra=x")
    results = run.results()
    assert run.rc == 0, run.stdout + run.stderr
    shown = [r["data"].get("msg") for r in results if r["status"] == "ok"]
    assert shown == ["absent", "8001 True x"], results
