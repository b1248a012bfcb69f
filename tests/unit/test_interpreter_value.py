"""``ansible_python_interpreter`` is a program path and its options, never shell text: a
value holding a shell character is refused with a message naming the host and the
character (exit 4), where it used to end in "unexpected error (a bug)" when the local run
lock's holder could not start ``python3;``.

Real: the CLI in a process of its own, the local connection and the SSH options reader.
Nothing is stood in for; no SSH server is needed (the options are only read)."""

from __future__ import annotations

import shlex

import pytest

from engine.connection.local import LocalConnection
from engine.connection.ssh.options import options_from_host_vars
from engine.errors import ValidationError

BAD = [
    ("python3; touch /tmp/x", "';'"),
    ("python3 | cat", "'|'"),
    ("$(id)", "'$'"),
    ("/usr/bin/python3 `id`", "'`'"),
    ("python3\nid", "control character"),
    ("/opt/[ab]/python3", "'['"),
    ("-c import os", "option"),
    ("", "empty"),
]


@pytest.mark.parametrize(("value", "named"), BAD)
def test_a_shell_character_in_the_interpreter_is_refused_naming_it(value, named):
    with pytest.raises(ValidationError) as local:
        LocalConnection("web1", value)
    assert named in str(local.value) and "web1" in str(local.value)
    with pytest.raises(ValidationError) as ssh:
        options_from_host_vars("web2", {"ansible_host": "127.0.0.1", "ansible_python_interpreter": value or " "})
    assert "web2" in str(ssh.value)


@pytest.mark.parametrize(
    "value",
    ["python3", "/usr/bin/python3", "/opt/venv/bin/python3 -X utf8", "python3.11", "/home/josé/venv/bin/python"],
)
def test_a_path_with_options_is_accepted(value):
    LocalConnection("web1", value)
    read = options_from_host_vars("web1", {"ansible_python_interpreter": value}).python
    assert shlex.split(read) == shlex.split(value)


def test_the_cli_exits_4_with_the_message_instead_of_a_bug(rigger, tmp_path):
    book = tmp_path / "site.yml"
    book.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - command: 'true'\n")
    inventory = tmp_path / "hosts.yml"
    planted = tmp_path / "planted"
    inventory.write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        f"      ansible_python_interpreter: 'python3; touch {planted}'\n"
    )
    result = rigger("run", str(book), "-i", str(inventory))
    assert result.rc == 4, result.stderr
    assert "ansible_python_interpreter" in result.stderr and "';'" in result.stderr
    assert "a bug" not in result.stderr and "Traceback" not in result.stderr
    assert not planted.exists()
