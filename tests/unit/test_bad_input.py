"""Broken playbooks and inventories: the real CLI exits 4 with file:line, no traceback,
and no host is touched (a valid first task that would create a file never runs).

Real: the CLI in a subprocess, the YAML loader, each module's JSON Schema. Nothing stands in.
"""

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
    "unknown_module_argument": (
        """\
            - name: typo in an argument
              serve_vllm:
                name: demo
                model: /models/tiny
                prot: 8000
        """,
        "unknown key(s) ('prot' was unexpected) (did you mean 'port'?)",
        10,
    ),
    "unclosed_quote": (
        """\
            - name: unclosed quote
              command: "echo hello
            - name: more tasks below
              command: echo a
            - name: and more
              command: echo b
        """,
        "a quote opened here is never closed?",
        7,
    ),
    "wrong_type": (
        """\
            - name: wrong type
              command: {argv: "not a list"}
        """,
        "argv",
        7,
    ),
    # Module arguments of the wrong type, down to list items (each module's JSON Schema).
    "a_list_where_a_string_belongs": (
        """\
            - ensure_absent:
                path:
                  - /tmp/x
        """,
        "path: ['/tmp/x'] is not of type 'string'",
        7,
    ),
    "a_mapping_where_a_string_belongs": (
        """\
            - ensure_absent:
                path:
                  at: /tmp/x
        """,
        "path: {'at': '/tmp/x'} is not of type 'string'",
        7,
    ),
    "a_number_in_a_list_of_patterns": (
        """\
            - ensure_shm_clean:
                patterns:
                  - psm_*
                  - 1
        """,
        "patterns.1: 1 is not of type 'string'",
        9,
    ),
    "a_list_in_a_list_of_owners": (
        """\
            - ensure_shm_clean:
                owners:
                  - [1]
        """,
        "owners.0: [1] is not of type 'string', 'integer'",
        8,
    ),
    "a_number_in_a_list_of_key_paths": (
        """\
            - patch_quant_config:
                path: /models/m
                remove:
                  config.json:
                    - quantization_config
                    - 7
        """,
        "remove.config.json.1: 7 is not of type 'string'",
        11,
    ),
    "a_string_where_a_mapping_of_keys_belongs": (
        """\
            - patch_quant_config:
                path: /models/m
                set:
                  config.json:
                    - a
        """,
        "set.config.json: ['a'] is not of type 'object'",
        9,
    ),
    "a_list_where_a_mode_belongs": (
        """\
            - write_file:
                path: /tmp/x
                content: a
                mode:
                  - 644
        """,
        "mode: [644] is not of type 'string'",
        9,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_playbook_exit_4_with_location(rigger, tmp_path, case):
    """The error line names file:line and says what is wrong there; no traceback, not
    "a bug" (locating a wrong-typed list item once crashed with exit 250)."""
    body, message, line = CASES[case]
    marker = tmp_path / "touched"
    book = tmp_path / "play.yml"
    book.write_text(_playbook(marker, body))
    run = rigger("run", str(book))
    assert run.rc == 4, run.stderr + run.stdout
    located = [text for text in run.stderr.splitlines() if f"{book}:{line}: " in text]
    assert located and message in located[0], run.stderr
    assert "Traceback" not in run.stderr + run.stdout and "a bug" not in run.stderr
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
