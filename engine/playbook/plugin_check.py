"""Filters, tests and lookups a playbook calls that rigger does not have, found before any
host is touched (``rigger validate`` and every run).

The loader already compiles templates (``{{ }}`` in arguments, conditions), which names an
unknown filter or test. What compiling cannot see: the bare expressions of ``assert:
that:`` (module arguments, not templates) and lookups (``lookup('name', ...)`` is a call
resolved when it runs). Each is refused with the task's file:line and the name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jinja2
from jinja2 import nodes

from engine import templating
from engine.errors import ValidationError
from engine.model import Location, Playbook, Task, play_tasks
from engine.templating.lookups import LOOKUPS, lookup_name

LOOKUP_CALLS = frozenset({"lookup", "query", "q"})
# engine/templating/__init__.py adds the template lookup beside LOOKUPS
KNOWN_LOOKUPS = frozenset(LOOKUPS) | {"template"}


def strings(value: Any) -> Iterator[str]:
    """Every string inside a value (mappings and lists walked)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings(item)


def _expressions(task: Task) -> Iterator[str]:
    """Every template the task holds, and assert's bare expressions wrapped as templates."""
    yield from strings(task.args)
    yield from strings(task.loop)
    yield from strings(task.options.environment)  # layers: mappings or whole templates
    yield from strings(dict(task.options.vars))
    for conditions in (task.options.when, task.changed_when, task.failed_when, task.until):
        yield from (_as_template(c) for c in conditions if isinstance(c, str))
    if task.module == "assert" and isinstance(task.args, Mapping):
        that = task.args.get("that")
        asserted: list[Any] = that if isinstance(that, list) else [that]  # a string, or `that: true`
        yield from (_as_template(c) for c in asserted if isinstance(c, str))


def _as_template(condition: str) -> str:
    return condition if templating.is_template(condition) else "{{ " + condition + " }}"


def missing(text: str) -> str | None:
    """What the template calls that rigger lacks ("filter 'x'"), or None."""
    if not templating.is_template(text):
        return None
    env = templating.environment()
    try:
        tree = env.parse(text)
    except jinja2.TemplateSyntaxError:
        return None  # the loader reports syntax with its own message
    for flt in tree.find_all(nodes.Filter):
        if flt.name not in env.filters:
            return f"filter '{flt.name}'"
    for test in tree.find_all(nodes.Test):
        if test.name not in env.tests:
            return f"test '{test.name}'"
    for call in tree.find_all(nodes.Call):
        callee, args = call.node, call.args
        if isinstance(callee, nodes.Name) and callee.name in LOOKUP_CALLS and args and isinstance(args[0], nodes.Const):
            name = str(args[0].value)
            if lookup_name(name) not in KNOWN_LOOKUPS:
                return f"lookup '{name}'"
    return None


def _refuse(what: str, where: str, location: Location) -> ValidationError:
    return ValidationError(f"{where}: {what} is not available in rigger", file=location.file, line=location.line)


def check(book: Playbook) -> None:
    for play in book.plays:
        for name, value in play.vars.items():
            for text in strings(value):
                found = missing(text)
                if found:
                    raise _refuse(found, f"play variable '{name}'", play.location)
        for task in play_tasks(play):
            for text in _expressions(task):
                found = missing(text)
                if found:
                    raise _refuse(found, f"task '{task.display_name}'", task.location)
