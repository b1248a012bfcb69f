"""String arguments from -e or templates take the type the module's schema declares."""

from __future__ import annotations

import pytest

from engine.registry import coerce_scalar


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("8000", "integer", 8000),
        ("-3", "integer", -3),
        ("0.9", "number", 0.9),
        ("8", "number", 8),
        ("yes", "boolean", True),
        ("False", "boolean", False),
        ("80a", "integer", "80a"),
        ("maybe", "boolean", "maybe"),
        ("0.9x", "number", "0.9x"),
        ("8000", "string", "8000"),
    ],
)
def test_coerce_scalar(text, kind, expected):
    assert coerce_scalar(text, kind) == expected


def test_extra_var_string_reaches_an_integer_argument(rigger, tmp_path):
    book = tmp_path / "p.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - command:\n        argv: [sh, -c, 'exit 0']\n      timeout: 30\n"
        "    - write_file:\n        path: '{{ out }}'\n        content: x\n        backup: '{{ keep }}'\n"
    )
    run = rigger("run", str(book), "-e", f"out={tmp_path}/o keep=no", "--output", "jsonl")
    assert run.rc == 0, run.stdout + run.stderr
    assert (tmp_path / "o").read_text() == "x"


def test_filters_in_templates_do_not_break_the_static_check(rigger, tmp_path):
    book = tmp_path / "p.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  vars: {p: /a/b/c.json, f: 'yes'}\n  tasks:\n"
        "    - debug: {msg: \"{{ p | dirname }} {{ f | bool }} {{ p | basename | regex_replace('json', 'yml') }}\"}\n"
    )
    run = rigger("run", str(book), "--output", "jsonl")
    assert run.rc == 0, run.stderr
    assert run.results()[0]["msg"] == "/a/b True c.yml"
    assert rigger("validate", str(book)).rc == 0
