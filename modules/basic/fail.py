"""Fail the task with a message (Ansible's `fail`); use it with `when` to stop a host early."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, Unchanged

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


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    raise TaskFailed(str(args["msg"]))
