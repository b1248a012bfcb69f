"""Finds task modules in the rooms under ``modules/`` and checks each one's SCHEMA once.

A room is a package ``modules/<room>/`` whose ``__init__.py`` lists its task modules in
``MODULES`` (the names users write in playbooks, unique across rooms) and may contribute
host facts through ``FACTS`` (an ``engine.facts.FactSource``). Listing the rooms imports
only those small ``__init__`` files; a module's own code is imported when a task uses it.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema

from engine.errors import RiggerError

ROOMS_DIR = Path(__file__).resolve().parent.parent / "modules"
CHECK_MODES = ("plan", "skip")  # a read-only module (no apply) runs the same in check mode


class ModuleDefinitionError(RiggerError):
    """A module file breaks the module contract (a bug in rigger, not user input)."""


@dataclass(frozen=True)
class ModuleSpec:
    name: str
    summary: str
    doc: str
    schema: Mapping[str, Any]
    validator: Any
    plan: Callable[..., Any]
    apply: Callable[..., Any] | None  # None: read-only, plan() does the whole job
    check_mode: str  # plan | skip | read-only
    free_form: str | None

    def coerced(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Strings (``-e port=8000``, a rendered template) become the declared scalar type."""
        result = dict(args)
        for key, prop in self.schema.get("properties", {}).items():
            if isinstance(result.get(key), str) and isinstance(prop.get("type"), str):
                result[key] = coerce_scalar(result[key], prop["type"])
        return result

    def with_defaults(self, args: Mapping[str, Any]) -> dict[str, Any]:
        filled = dict(args)
        for key, prop in self.schema.get("properties", {}).items():
            if key not in filled and "default" in prop:
                filled[key] = prop["default"]
        return filled


_BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def coerce_scalar(text: str, kind: str) -> Any:
    """The value as ``kind`` when the text says so unambiguously; else the text unchanged."""
    stripped = text.strip()
    try:
        if kind == "integer" and stripped.lstrip("+-").isdigit():
            return int(stripped)
        if kind == "number":
            return float(stripped) if any(c in stripped for c in ".eE") else int(stripped)
    except ValueError:
        return text
    if kind == "boolean" and stripped.lower() in _BOOLEANS:
        return _BOOLEANS[stripped.lower()]
    return text


@cache
def rooms() -> tuple[ModuleType, ...]:
    """Every room's package (its ``__init__`` only), in name order."""
    inits = sorted(ROOMS_DIR.glob("*/__init__.py"))
    return tuple(importlib.import_module(f"modules.{init.parent.name}") for init in inits)


@cache
def _room_of() -> dict[str, str]:
    """Module name -> the room that holds it."""
    found: dict[str, str] = {}
    for room in rooms():
        room_name = room.__name__.rpartition(".")[2]
        for name in room.MODULES:
            if name in found:
                raise ModuleDefinitionError(f"module {name} is listed by rooms {found[name]} and {room_name}")
            found[name] = room_name
    return found


@cache
def module_names() -> tuple[str, ...]:
    return tuple(sorted(_room_of()))


# Our modules that Ansible also has under the same name, and the structural actions the
# loader and runner handle. ``ansible.builtin.debug`` and ``ansible.legacy.debug`` are
# ``debug``; nothing else is renamed (one place for every alias).
ANSIBLE_BUILTINS = frozenset(
    {
        "apt",
        "assert",
        "command",
        "copy",
        "debug",
        "fail",
        "file",
        "group",
        "lineinfile",
        "pip",
        "set_fact",
        "shell",
        "stat",
        "template",
        "user",
        "wait_for",
        "meta",
        "include_tasks",
        "import_tasks",
        "include_role",
        "import_role",
    }
)
ANSIBLE_COLLECTIONS = ("ansible.builtin.", "ansible.legacy.")


def canonical(name: str) -> str:
    """The name rigger knows a task action by: FQCN prefixes of Ansible's builtins dropped."""
    for prefix in ANSIBLE_COLLECTIONS:
        if name.startswith(prefix) and name[len(prefix) :] in ANSIBLE_BUILTINS:
            return name[len(prefix) :]
    return name


def suggest(name: str, candidates: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_key_hint(error: jsonschema.ValidationError) -> str:
    """For an additionalProperties error: "did you mean" for the first unknown key close to a known one."""
    known = sorted((error.schema.get("properties") or {}) if isinstance(error.schema, Mapping) else {})
    if error.validator != "additionalProperties" or not isinstance(error.instance, Mapping):
        return ""
    for key in error.instance:
        hint = suggest(str(key), known) if key not in known else ""
        if hint:
            return hint
    return ""


@cache
def get(name: str) -> ModuleSpec:
    if name not in module_names():
        raise KeyError(name)
    module = importlib.import_module(f"modules.{_room_of()[name]}.{name}")
    return _spec_of(name, module)


def _spec_of(name: str, module: Any) -> ModuleSpec:
    missing = [attr for attr in ("SCHEMA", "plan") if not hasattr(module, attr)]
    if missing or not module.__doc__:
        raise ModuleDefinitionError(f"module {name} lacks {', '.join(missing) or 'a docstring'}")
    schema = module.SCHEMA
    jsonschema.Draft202012Validator.check_schema(schema)
    undocumented = [k for k, v in schema.get("properties", {}).items() if "description" not in v]
    if undocumented:
        raise ModuleDefinitionError(f"module {name}: undocumented arguments {undocumented}")
    check_mode = getattr(module, "CHECK_MODE", "plan")
    if check_mode not in CHECK_MODES:
        raise ModuleDefinitionError(f"module {name}: CHECK_MODE must be one of {CHECK_MODES}")
    apply = getattr(module, "apply", None)
    if apply is None:
        check_mode = "read-only"
    doc = module.__doc__.strip()
    return ModuleSpec(
        name=name,
        summary=doc.splitlines()[0],
        doc=doc,
        schema=schema,
        validator=jsonschema.Draft202012Validator(schema),
        plan=module.plan,
        apply=apply,
        check_mode=check_mode,
        free_form=getattr(module, "FREE_FORM", None),
    )
