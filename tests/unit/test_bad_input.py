"""Broken playbooks and inventories: the real CLI exits 4 with file:line, no traceback,
and no host is touched (a valid first task that would create a file never runs).

Real: the CLI (in the test process), the YAML loader, each module's JSON Schema. Nothing stands in.
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
        "the quote opened on this line is never closed",
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
    "nul_byte_in_a_path": (
        """\
            - name: nul
              write_file: {path: "/tmp/rigger-nul\\0/etc/passwd", content: a}
        """,
        "path: the value holds a NUL byte",
        7,
    ),
    "nul_byte_in_a_list_item": (
        """\
            - name: nul in a list
              ensure_gpus_idle:
                protect_patterns:
                  - "ok"
                  - "bad\\0"
        """,
        "protect_patterns.1: the value holds a NUL byte",
        10,
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


# Never run, only validated: on code that took them, `run` would signal every process on
# the machine (it did once, when this test was first seen red with `run`).
KILL_PATTERN_CASES = {
    "kill_pattern_with_a_stray_bar": (
        """\
            - name: stray bar
              ensure_gpus_idle:
                kill_patterns: ["vllm serve|"]
        """,
        "matches the empty string, so it matches every process",
        8,
    ),
    "kill_pattern_matching_everything": (
        """\
            - name: dot
              ensure_gpus_idle:
                kill_patterns: ["."]
        """,
        "matches every process on the host",
        8,
    ),
    "kill_pattern_that_is_no_regex": (
        """\
            - name: broken regex
              ensure_gpus_idle:
                kill_patterns: ["vllm("]
        """,
        "invalid regex 'vllm('",
        8,
    ),
}


@pytest.mark.parametrize("case", sorted(KILL_PATTERN_CASES))
def test_a_kill_pattern_that_matches_every_process_is_refused_at_validate_time(rigger, tmp_path, case):
    """A stray `|` (`vllm serve|` matches the empty string), `.`, or no regex at all: exit 4
    at the pattern's file:line from `rigger validate`, which runs no task."""
    body, message, line = KILL_PATTERN_CASES[case]
    book = tmp_path / "play.yml"
    book.write_text(_playbook(tmp_path / "touched", body))
    run = rigger("validate", str(book))
    assert run.rc == 4, run.stderr + run.stdout
    located = [text for text in run.stderr.splitlines() if f"{book}:{line}: " in text]
    assert located and message in located[0], run.stderr
    assert "Traceback" not in run.stderr + run.stdout


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


# Where an unknown connection type can be written -> (file, its text, the line it is on, the hint)
TYPO_CONNECTIONS = {
    "yaml host": ("hosts.yml", "all:\n  hosts:\n    gpu01:\n      ansible_host: 192.0.2.1\n"
                  "      ansible_connection: lcoal\n", 5, "did you mean 'local'?"),
    "ini group vars": ("hosts.ini", "[gpus]\ngpu01 ansible_host=192.0.2.1\n\n[gpus:vars]\nansible_connection=shh\n", 5,
                       "did you mean 'ssh'?"),
    "group_vars file": ("group_vars/all.yml", "ansible_user: deploy\nansible_connection: docker\n", 2,
                        "use local or ssh"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(TYPO_CONNECTIONS))
def test_an_unknown_connection_type_is_invalid_never_ssh(rigger, tmp_path, case):
    """`ansible_connection: lcoal` silently became SSH and validate called the playbook valid."""
    name, text, line, hint = TYPO_CONNECTIONS[case]
    written = tmp_path / name
    written.parent.mkdir(exist_ok=True)
    written.write_text(text)
    inventory = written if name.startswith("hosts") else tmp_path / "hosts.yml"
    if inventory != written:
        inventory.write_text("all:\n  hosts:\n    gpu01: {ansible_host: 192.0.2.1}\n")
    book = tmp_path / "play.yml"
    book.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: msg=x\n")
    for command in ("validate", "run"):
        run = rigger(command, str(book), "-i", str(inventory), timeout_s=60)
        assert run.rc == 4, run.stdout + run.stderr
        assert f"{written}:{line}: " in run.stderr and "is not a connection type rigger has" in run.stderr
        assert hint in run.stderr and "Traceback" not in run.stderr


def test_an_unknown_play_connection_is_invalid(rigger, tmp_path):
    book = tmp_path / "play.yml"
    book.write_text("- hosts: localhost\n  connection: lcoal\n  tasks:\n    - debug: msg=x\n")
    run = rigger("validate", str(book))
    assert run.rc == 4 and f"{book}:2: connection 'lcoal'" in run.stderr and "did you mean 'local'?" in run.stderr


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


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("\"{{ '/tmp/x' ~ nul }}\"", "invalid argument path: the value holds a NUL byte"),
        ("\"{{ 'x' * 1100000 }}\"", "invalid argument path: the value is 1100000 characters long"),
    ],
)
def test_a_bad_value_made_by_a_template_is_a_task_failure_naming_the_argument(rigger, tmp_path, value, message):
    """Rendered at run time, the value reaches the module's validator, not the OS: a failed
    task naming the argument, never "unexpected error (a bug)" from inside the module."""
    marker = tmp_path / "touched"
    book = tmp_path / "play.yml"
    book.write_text(
        '- hosts: localhost\n  gather_facts: false\n  vars:\n    nul: "a\\0b"\n  tasks:\n'
        f"    - write_file: {{path: {value}, content: a}}\n    - command: touch {marker}\n"
    )
    run = rigger("run", str(book))
    assert run.rc == 2, run.stderr + run.stdout
    assert message in run.stdout + run.stderr
    assert "a bug" not in run.stdout + run.stderr and "Traceback" not in run.stdout + run.stderr
    assert not marker.exists()
