"""`rigger validate` on Ansible structure: FQCN names, key=value arguments, and every
keyword rigger does not implement refused by name with file:line and exit 4.

Real: the rigger CLI (in the test process); nothing connects to a host.
"""

from __future__ import annotations

import pytest

from tests.conftest import run_rigger

PLAY = "- hosts: localhost\n  gather_facts: false\n"


def _validate(tmp_path, text: str):
    (tmp_path / "p.yml").write_text(text)
    return run_rigger("validate", str(tmp_path / "p.yml"), cwd=tmp_path)


def test_fqcn_names_and_key_value_arguments_validate(tmp_path):
    run = _validate(
        tmp_path,
        PLAY + "  tasks:\n"
        '    - ansible.builtin.debug: msg="hello there"\n'
        "    - ansible.legacy.set_fact: a=1 b='{{ 2 }}'\n"
        "    - ansible.builtin.command: ls -l chdir=/tmp\n"
        "    - action: debug msg=hi\n"
        "    - local_action: command true\n"
        "    - ansible.builtin.meta: noop\n"
        "    - ansible.builtin.file: path=/tmp/x state=directory mode=0755\n"
        "    - ansible.builtin.apt: name=sl state=present\n"
        "    - ansible.legacy.lineinfile: path=/tmp/x/f line=a create=true\n",
    )
    assert run.rc == 0, run.stderr
    assert "9 tasks" in run.stdout


@pytest.mark.parametrize(
    ("snippet", "line", "message"),
    [
        ("  strategy: free\n  tasks: []\n", 3, "`strategy: free` is not supported"),
        ("  vars_prompt:\n    - name: x\n  tasks: []\n", 3, "`vars_prompt` is not supported"),
        ("  tasks:\n    - debug: msg=x\n      with_sequence: count=2\n", 5, "`with_sequence` loops are not supported"),
        ("  tasks:\n    - command: sleep 9\n      async: 10\n", 5, "`async: 10` is not supported"),
        ("  tasks:\n    - include: t.yml\n", 4, "`include` was removed from Ansible (2.16); use include_tasks"),
        ("- include: other.yml\n", 3, "`include` was removed from Ansible (2.16); use import_playbook"),
        ("  tasks:\n    - meta: clear_facts\n", 4, "`meta: clear_facts` is not supported"),
        ("  tasks:\n    - become_user: postgres\n      command: 'true'\n", 4, "`become_user: postgres`"),
        (
            "  tasks:\n    - ansible.builtin.service: name=x\n",
            4,
            "module 'ansible.builtin.service' (from ansible.builtin)",
        ),
        ("  roles: [geerlingguy.nginx.web]\n", 3, "roles from collections are not supported"),
        ("  tasks:\n    - import_tasks: t.yml\n      loop: [1]\n", 4, "you cannot use loops on 'import_tasks'"),
        (
            "  tasks:\n    - include_role:\n        name: r\n        apply: {tags: x}\n",
            4,
            "with `apply` is not supported",
        ),
    ],
)
def test_unsupported_features_fail_validate_with_exit_4(tmp_path, snippet, line, message):
    (tmp_path / "t.yml").write_text("- debug: msg=x\n")
    run = _validate(tmp_path, PLAY + snippet)
    assert run.rc == 4, run.stdout + run.stderr
    assert f"p.yml:{line}:" in run.stderr
    assert message in run.stderr
    assert "Traceback" not in run.stderr and "unknown key" not in run.stderr


def test_missing_role_and_import_loop_are_clear_errors(tmp_path):
    run = _validate(tmp_path, PLAY + "  roles:\n    - nosuchrole\n")
    assert run.rc == 4 and "the role 'nosuchrole' was not found in" in run.stderr and "p.yml:4:" in run.stderr
    (tmp_path / "t.yml").write_text("- import_tasks: t.yml\n")
    run = _validate(tmp_path, PLAY + "  tasks:\n    - import_tasks: t.yml\n")
    assert run.rc == 4 and "imports itself" in run.stderr
