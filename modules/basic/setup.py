"""Gather Ansible's setup facts as a task (``ansible.builtin.setup``), e.g. again after a
change, on a delegated host, or only some of them (``filter``)."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any

from engine.module_api import TaskContext, Unchanged, prefixed

_NAMES = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "filter": {
            **_NAMES,
            "default": [],
            "description": "Only the facts whose name (ansible_...) matches one of these shell-style patterns.",
        },
        "gather_subset": {
            **_NAMES,
            "default": ["all"],
            "description": "Ansible's subsets: all, min, !all, network, ...",
        },
        "gather_timeout": {"type": "integer", "description": "Accepted; gathering reads files and takes milliseconds."},
    },
}


def _patterns(value: str | list[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else value
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    found = ctx.conn.run_probe("setup_facts", {"gather_subset": args["gather_subset"]})
    patterns = _patterns(args["filter"])
    if patterns:  # matched against the ansible_ names; gather_subset and module_setup never match
        keep = [name.startswith("ansible_") and any(fnmatchcase(name, p) for p in patterns) for name in prefixed(found)]
        found = {name: value for (name, value), kept in zip(found.items(), keep, strict=True) if kept}
    return Unchanged(
        msg=f"{len(found)} facts", data={"ansible_facts": prefixed(found)}, set_vars={"ansible_facts": found}
    )
