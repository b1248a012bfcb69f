"""Fail unless every condition in `that` is true; touches nothing, so it runs in check mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, TemplateError, Unchanged, evaluate, to_bool

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["that"],
    "properties": {
        "that": {
            "anyOf": [{"type": ["string", "boolean"]}, {"type": "array", "items": {"type": ["string", "boolean"]}}],
            "description": "A condition or a list of conditions (Jinja expressions without braces).",
        },
        "msg": {"type": "string", "description": "Message when a condition is false."},
        "fail_msg": {"type": "string", "description": "Alias of msg."},
        "success_msg": {
            "type": "string",
            "default": "All assertions passed",
            "description": "Message when all conditions hold.",
        },
    },
}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    conditions = args["that"] if isinstance(args["that"], list) else [args["that"]]
    for condition in conditions:
        try:
            holds = to_bool(evaluate(condition, ctx.vars))
        except TemplateError as exc:
            raise TaskFailed(f"cannot evaluate {condition!r}: {exc}") from None
        if not holds:
            message = args.get("msg") or args.get("fail_msg") or f"Assertion failed: {condition}"
            raise TaskFailed(message, {"assertion": condition, "evaluated_to": False})
    return Unchanged(msg=args["success_msg"])
