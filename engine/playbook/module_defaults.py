"""Ansible's ``module_defaults``: arguments a play, block or task gives every task of a module.

ansible-core 2.19's rules (``Base.module_defaults``, ``get_action_args_with_defaults``):
- the keyword takes a mapping of module name -> arguments, or a list of such mappings; each
  level's value is kept (play, blocks, task, outermost first) and merged when the task runs,
  an inner level's entry for a module *replacing* an outer one's (no deep merge);
- the task's own arguments win over every default; the values are templates, rendered with
  the task's variables (``omit`` drops an argument, as anywhere);
- a name and its FQCN are one module (``apt``, ``ansible.builtin.apt``); ``systemd`` is
  ``systemd_service`` (ansible-core redirects one to the other);
- ``package`` and ``service`` hand the task to the host's manager module, with that module's
  defaults under the task's arguments: rigger's package runs ``apt``, its service
  ``systemd_service``;
- ``group/NAME`` applies to a collection's action group: none of the modules rigger runs is in
  one, so those entries change nothing here either, as in Ansible; a module Ansible knows and
  rigger lacks (``yum``) is kept and never used; a name Ansible cannot resolve is refused, as
  ansible-core refuses it ("Could not resolve action ... in module_defaults").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine import registry
from engine.playbook import ansible_modules

_SAME_MODULE = {"systemd": "systemd_service"}
_HANDS_TO = {"package": ("apt",), "service": ("systemd_service",)}


def layer(value: Any) -> tuple[Mapping[str, Any], ...] | str:
    """One level's ``module_defaults`` as mappings, or why it cannot be one."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, Mapping):
            return "module_defaults takes a mapping of module name to arguments, or a list of them"
        for name, args in item.items():
            if not isinstance(name, str):
                return f"module_defaults: {name!r} is not a module name"
            unknown = _unresolvable(name)
            if unknown:
                return unknown
            if args is not None and not isinstance(args, Mapping):
                return f"module_defaults: `{name}` takes a mapping of arguments, not {type(args).__name__}"
    return tuple(items)


def _unresolvable(name: str) -> str | None:
    """Why ansible-core would refuse this name, or None. A FQCN of another collection is not
    judged: whether Ansible resolves it depends on the collections installed there."""
    short = registry.canonical(name)
    known = set(registry.module_names()) | ansible_modules.CORE_MODULES | set(ansible_modules.ROUTED_MODULES)
    if name.startswith("group/") or short in known or short.count(".") >= 2:
        return None
    hint = registry.suggest(short, sorted(registry.module_names()))
    return f"module_defaults: could not resolve action '{name}' (no module of that name){hint}"


def _module_of(name: str) -> str:
    short = registry.canonical(name)
    return _SAME_MODULE.get(short, short)


def _merged(layers: tuple[Mapping[str, Any], ...]) -> dict[str, Mapping[str, Any]]:
    merged: dict[str, Mapping[str, Any]] = {}
    for item in layers:
        for name, args in item.items():
            merged[_module_of(name)] = args or {}
    return merged


def for_module(module: str, layers: tuple[Mapping[str, Any], ...]) -> dict[str, Any]:
    """The default arguments a task of ``module`` gets (unrendered), lowest priority first."""
    if not layers:
        return {}
    merged = _merged(layers)
    own = _module_of(module)
    defaults: dict[str, Any] = {}
    for backend in _HANDS_TO.get(own, ()):
        defaults.update(merged.get(backend, {}))
    defaults.update(merged.get(own, {}))
    return defaults


def with_defaults(module: str, layers: tuple[Mapping[str, Any], ...], args: Any) -> Any:
    """The task's arguments over its module's defaults (a free-form or templated argument
    string stays as it is: it is not a mapping to merge into)."""
    defaults = for_module(module, layers)
    if not defaults or not isinstance(args, Mapping):
        return args
    return {**defaults, **args}
