r"""What every module argument must be, whatever the module's schema says; and the schema
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
  ``x?``, ``.``): such a pattern would end every process on the host. "Every process" is
  decided from the pattern's parse, not by trying names: an alternative that is one
  character class, repeated or not, with only anchors or lookaheads beside it (``s`` in
  ``vllm|s``, ``\w+``, ``.``, ``[^x]*``, ``(?=.)``, ``^\S``) matches nearly every process.

User regexes are matched through ``engine.userregex.UserRegex``, with a bound on the
text and on the time (that module says which and why).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema

from engine.userregex import compile_bounded

MAX_STRING = 1 << 20  # 1 MiB: a file's content fits; nothing else in a task comes close

_SRE = importlib.import_module("re._parser")  # the parse re itself compiles from
_ONE_CHAR = {"LITERAL", "NOT_LITERAL", "ANY", "IN"}
_REPEATS = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
# Anchors, \b and lookarounds take no character: they are left out, and what is left
# matches wherever the pattern does, and maybe more (a refusal too many: the safe side).
_ZERO_WIDTH = {"AT", "ASSERT", "ASSERT_NOT"}


def _one_class(items: Any) -> bool:
    r"""Is this sequence, less its anchors and lookarounds, one character class (a literal,
    ``.``, ``[...]``, ``\w``), repeated or not, or a group or alternation holding one?"""
    # what may match nothing (`x?`, `[^x]*`) can be left out: the rest still matches
    rest = [(str(op), av) for op, av in items if str(op) not in _ZERO_WIDTH and not _optional(str(op), av)]
    if not rest:
        return any(str(op) == "ASSERT" and _one_class(av[1]) for op, av in items)
    if all(_broad(op, av) for op, av in rest):  # `..`, `\S\S+`, `.{3}`: classes only, no name
        return True
    if len(rest) != 1:
        return False
    op, av = rest[0]
    if op in _ONE_CHAR:
        return True
    if op in _REPEATS:
        return av[0] <= 1 and _one_class(av[2])
    if op == "SUBPATTERN":
        return _one_class(av[-1])
    if op == "ATOMIC_GROUP":
        return _one_class(av)
    if op == "BRANCH":
        return any(_one_class(branch) for branch in av[1])
    return False


def _optional(op: str, av: Any) -> bool:
    return op in _REPEATS and av[0] == 0


def _broad(op: str, av: Any) -> bool:
    r"""A class of more than a few spelled characters (``.``, ``[^x]``, ``\w``, ``[a-z]``),
    or a repeat or group of only such."""
    if op in ("ANY", "NOT_LITERAL"):
        return True
    if op == "IN":
        return any(str(kind) != "LITERAL" for kind, _ in av)
    if op in _REPEATS:
        return all(_broad(str(o), a) for o, a in av[2])
    if op == "SUBPATTERN":
        return all(_broad(str(o), a) for o, a in av[-1])
    return False


def matches_every_process(pattern: str) -> bool:
    r"""Decided from the pattern: an alternative that is one character class, repeated or
    not (``vllm|s``, ``\w+``, ``.``, ``[^x]*``), finds a match in nearly every command line."""
    return _one_class(_SRE.parse(pattern))


def kill_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` may not select processes to signal, or None."""
    try:
        compiled = re.compile(pattern)
        compile_bounded(pattern)
    except (re.error, ValueError) as exc:
        return f"invalid regex {pattern!r}: {exc}"
    if compiled.search("") is not None:
        return (
            f"regex {pattern!r} matches the empty string, so it matches every process on the host "
            "(a stray '|' or a '*' or '?' on everything): anchor it to what you mean"
        )
    if matches_every_process(pattern):
        return (
            f"regex {pattern!r} matches every process on the host (one of its alternatives is a single "
            "character or character class): make it name what you mean"
        )
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


@functools.cache
def ecma_end_anchors(pattern: str) -> str:
    """``pattern`` with each ``$`` outside a character class as ``\\Z``. JSON Schema patterns
    are ECMA-262 expressions, where ``$`` matches only at the end of the string; Python's
    ``$`` also matches before a final newline, so ``"gpu01\\n"`` passed ``^[a-z0-9]+$``
    and reached a unit file, a state file's name or an HAProxy admin command."""
    out, escaped, in_class = [], False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            out.append("\\Z")
            continue
        out.append(char)
    return "".join(out)


def _ecma_pattern(
    validator: Any, pattern: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if isinstance(instance, str) and not re.search(ecma_end_anchors(pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


# Draft 2020-12 with ECMA-262's ``$``: every schema rigger checks input with (module
# arguments here, the playbook schema in engine/playbook/loader.py)
SchemaValidator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _ecma_pattern})
_Base = jsonschema.validators.extend(SchemaValidator, {"killPattern": _kill_pattern})


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
