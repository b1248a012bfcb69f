"""Fail unless every condition in `that` is true; touches nothing, so it runs in check mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine import templating
from engine.errors import TemplateError
from engine.filters import to_bool
from engine.module_api import Change, Result, TaskContext, TaskFailed

CHECK_MODE = "run"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["that"],
    "properties": {
        "that": {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": ["string", "boolean"]}}],
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


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change:
    return Change(summary="evaluate assertions")


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    conditions = args["that"] if isinstance(args["that"], list) else [args["that"]]
    for condition in conditions:
        try:
            holds = to_bool(templating.evaluate(condition, ctx.vars))
        except TemplateError as exc:
            raise TaskFailed(f"cannot evaluate {condition!r}: {exc}") from None
        if not holds:
            message = args.get("msg") or args.get("fail_msg") or f"Assertion failed: {condition}"
            raise TaskFailed(message, {"assertion": condition, "evaluated_to": False})
    return Result(changed=False, msg=args.get("success_msg", "All assertions passed"))
