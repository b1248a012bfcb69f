"""The YAML layer on its own: real PyYAML, real files; nothing is faked."""

from __future__ import annotations

import pytest

from engine.errors import ValidationError
from engine.yamlload import MAX_BYTES, load_file, load_text


def test_every_key_knows_its_line():
    data = load_text("a: 1\nb:\n  c: 2\n  d: [1, 2]\n", "f.yml")
    assert data.line_of("b") == 2
    assert data["b"].line_of("d") == 4
    assert data.file == "f.yml"


def test_duplicate_key_names_both_lines():
    with pytest.raises(ValidationError) as err:
        load_text("name: a\nhosts: x\nname: b\n", "f.yml")
    assert err.value.line == 3
    assert "duplicate key 'name'" in err.value.message and "line 1" in err.value.message


def test_deep_nesting_is_refused_before_parsing():
    with pytest.raises(ValidationError, match="nested more than"):
        load_text("a: " + "[" * 5000 + "]" * 5000, "f.yml")


def test_alias_bomb_is_refused():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 8):
        refs = ", ".join([f"*a{level - 1}"] * 10)
        lines.append(f"a{level}: &a{level} [{refs}]")
    with pytest.raises(ValidationError, match="alias"):
        load_text("\n".join(lines) + "\n", "f.yml")


def test_not_utf8(tmp_path):
    path = tmp_path / "p.yml"
    path.write_bytes(b"- hosts: all\n  name: caf\xe9\n")
    with pytest.raises(ValidationError) as err:
        load_file(path)
    assert err.value.line == 2 and "UTF-8" in err.value.message


def test_oversized(tmp_path):
    path = tmp_path / "big.yml"
    path.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(ValidationError, match="limit"):
        load_file(path)


def test_syntax_error_has_a_line():
    with pytest.raises(ValidationError) as err:
        load_text("a: 1\nb: [unclosed\nc: 3\n", "f.yml")
    assert err.value.line is not None and "invalid YAML" in err.value.message


def test_merge_keys_are_overridden_by_explicit_keys_in_any_order():
    text = "base: &b {a: 1, b: 2}\nx:\n  <<: *b\n  b: 3\ny:\n  b: 4\n  <<: *b\n"
    data = load_text(text, "f.yml")
    assert data["x"] == {"a": 1, "b": 3} and data["y"] == {"a": 1, "b": 4}


def test_merge_sequence_precedence_follows_yaml():
    assert load_text("x: {<<: [{a: 1}, {a: 2, c: 3}]}\n", "f.yml")["x"] == {"a": 1, "c": 3}


# Mistakes people make, the line the mistake is on, and what the message must say. PyYAML
# notices an unclosed bracket or quote lines later; its own words ("while parsing a flow
# sequence expected ',' or ']'") say nothing about what to do.
MISTAKES = {
    "unclosed list": ("a: 1\nmsg: [a, b\nc: 3\n", 2, "the list '[' opened on this line is never closed with ']'"),
    "unclosed mapping": ("a: {b: 1\nc: 3\n", 1, "the mapping '{' opened on this line is never closed with '}'"),
    "unclosed quote": ('a: "abc\nb: 1\nc: 2\n', 1, "the quote opened on this line is never closed"),
    "missing colon": ("tasks\n  - debug: msg=x\n", 1, "a key without its ':'"),
    "tab": ("a:\n\t- b\n", 2, "YAML indents with spaces only"),
    "colon in a value": ("msg: a: b\n", 1, "A value that contains ': ' must be quoted"),
    "misindented key": ("a:\n    b: 1\n   c: 2\n", 3, "indented differently from the lines before it"),
    "unquoted template": ("msg: {{ foo }}\n", 1, "a value that starts with '{{' must be quoted"),
}


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_yaml_mistake_is_named_at_its_line_in_plain_words(case):
    text, line, words = MISTAKES[case]
    with pytest.raises(ValidationError) as err:
        load_text(text, "f.yml")
    assert (err.value.line, words in err.value.message) == (line, True), err.value.message
    assert not any(raw in err.value.message for raw in ("while parsing", "<block end>", "while scanning"))
