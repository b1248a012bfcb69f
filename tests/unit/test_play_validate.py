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
        (
            "  tasks:\n    - debug: msg=x\n      with_random_choice: [a, b]\n",
            5,
            "`with_random_choice` loops are not supported",
        ),
        ("  tasks:\n    - command: sleep 9\n      async: 10\n      poll: 0\n", 6, "`poll: 0` (fire and forget"),
        ("  tasks:\n    - include: t.yml\n", 4, "`include` was removed from Ansible (2.16); use include_tasks"),
        ("- include: other.yml\n", 3, "`include` was removed from Ansible (2.16); use import_playbook"),
        ("  tasks:\n    - become_method: su\n      command: 'true'\n", 4, "`become_method: su` is not supported"),
        (
            "  tasks:\n    - ansible.builtin.cron: name=x\n",
            4,
            "module 'ansible.builtin.cron' (from ansible.builtin)",
        ),
        ("  roles: [geerlingguy.nginx.web]\n", 3, "the collection geerlingguy.nginx is not installed"),
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


def test_include_vars_names_count_as_defined_when_the_file_is_written_out(tmp_path):
    (tmp_path / "vars").mkdir()
    (tmp_path / "vars" / "site.yml").write_text("site_name: dgx\n")
    body = "  tasks:\n    - include_vars: site.yml\n    - debug: msg={{ site_name }}\n"
    assert _validate(tmp_path, PLAY + body).rc == 0
    typo = body.replace("msg={{ site_name }}", "msg={{ site_nmae }}")
    run = _validate(tmp_path, PLAY + typo)
    assert run.rc == 4 and "undefined variable 'site_nmae'" in run.stderr


def test_include_vars_of_a_templated_path_leaves_undefined_names_to_the_run(tmp_path):
    body = (
        "  tasks:\n"
        '    - include_vars: "{{ item }}"\n'
        '      with_first_found: ["{{ ansible_distribution }}.yml", default.yml]\n'
        "    - debug: msg={{ nfs_packages }}\n"
    )
    assert _validate(tmp_path, PLAY + body).rc == 0


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("    - assert:\n        that: x | nope\n", 4, "task 'assert': filter 'nope' is not available in rigger"),
        ("    - assert:\n        that: [true, x is nope]\n", 4, "test 'nope' is not available in rigger"),
        (
            "    - debug: msg=\"{{ lookup('hashi_vault', 'x') }}\"\n",
            4,
            "lookup 'hashi_vault' is not available in rigger",
        ),
        ("    - debug: msg=x\n      when: query('nope') | length\n", 4, "lookup 'nope' is not available in rigger"),
        ('    - debug: msg="{{ x | nope }}"\n', 4, "filter 'nope' is not available in rigger"),
    ],
)
def test_filters_tests_and_lookups_rigger_lacks_are_refused_by_name(tmp_path, body, line, message):
    run = _validate(tmp_path, PLAY + "  vars: {x: 1}\n  tasks:\n" + body)
    assert run.rc == 4, run.stderr
    assert f"p.yml:{line + 1}:" in run.stderr and message in run.stderr and "did you mean" not in run.stderr


def test_known_filters_and_lookups_in_assert_pass(tmp_path):
    body = (
        "    - assert:\n        that:\n"
        "          - x | union([2]) | length == 2\n"
        "          - lookup('env', 'HOME') is string\n"
    )
    assert _validate(tmp_path, PLAY + "  vars: {x: [1]}\n  tasks:\n" + body).rc == 0


@pytest.mark.parametrize(
    ("when", "valid"),
    [
        ("pkgs is defined", True),  # DeepOps software.yml: the task is skipped where pkgs is missing
        ("pkgs is defined and pkgs | length > 0", True),
        ("[pkgs is defined, other_flag | default(true)]", True),
        ("pkgs.names is defined", True),  # x.y is defined: x is tested too
        ("pkgs is not defined", False),  # runs exactly where pkgs is missing
        ("pkgs is undefined", False),
        ("true", False),
    ],
)
def test_a_name_the_tasks_when_tests_with_is_defined_may_be_missing(tmp_path, when, valid):
    """Ansible judges `when` before it renders the task's arguments: a name tested with
    `is defined` there is skipped, not an error, where it is missing. Real: the CLI's validate."""
    listed = "when:\n        - pkgs is defined\n        - other_flag | default(true)"
    when_yaml = listed if when.startswith("[") else f"when: {when}"
    run = _validate(
        tmp_path,
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        f'    - package:\n        name: "{{{{ pkgs }}}}"\n        state: absent\n      {when_yaml}\n',
    )
    assert (run.rc == 0) is valid, run.stderr
    if not valid:
        assert "undefined variable 'pkgs'" in run.stderr
