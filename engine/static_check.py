"""Catch undefined variables before any host is touched.

Every template in a play is parsed and each name it reads must be defined somewhere:
inventory, play vars, vars_files, extra vars, facts, magic variables, a ``register``
or ``set_fact`` anywhere in the playbook, or a loop variable. Names guarded by
``is defined`` / ``is undefined`` / ``default(...)`` are allowed to be missing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jinja2
from jinja2 import meta, nodes

from engine import registry, templating
from engine.errors import ValidationError
from engine.magicvars import MAGIC_VARIABLES
from engine.playbook import Inventory, Play, Playbook, Task, all_tasks, play_tasks
from engine.yamlload import load_file


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def _base_name(node: nodes.Node | None) -> str | None:
    """``x`` of ``x``, ``x.y``, ``x['y'].z``: an undefined x makes the whole chain undefined."""
    while isinstance(node, (nodes.Getattr, nodes.Getitem)):
        node = node.node
    return node.name if isinstance(node, nodes.Name) else None


def _guarded(tree: nodes.Template) -> set[str]:
    names: set[str | None] = set()
    for test in tree.find_all(nodes.Test):
        if test.name in ("defined", "undefined"):
            names.add(_base_name(test.node))
    for flt in tree.find_all(nodes.Filter):
        if flt.name in ("default", "d"):
            names.add(_base_name(flt.node))
    return {name for name in names if name}


def names_read(source: str, condition: bool = False) -> set[str]:
    text = "{{ " + source + " }}" if condition and not templating.is_template(source) else source
    if not templating.is_template(text):
        return set()
    try:
        tree = templating.environment().parse(text)
        names = set(meta.find_undeclared_variables(tree))
    except jinja2.TemplateError:
        return set()  # syntax and unknown filters are reported by the loader / at run time
    return names - _guarded(tree)


def defined_names(book: Playbook, play: Play, inventory: Inventory, extra: Mapping[str, Any]) -> set[str]:
    names = set(MAGIC_VARIABLES) | set(extra) | set(play.vars) | set(templating.environment().globals)
    for host in inventory.hosts.values():
        names |= set(host.vars)
    for path in play.vars_files:
        data = load_file(path)
        if isinstance(data, Mapping):
            names |= set(data)
    for task in all_tasks(book):
        if task.register:
            names.add(task.register)
        if task.module == "set_fact" and isinstance(task.args, Mapping):
            names |= set(task.args)
    return names


def _reads(task: Task) -> Iterator[tuple[str, bool]]:
    for text in _strings(task.args):
        yield text, False
    for text in _strings(dict(task.options.environment)):
        yield text, False
    for text in _strings(task.loop):
        yield text, False
    for conditions in (task.options.when, task.changed_when, task.failed_when, task.until):
        for condition in conditions:
            if isinstance(condition, str):
                yield condition, True


def check(book: Playbook, inventory: Inventory, extra: Mapping[str, Any]) -> None:
    for play in book.plays:
        known = defined_names(book, play, inventory, extra)
        for name, value in play.vars.items():
            _check_text_set(_strings(value), known, play.location.file, play.location.line, f"play variable '{name}'")
        for task in play_tasks(play):
            local = known | {task.loop_var} if task.loop is not None else known
            if task.module in ("debug",) and isinstance(task.args, Mapping) and "var" in task.args:
                _check_names(names_read(str(task.args["var"]), True), local, task)
            for text, condition in _reads(task):
                _check_names(names_read(text, condition), local, task)


def _check_text_set(texts: Iterator[str], known: set[str], file: str, line: int, what: str) -> None:
    for text in texts:
        missing = sorted(names_read(text) - known)
        if missing:
            hint = registry.suggest(missing[0], sorted(known))
            raise ValidationError(f"{what} uses undefined variable '{missing[0]}'{hint}", file=file, line=line)


def _check_names(read: set[str], known: set[str], task: Task) -> None:
    missing = sorted(read - known)
    if missing:
        hint = registry.suggest(missing[0], sorted(known))
        raise ValidationError(
            f"task '{task.display_name}' uses undefined variable '{missing[0]}'{hint}",
            file=task.location.file,
            line=task.location.line,
        )
