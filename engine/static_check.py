"""Catch undefined variables before any host is touched.

Every template in a play is parsed and each name it reads must be defined somewhere:
inventory, play vars, vars_files, extra vars, facts (rigger's ``facts``; Ansible's
``ansible_facts`` and any ``ansible_*`` name, which may be a host's fact such as
``ansible_eth0``), magic variables, a ``register``
or ``set_fact`` anywhere in the playbook, or a loop variable. Names guarded by
``is defined`` / ``is undefined`` / ``default(...)`` are allowed to be missing.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

import jinja2
from jinja2 import meta, nodes

from engine import facts, registry, templating
from engine.errors import ValidationError
from engine.magicvars import MAGIC_VARIABLES
from engine.playbook import Inventory, Play, Playbook, Task, all_tasks, play_tasks, walk
from engine.yamlload import load_file

# names rigger defines for tasks in roles and in rescue sections
STRUCTURE_MAGIC = frozenset({"role_path", "role_name", "ansible_failed_task", "ansible_failed_result"})


def _task_names(task: Task) -> set[str]:
    """Names a task's own context defines: its role's variables, vars:, parameters."""
    options = task.options
    names = set(options.vars) | set(options.params) | set(options.pinned)
    if options.role is not None:
        names |= set(options.role.defaults) | set(options.role.vars) | set(options.role.params)
    if task.loop is not None:
        names.add(task.loop_var)
        if task.index_var:
            names.add(task.index_var)
    return names


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


def names_read(source: str, condition: bool = False, guarded_too: bool = False) -> set[str]:
    text = "{{ " + source + " }}" if condition and not templating.is_template(source) else source
    if not templating.is_template(text):
        return set()
    try:
        tree = templating.environment().parse(text)
        names = set(meta.find_undeclared_variables(tree))
    except jinja2.TemplateError:
        return set()  # syntax and unknown filters are reported by the loader / at run time
    return names if guarded_too else names - _guarded(tree)


def defined_names(book: Playbook, play: Play, inventory: Inventory, extra: Mapping[str, Any]) -> set[str]:
    names = set(MAGIC_VARIABLES) | STRUCTURE_MAGIC | set(extra) | set(play.vars) | set(templating.environment().globals)
    names |= set(play.role_defaults) | set(play.role_vars)
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
        for task, enclosing in walk(play.tasks + play.handlers):
            local = known | enclosing | _task_names(task)
            if task.module in ("debug",) and isinstance(task.args, Mapping) and "var" in task.args:
                _check_names(names_read(str(task.args["var"]), True), local, task)
            for text, condition in _reads(task):
                _check_names(names_read(text, condition), local, task)


def _check_text_set(texts: Iterator[str], known: set[str], file: str, line: int, what: str) -> None:
    for text in texts:
        missing = sorted(name for name in names_read(text) - known if not facts.may_be_fact(name))
        if missing:
            hint = registry.suggest(missing[0], sorted(known))
            raise ValidationError(f"{what} uses undefined variable '{missing[0]}'{hint}", file=file, line=line)


def _check_names(read: set[str], known: set[str], task: Task) -> None:
    missing = sorted(name for name in read - known if not facts.may_be_fact(name))
    if missing:
        hint = registry.suggest(missing[0], sorted(known))
        raise ValidationError(
            f"task '{task.display_name}' uses undefined variable '{missing[0]}'{hint}",
            file=task.location.file,
            line=task.location.line,
        )


# -e names the engine itself reads (connection, become, run lock): never "unused".
ENGINE_PREFIXES = ("ansible_", "rigger_")


def names_used(book: Playbook, inventory: Inventory) -> set[str]:
    """Every variable name the playbook or inventory reads or defines."""
    used: set[str] = set()
    for play in book.plays:
        used |= defined_names(book, play, inventory, {}) - set(templating.environment().globals)
        for value in play.vars.values():
            used |= {name for text in _strings(value) for name in names_read(text, guarded_too=True)}
        for task in play_tasks(play):
            used |= {name for text, condition in _reads(task) for name in names_read(text, condition, True)}
            if task.module == "debug" and isinstance(task.args, Mapping) and "var" in task.args:
                used |= names_read(str(task.args["var"]), True, True)
    for host in inventory.hosts.values():
        used |= {name for text in _strings(dict(host.vars)) for name in names_read(text, guarded_too=True)}
    return used


def unused_extra_vars(book: Playbook, inventory: Inventory, extra: Mapping[str, Any]) -> list[str]:
    """A warning for each -e name nothing uses: a typo there is otherwise silently ignored."""
    used = names_used(book, inventory)
    warnings = []
    for name in extra:
        if name in used or name.startswith(ENGINE_PREFIXES):
            continue
        hint = _closest(name, sorted(used - set(MAGIC_VARIABLES)))
        warnings.append(f"-e {name}: nothing in the playbook or inventory uses this variable{hint}")
    return warnings


def _closest(name: str, candidates: list[str]) -> str:
    """Like registry.suggest, but a candidate ending in the same word comes first: in
    snake_case that word names the kind of thing (demo_state -> serve_state, not
    demo_state_dir)."""
    close = difflib.get_close_matches(name, candidates, n=5, cutoff=0.6)
    same_kind = [c for c in close if c.rpartition("_")[2] == name.rpartition("_")[2]]
    best = (same_kind or close)[:1]
    return f" (did you mean '{best[0]}'?)" if best else ""
