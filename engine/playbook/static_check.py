"""Catch undefined variables before any host is touched.

Every template in a play is parsed and each name it reads must be defined somewhere:
inventory, play vars, vars_files, extra vars, facts (rigger's ``facts``; Ansible's
``ansible_facts`` and any ``ansible_*`` name, which may be a host's fact such as
``ansible_eth0``), magic variables, a ``register``, ``set_fact`` or ``include_vars``
(the file's names when its path is written out; a templated path could define anything,
so a play that has one is not checked) anywhere in the playbook, or a loop variable. Names guarded by
``is defined`` / ``is undefined`` / ``default(...)`` are allowed to be missing.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta, nodes

from engine import facts, registry, templating
from engine.errors import ValidationError
from engine.model import Inventory, Play, Playbook, Task, all_tasks, play_tasks, walk
from engine.playbook import plugin_check
from engine.playbook.plugin_check import strings as _strings
from engine.templating.magicvars import MAGIC_VARIABLES
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


def _when_defined(task: Task) -> set[str]:
    """Names the task's ``when`` tests with ``is defined``: Ansible judges ``when`` before it
    renders anything else, so where such a name is missing the task is skipped and its
    arguments never read it (``name: "{{ pkgs }}"`` with ``when: pkgs is defined``)."""
    names: set[str] = set()
    for condition in task.options.when:
        if isinstance(condition, str):
            names |= _defined_tests(condition)
    return names


@lru_cache(maxsize=4096)
def _defined_tests(condition: str) -> frozenset[str]:
    text = condition if templating.is_template(condition) else "{{ " + condition + " }}"
    try:
        tree = templating.environment().parse(text)
    except jinja2.TemplateError:
        return frozenset()
    negated = {id(node.node) for node in tree.find_all(nodes.Not)}
    tests = (t for t in tree.find_all(nodes.Test) if t.name == "defined" and id(t) not in negated)
    return frozenset(name for name in (_base_name(t.node) for t in tests) if name)


def names_read(source: str, condition: bool = False, guarded_too: bool = False) -> set[str]:
    """The variables a template reads (a copy: callers may change it)."""
    return set(_names_read(source, condition, guarded_too))


@lru_cache(maxsize=8192)
def _names_read(source: str, condition: bool, guarded_too: bool) -> frozenset[str]:
    """Parsed once per text: a fleet's hosts share their group variables' templates, and
    parsing each host's copy was most of `validate`'s time on 729 hosts."""
    return frozenset(_parse_names(source, condition, guarded_too))


def _parse_names(source: str, condition: bool, guarded_too: bool) -> set[str]:
    text = "{{ " + source + " }}" if condition and not templating.is_template(source) else source
    if not templating.is_template(text):
        return set()
    try:
        tree = templating.environment().parse(text)
        names = set(meta.find_undeclared_variables(tree))
    except jinja2.TemplateError:
        return set()  # syntax and unknown filters are reported by the loader / at run time
    return names if guarded_too else names - _guarded(tree)


def _include_vars_names(book: Playbook, task: Task) -> set[str] | None:
    """The names an include_vars task defines, or None when they cannot be known statically."""
    args = task.args if isinstance(task.args, Mapping) else {}
    if args.get("name"):
        return None if templating.is_template(args["name"]) else {str(args["name"])}
    name = args.get("file")
    if not isinstance(name, str) or templating.is_template(name) or task.loop is not None:
        return None
    roots = [Path(name)] if Path(name).is_absolute() else []
    if task.options.role is not None:
        roots += [Path(task.options.role.path) / "vars" / name, Path(task.options.role.path) / name]
    playbook_dir = Path(book.path).parent
    roots += [playbook_dir / "vars" / name, playbook_dir / name]
    for path in roots:
        if path.is_file():
            data = load_file(str(path))
            return set(data) if isinstance(data, Mapping) else set()
    return None


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
        if task.module == "include_vars":
            names |= _include_vars_names(book, task) or set()
    return names


def _defines_unknown_names(book: Playbook) -> bool:
    """An include_vars whose names cannot be known before the run: undefined names in
    this playbook may be its, so they are left to the run to report."""
    return any(t.module == "include_vars" and _include_vars_names(book, t) is None for t in all_tasks(book))


def _reads(task: Task) -> Iterator[tuple[str, bool]]:
    for text in _strings(task.args):
        yield text, False
    for text in _strings(task.options.environment):
        yield text, False
    for text in _strings(task.loop):
        yield text, False
    for conditions in (task.options.when, task.changed_when, task.failed_when, task.until):
        for condition in conditions:
            if isinstance(condition, str):
                yield condition, True


def check(book: Playbook, inventory: Inventory, extra: Mapping[str, Any]) -> None:
    plugin_check.check(book)
    if _defines_unknown_names(book):
        return
    for play in book.plays:
        known = defined_names(book, play, inventory, extra)
        for name, value in play.vars.items():
            _check_text_set(_strings(value), known, play.location.file, play.location.line, f"play variable '{name}'")
        for task, enclosing in walk(play.tasks + play.handlers):
            local = known | enclosing | _task_names(task) | _when_defined(task)
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
    if not extra:
        return []  # nothing to judge: reading every host's variables would be wasted
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
