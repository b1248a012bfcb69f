"""key=value task arguments split as ansible-core 2.19's ``parse_kv`` splits them.

Real: rigger's parser and CLI; nothing else. The expected rows are written from Ansible's
behaviour (lib/ansible/parsing/splitter.py): the key is everything before the first ``=``
that is not escaped and not the token's first character; a token without one is free text
(``_raw_params``), with ``\\=`` read as ``=``; for free-form modules only the module's own
keys are taken out and the rest stays in the command line.
"""

from __future__ import annotations

import pytest

from engine.playbook import kvargs
from tests.conftest import run_rigger

# (text, free-form keys or None, arguments Ansible makes, free text Ansible keeps)
ANSIBLE_ROWS = [
    ("name=foo daemon-reload=true", None, {"name": "foo", "daemon-reload": "true"}, ""),
    ("a.b=1 2x=y", None, {"a.b": "1", "2x": "y"}, ""),
    ('msg="a=b c"', None, {"msg": "a=b c"}, ""),
    ("key=a=b", None, {"key": "a=b"}, ""),
    ("_private=1", None, {"_private": "1"}, ""),
    ("=value", None, {}, "=value"),
    ("a\\=b", None, {}, "a=b"),
    ("a\\=b=c", None, {"a\\=b": "c"}, ""),
    ("no_equals_here", None, {}, "no_equals_here"),
    ("msg='{{ a == b }}'", None, {"msg": "{{ a == b }}"}, ""),
    ("ls -l chdir=/tmp", frozenset({"chdir"}), {"chdir": "/tmp"}, "ls -l"),
    ("env FOO-BAR=1 run chdir=/x", frozenset({"chdir"}), {"chdir": "/x"}, "env FOO-BAR=1 run"),
    ("echo \\=", frozenset({"chdir"}), {}, "echo ="),
]


@pytest.mark.parametrize(("text", "keys", "args", "free"), ANSIBLE_ROWS)
def test_key_value_split_matches_ansible_parse_kv(text, keys, args, free):
    assert kvargs.parse(text, keys) == (args, free)


def _validate(tmp_path, tasks: str):
    (tmp_path / "p.yml").write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n" + tasks)
    return run_rigger("validate", str(tmp_path / "p.yml"), cwd=tmp_path)


def test_hyphenated_alias_in_key_value_form_validates(tmp_path):
    run = _validate(
        tmp_path,
        "    - systemd: name=foo daemon-reload=true\n    - ansible.builtin.systemd_service: daemon-reload=yes\n",
    )
    assert run.rc == 0, run.stderr


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("sysctl: name=vm.swappiness value=10 foo-bar=1", "sysctl: unknown key(s) ('foo-bar' was unexpected)"),
        ("sysctl: name=vm.swappiness value=10 =1", "'sysctl' takes a mapping of arguments (or key=value pairs)"),
        ("debug: just words", "'debug' takes a mapping of arguments (or key=value pairs), not free text"),
    ],
)
def test_keys_the_module_lacks_and_free_text_stay_errors_with_file_line(tmp_path, task, message):
    run = _validate(tmp_path, f"    - {task}\n")
    assert run.rc == 4, run.stdout + run.stderr
    assert "p.yml:4:" in run.stderr and message in run.stderr
    assert "Traceback" not in run.stderr
