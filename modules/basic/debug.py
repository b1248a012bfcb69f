"""Print a message or a variable's value in the task's output."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, TemplateError, Unchanged, evaluate

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "msg": {"description": "The message to show (any value; rendered)."},
        "var": {"type": "string", "description": "A variable name or expression whose value to show."},
    },
    "not": {"required": ["msg", "var"]},
}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    if "var" in args:
        try:
            value = evaluate(args["var"], ctx.vars)
        except TemplateError as exc:
            raise TaskFailed(str(exc)) from None
        text = value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
        return Unchanged(msg=f"{args['var']} = {text}", data={args["var"]: value})
    message = args.get("msg", "Hello world!")
    text = message if isinstance(message, str) else json.dumps(message, indent=2, default=str)
    return Unchanged(msg=text, data={"msg": message})
