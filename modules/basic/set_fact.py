"""Set host variables from rendered values; later tasks see them, never re-rendered."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, Unchanged

SCHEMA = {
    "type": "object",
    "description": "Each key becomes a host variable with the (rendered) value.",
    "minProperties": 1,
    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    return Unchanged(data={"facts": dict(args)}, set_vars=dict(args))
