"""Run a command line on the host as it is, through a shell, with nothing else (Ansible's `raw`).

Used where a host has no Python yet (bootstrap plays: `raw: apt-get install -y python3`).
No creates/removes, no chdir: the line goes to `executable` (/bin/sh) as written and the
task is always changed; a non-zero exit fails it. Skipped in check mode, as in Ansible.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext
from modules.basic import command

FREE_FORM = "cmd"
CHECK_MODE = "skip"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cmd"],
    "properties": {
        "cmd": {"type": "string", "description": "The command line, passed to the shell unchanged."},
        "executable": {"type": "string", "default": "/bin/sh", "description": "The shell that runs cmd."},
    },
}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change:
    return Change(summary=f"run {args['cmd']}", payload={"argv": [args["executable"], "-c", args["cmd"]]})


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    return command.apply(ctx, {}, change)
