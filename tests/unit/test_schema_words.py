"""anyOf/oneOf/not errors of module argument schemas name every choice, in the user's words.

Real: every registered module's own SCHEMA, jsonschema, the loader and the rigger CLI
(`validate`, in the test process) and the executor's run-time argument check; nothing
connects to a host.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import pytest

from engine import registry, schema_words
from engine.run import executor
from tests.conftest import run_rigger


def _combinators(schema: Any, where: str) -> Iterator[tuple[str, str, Any]]:
    """(where, validator, subschema) for each anyOf/oneOf of required keys, and each
    not-anyOf of them, anywhere in a schema."""
    if not isinstance(schema, Mapping):
        return
    for validator in ("anyOf", "oneOf"):
        if schema_words._required_sets(schema.get(validator)) is not None:
            yield where, validator, schema
    inner = schema.get("not")
    if isinstance(inner, Mapping) and schema_words._required_sets(inner.get("anyOf")) is not None:
        yield where, "not", schema
    for key, value in schema.items():
        if isinstance(value, Mapping):
            yield from _combinators(value, f"{where}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                yield from _combinators(item, f"{where}.{key}.{index}")


CASES = sorted(
    {
        (name, where, validator)
        for name in registry.module_names()
        for where, validator, _ in _combinators(registry.get(name).schema, name)
    }
)


def _subschema(name: str, where: str) -> Any:
    node: Any = registry.get(name).schema
    for part in where.split(".")[1:]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _keys(branches: Any) -> list[str]:
    return [key for branch in branches for key in branch["required"]]


def _violations(validator: str, schema: Mapping[str, Any]) -> list[tuple[dict[str, str], str]]:
    """Instances that break the combinator, each with the lead of the sentence it must get."""
    if validator == "anyOf":
        return [({}, "needs at least one of: ")]
    if validator == "oneOf":
        every = dict.fromkeys(_keys(schema["oneOf"]), "x")
        return [({}, "needs exactly one of: "), (every, "takes only one of: ")]
    first = schema["not"]["anyOf"][0]["required"]
    return [(dict.fromkeys(first, "x"), "takes at most one of: ")]


def test_the_table_covers_the_modules_that_use_combinators():
    names = {name for name, _, _ in CASES}
    assert {"systemd_service", "sysctl", "copy", "apt_key", "command", "file"} <= names


@pytest.mark.parametrize(("name", "where", "validator"), CASES)
def test_every_combinator_error_names_every_choice(name, where, validator):
    schema = _subschema(name, where)
    branches = schema[validator] if validator != "not" else schema["not"]["anyOf"]
    for instance, lead in _violations(validator, schema):
        errors = [e for e in jsonschema.Draft7Validator(schema).iter_errors(instance) if e.validator == validator]
        assert len(errors) == 1, (instance, [e.message for e in errors])
        words = schema_words.combinator_words(errors[0])
        assert words is not None and words.startswith(lead), words
        assert all(key in words for key in _keys(branches)), words


def _validate(tmp_path, task: str):
    (tmp_path / "p.yml").write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - {task}\n")
    return run_rigger("validate", str(tmp_path / "p.yml"), cwd=tmp_path)


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (
            "systemd: name=foo",
            "systemd: needs at least one of: state, enabled, masked, daemon_reload, daemon-reload, daemon_reexec",
        ),
        ("sysctl: value=1", "sysctl: needs at least one of: name, key"),
        ("copy: dest=/tmp/x src=a content=b", "copy: takes only one of: src, content (got src, content)"),
        ("copy: dest=/tmp/x", "copy: needs exactly one of: src, content"),
        ("apt_key: data=x file=y", "apt_key: takes at most one of: data, file, url"),
        ("setup: {gather_subset: 5}", "gather_subset: 5 is not of type 'string', 'array'"),
    ],
)
def test_combinator_failures_exit_4_with_file_line_and_every_choice(tmp_path, task, message):
    run = _validate(tmp_path, task)
    assert run.rc == 4, run.stdout + run.stderr
    assert f"p.yml:4: {message}" in run.stderr
    assert "is a required property" not in run.stderr and "Traceback" not in run.stderr


def test_run_time_argument_check_uses_the_same_words():
    problem = executor._args_problem(registry.get("systemd_service"), {"name": "foo"})
    assert problem == (
        "invalid argument systemd_service: needs at least one of: "
        "state, enabled, masked, daemon_reload, daemon-reload, daemon_reexec"
    )
