"""Broken playbooks and inventories: the real CLI exits 4 with file:line, no traceback,
and no host is touched (a valid first task that would create a file never runs)."""

from __future__ import annotations

import textwrap

import pytest

from engine.yamlload import MAX_BYTES


def _playbook(marker, body: str) -> str:
    head = textwrap.dedent(f"""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: would touch the host
              command: touch {marker}
        """)
    return head + textwrap.indent(textwrap.dedent(body), "    ")


CASES = {
    "duplicate_key": (
        """\
            - name: dup
              command: echo a
              command: echo b
        """,
        "duplicate key 'command'",
        8,
    ),
    "unknown_keyword": (
        """\
            - name: typo
              command: echo a
              regsiter: out
        """,
        "did you mean 'register'",
        8,
    ),
    "misspelled_module": (
        """\
            - name: typo
              ensure_absnet: {path: /tmp/x}
        """,
        "did you mean 'ensure_absent'",
        7,
    ),
    "yaml11_no": (
        """\
            - name: octal mode
              write_file: {path: /tmp/x, content: a, mode: NO}
        """,
        "quote it",
        7,
    ),
    "yaml11_octal": (
        """\
            - name: octal mode
              write_file:
                path: /tmp/x
                content: a
                mode: 0644
        """,
        "quote it: '0644'",
        10,
    ),
    "undefined_variable": (
        """\
            - name: undefined
              command: "echo {{ model_dri }}"
        """,
        "undefined variable 'model_dri'",
        7,
    ),
    "bad_jinja": (
        """\
            - name: bad jinja
              command: "echo {{ x | }}"
        """,
        "template syntax error",
        7,
    ),
    "bad_when": (
        """\
            - name: bad when
              command: echo a
              when: "x ==="
        """,
        "when",
        8,
    ),
    "wrong_type": (
        """\
            - name: wrong type
              command: {argv: "not a list"}
        """,
        "argv",
        7,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_playbook_exit_4_with_location(rigger, tmp_path, case):
    body, message, line = CASES[case]
    marker = tmp_path / "touched"
    book = tmp_path / "play.yml"
    book.write_text(_playbook(marker, body))
    run = rigger("run", str(book))
    assert run.rc == 4, run.stderr + run.stdout
    assert f"{book}:{line}:" in run.stderr, run.stderr
    assert message in run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    assert not marker.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty"),
        (b"hosts: all\ntasks: []\n", "a playbook is a list of plays"),
        (b"- hosts: all\n  name: caf\xe9\n", "UTF-8"),
        (b"- hosts: all\n  vars: " + b"[" * 2000 + b"]" * 2000 + b"\n", "nested more than"),
        (b"- hosts: all\n  task:\n    - command: x\n", "unknown key"),
    ],
)
def test_unusable_files_exit_4(rigger, tmp_path, content, message):
    book = tmp_path / "play.yml"
    book.write_bytes(content)
    run = rigger("run", str(book))
    assert run.rc == 4 and message in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_oversized_and_alias_bomb(rigger, tmp_path):
    big = tmp_path / "big.yml"
    big.write_bytes(b"#" * (MAX_BYTES + 10))
    assert "limit" in rigger("validate", str(big)).stderr
    lines = ["- hosts: all", "  vars:", "    a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"    a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 10)}]" for n in range(1, 8)]
    bomb = tmp_path / "bomb.yml"
    bomb.write_text("\n".join(lines) + "\n")
    run = rigger("validate", str(bomb))
    assert run.rc == 4 and "alias" in run.stderr


def test_inventory_host_without_address(rigger, tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu01:\n      ansible_host:\n")
    book = tmp_path / "play.yml"
    marker = tmp_path / "touched"
    book.write_text(_playbook(marker, ""))
    run = rigger("run", str(book), "-i", str(inv))
    assert run.rc == 4 and f"{inv}:3:" in run.stderr and "no address" in run.stderr
    assert not marker.exists()


def test_bad_options_exit_5(rigger, tmp_path):
    book = tmp_path / "play.yml"
    book.write_text("- hosts: localhost\n  tasks: []\n")
    assert rigger("run", str(book), "--forks", "0").rc == 5
    assert rigger("run", str(book), "--no-such-flag").rc == 5
    assert rigger("run", str(book), "-e", "not a pair").rc == 5


def test_limit_matching_nothing_exits_1_as_ansible(rigger, tmp_path):
    """ansible-playbook answers a --limit that leaves no inventory host with exit 1 and this
    message; with an empty inventory it runs (nothing). Checked against real ansible-core
    by the differential cases limit-matches-nothing and limit-empty-inventory."""
    book = tmp_path / "play.yml"
    book.write_text("- hosts: localhost\n  tasks: []\n")
    inventory = tmp_path / "hosts"
    inventory.write_text("web1\n")
    run = rigger("run", str(book), "-i", str(inventory), "--limit", "nosuchhost")
    assert run.rc == 1 and "leave no hosts to target" in run.stderr
    assert rigger("run", str(book), "--limit", "nosuchhost").rc == 0
