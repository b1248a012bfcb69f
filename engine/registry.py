"""Finds task modules in ``modules/`` by file name and checks each one's SCHEMA once."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from engine.errors import RiggerError

MODULE_DIR = Path(__file__).resolve().parent.parent / "modules"
CHECK_MODES = ("plan", "skip", "run")


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
    apply: Callable[..., Any]
    check_mode: str
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
def module_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in MODULE_DIR.glob("*.py") if not p.stem.startswith("_")))


# Our modules that Ansible also has under the same name, and the structural actions the
# loader and runner handle. ``ansible.builtin.debug`` and ``ansible.legacy.debug`` are
# ``debug``; nothing else is renamed (one place for every alias).
ANSIBLE_BUILTINS = frozenset(
    {
        "assert",
        "command",
        "debug",
        "set_fact",
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


@cache
def get(name: str) -> ModuleSpec:
    if name not in module_names():
        raise KeyError(name)
    module = importlib.import_module(f"modules.{name}")
    return _spec_of(name, module)


def _spec_of(name: str, module: Any) -> ModuleSpec:
    missing = [attr for attr in ("SCHEMA", "plan", "apply") if not hasattr(module, attr)]
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
    doc = module.__doc__.strip()
    return ModuleSpec(
        name=name,
        summary=doc.splitlines()[0],
        doc=doc,
        schema=schema,
        validator=jsonschema.Draft202012Validator(schema),
        plan=module.plan,
        apply=module.apply,
        check_mode=check_mode,
        free_form=getattr(module, "FREE_FORM", None),
    )
