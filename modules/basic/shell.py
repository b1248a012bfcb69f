"""Run a command line through the host's shell (pipes, redirections, globs, variables).

Ansible's `shell`: `creates`/`removes` make it idempotent, `chdir` sets the directory,
`executable` picks the shell. A line that uses no shell feature gets a warning: `command`
runs it without a shell, so without quoting surprises. Skipped in check mode like `command`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, Unchanged
from modules.basic import command

# path arguments Ansible expands on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("chdir", "creates", "removes")
FREE_FORM = "cmd"
CHECK_MODE = "skip"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["cmd"],
    "properties": {
        "cmd": {"type": "string", "description": "The command line, run by the shell."},
        "executable": {"type": "string", "default": "/bin/sh", "description": "The shell that runs cmd."},
        "chdir": {"type": "string", "description": "Directory to run the command in."},
        "creates": {"type": "string", "description": "Skip the command when this path exists."},
        "removes": {"type": "string", "description": "Skip the command when this path does not exist."},
        "stdin": {"type": "string", "description": "Text sent to the command's standard input."},
    },
}

_SHELL_FEATURES = re.compile(r"[|&;<>()$`\\\"'*?\[\]#~=%{}\n]")


def _as_command(args: Mapping[str, Any]) -> dict[str, Any]:
    passed = {k: v for k, v in args.items() if k in ("chdir", "creates", "removes", "stdin")}
    return {**passed, "argv": [args["executable"], "-c", args["cmd"]]}


def _warnings(args: Mapping[str, Any]) -> tuple[str, ...]:
    if _SHELL_FEATURES.search(args["cmd"]):
        return ()
    return (f"`{args['cmd']}` uses no shell feature: the command module runs it without a shell",)


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    planned = command.plan(ctx, _as_command(args))
    if isinstance(planned, Unchanged):
        return planned
    return Change(summary=f"run {args['cmd']}", payload={**planned.payload, "warnings": _warnings(args)})


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    result = command.apply(ctx, _as_command(args), change)
    return Result(changed=True, data=result.data, warnings=change.payload["warnings"])
