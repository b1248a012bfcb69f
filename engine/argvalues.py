"""What every module argument must be, whatever the module's schema says; and the schema
keywords rigger adds to JSON Schema.

Every string in a module's arguments (keys and values, nested included) is refused, naming
the argument, when it holds a NUL byte (no path, package name or command line can carry
one: the OS call would fail mid-task as "a bug") or is longer than ``MAX_STRING``. This
runs in the one validator every module's arguments go through (``validator()``), at
validate time for literal values and again once templates are rendered, so a bad value is
a clear failure (exit 4 or a failed task), never an exception inside a module.

Keywords (unknown to JSON Schema, so they are ours):

- ``"killPattern": true`` on a string: a regex that selects processes to signal. It must
  compile, and must not match the empty string nor every process (a stray ``|``, ``.*``,
  ``x?``, ``.``): such a pattern would end every process on the host.

"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema

MAX_STRING = 1 << 20  # 1 MiB: a file's content fits; nothing else in a task comes close

# Command lines and names unrelated to one another: a pattern matching all of them matches
# any process (``.``, ``\S``, ``[\s\S]``, ``\w|\W``, ``(?=.)``).
_EVERY_PROCESS = ("init", "/usr/sbin/sshd -D", "bash", "Z", "0", "-", "_", "/", "\N{SNOWMAN}", " ")


def kill_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` may not select processes to signal, or None."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return f"invalid regex {pattern!r}: {exc}"
    if compiled.search("") is not None:
        return (
            f"regex {pattern!r} matches the empty string, so it matches every process on the host "
            "(a stray '|' or a '*' or '?' on everything): anchor it to what you mean"
        )
    if all(compiled.search(sample) for sample in _EVERY_PROCESS):
        return f"regex {pattern!r} matches every process on the host: make it name what you mean"
    return None


def _kill_pattern(validator: Any, enabled: Any, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if enabled and isinstance(instance, str):
        problem = kill_pattern_problem(instance)
        if problem:
            yield jsonschema.ValidationError(problem)


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        at = text.index("\x00")
        return f"holds a NUL byte (\\x00) at character {at}: no path, name or command can carry one"
    if len(text) > MAX_STRING:
        return f"is {len(text)} characters long, more than rigger takes in one value ({MAX_STRING})"
    return None


def value_errors(instance: Any, path: tuple[Any, ...] = ()) -> Iterator[jsonschema.ValidationError]:
    """A ValidationError for each string (key or value) that no module can take."""
    if isinstance(instance, str):
        problem = _string_problem(instance)
        if problem:
            yield jsonschema.ValidationError(
                f"the value {problem}", validator="rigger", path=deque(path), instance=instance[:80]
            )
    elif isinstance(instance, Mapping):
        for key, value in instance.items():
            problem = _string_problem(key) if isinstance(key, str) else None
            if problem:
                yield jsonschema.ValidationError(
                    f"the key {problem}", validator="rigger", path=deque(path), instance=str(key)[:80]
                )
                continue
            yield from value_errors(value, (*path, key))
    elif isinstance(instance, (list, tuple)):
        for index, item in enumerate(instance):
            yield from value_errors(item, (*path, index))


_Base = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"killPattern": _kill_pattern})


class ArgsValidator:
    """A module's schema plus the rules above, with jsonschema's ``iter_errors`` shape."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        self._validator = _Base(schema)

    def iter_errors(self, instance: Any) -> Iterator[jsonschema.ValidationError]:
        yield from value_errors(instance)
        yield from self._validator.iter_errors(instance)


def validator(schema: Mapping[str, Any]) -> ArgsValidator:
    return ArgsValidator(schema)
