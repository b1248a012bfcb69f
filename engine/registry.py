"""Finds task modules in the rooms under ``modules/`` and checks each one's SCHEMA once.

A room is a package ``modules/<room>/`` whose ``__init__.py`` lists its task modules in
``MODULES`` (the names users write in playbooks, unique across rooms) and may contribute
host facts through ``FACTS`` (an ``engine.facts.FactSource``). Listing the rooms imports
only those small ``__init__`` files; a module's own code is imported when a task uses it.
"""

from __future__ import annotations

import difflib
import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema

from engine import argvalues
from engine.errors import RiggerError

ROOMS_DIR = Path(__file__).resolve().parent.parent / "modules"
# A read-only module (no apply) runs the same in check mode. "measure": a module that
# changes nothing but measures only for real (a benchmark): skipped in check mode, and
# never counted or listed as a change in a saved plan.
CHECK_MODES = ("plan", "skip", "measure")
CHANGES_NOTHING = ("read-only", "measure")  # check modes of modules that never change a host


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
    check_mode: str  # plan | skip | measure | read-only
    free_form: str | None
    details: str = ""  # the docstring after its summary sentence
    # arguments that are paths on the host: ``~`` and ``$VAR`` expanded there before plan(),
    # as Ansible's ``type='path'`` arguments are (the module's HOST_PATHS)
    host_paths: tuple[str, ...] = ()
    # A serving module's quarantine_skips(args): true when this call serves, so a quarantined
    # host skips it (engine/run/quarantine.py); None: the module never skips for quarantine.
    quarantine_skips: Callable[[Mapping[str, Any]], bool] | None = None

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


def room_of(name: str) -> str:
    """The room (``modules/<room>/``) that holds module ``name``."""
    return _room_of()[name]


@cache
def module_names() -> tuple[str, ...]:
    return tuple(sorted(_room_of()))


# Our modules that Ansible also has under the same name, and the structural actions the
# loader and runner handle. ``ansible.builtin.debug`` and ``ansible.legacy.debug`` are
# ``debug``; nothing else is renamed (one place for every alias).
ANSIBLE_BUILTINS = frozenset(
    {
        "apt",
        "apt_key",
        "apt_repository",
        "assert",
        "blockinfile",
        "command",
        "copy",
        "debug",
        "dnf",
        "fail",
        "file",
        "find",
        "get_url",
        "git",
        "group",
        "group_by",
        "hostname",
        "include_vars",
        "lineinfile",
        "package",
        "package_facts",
        "pause",
        "pip",
        "ping",
        "raw",
        "script",
        "service",
        "set_fact",
        "setup",
        "shell",
        "slurp",
        "stat",
        "systemd",
        "systemd_service",
        "template",
        "unarchive",
        "uri",
        "user",
        "wait_for",
        "yum",
        "meta",
        "include_tasks",
        "import_tasks",
        "include_role",
        "import_role",
    }
)
ANSIBLE_COLLECTIONS = ("ansible.builtin.", "ansible.legacy.")
# Modules of other collections that rigger implements, as each collection names them.
# ansible-core's builtin routing redirects their short names (``sysctl``) to these, so a
# playbook may write either; every other name of a collection stays refused by name.
COLLECTION_MODULES = {
    "ansible.posix.authorized_key": "authorized_key",
    "ansible.posix.mount": "mount",
    "ansible.posix.sysctl": "sysctl",
    "community.general.modprobe": "modprobe",
    "community.general.timezone": "timezone",
}


def canonical(name: str) -> str:
    """The name rigger knows a task action by: FQCN prefixes of Ansible's builtins dropped,
    and the collection modules rigger implements named by their short name."""
    if name in COLLECTION_MODULES:
        return COLLECTION_MODULES[name]
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


# A sentence ends at . ? or ! before a capital, a backquote or a parenthesis: not "e.g. again".
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+(?=[A-Z`(])")


def split_doc(doc: str) -> tuple[str, str]:
    """A module docstring as its summary (the first sentence, whole, however many lines it
    spans) and the rest (the first paragraph's other sentences, then the other paragraphs)."""
    first, _, others = doc.strip().partition("\n\n")
    paragraph = " ".join(line.strip() for line in first.splitlines())
    parts = _SENTENCE_END.split(paragraph, maxsplit=1)
    summary, more = parts[0], parts[1] if len(parts) > 1 else ""
    return summary, "\n\n".join(part for part in (more, others.strip()) if part)


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
    summary, details = split_doc(doc)
    return ModuleSpec(
        name=name,
        summary=summary,
        details=details,
        doc=doc,
        schema=schema,
        validator=argvalues.validator(schema),
        plan=module.plan,
        apply=apply,
        check_mode=check_mode,
        free_form=getattr(module, "FREE_FORM", None),
        host_paths=tuple(getattr(module, "HOST_PATHS", ())),
        quarantine_skips=getattr(module, "quarantine_skips", None),
    )
