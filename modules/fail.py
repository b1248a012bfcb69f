"""Fail the task with a message (Ansible's `fail`); use it with `when` to stop a host early."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "msg": {
            "default": "Failed as requested from task",
            "description": "The message the task fails with (a string, or any value shown as text).",
        },
    },
}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change:
    raise TaskFailed(str(args["msg"]))


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    raise TaskFailed(str(args["msg"]))
