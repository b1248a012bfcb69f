"""Run a command on the host (no shell unless asked); changed unless a guard says otherwise.

Free form (`command: touch /x`) is split like a shell would, without running one.
`creates` / `removes` make it idempotent: the command is skipped when the file
named by `creates` exists, or the one named by `removes` does not. A command cannot
predict its own effect, so check mode skips it.
"""

from __future__ import annotations

import datetime
import posixpath
import shlex
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Effect, Fills, Removes, Result, TaskContext, TaskFailed, Unchanged

# path arguments Ansible expands on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("chdir", "creates", "removes")
FREE_FORM = "cmd"
CHECK_MODE = "skip"

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "cmd": {
            "type": "string",
            "description": "The command line, split into arguments without a shell (unless shell is true).",
        },
        "argv": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "description": "The command as a list of arguments; nothing is split or quoted.",
        },
        "shell": {
            "type": "boolean",
            "default": False,
            "description": "Run cmd through /bin/sh -c (pipes, globs, redirections).",
        },
        "chdir": {"type": "string", "description": "Directory to run the command in."},
        "creates": {"type": "string", "description": "Skip the command when this path exists."},
        "removes": {"type": "string", "description": "Skip the command when this path does not exist."},
        "stdin": {"type": "string", "description": "Text sent to the command's standard input."},
    },
    "oneOf": [{"required": ["cmd"]}, {"required": ["argv"]}],
}


def _argv(args: Mapping[str, Any]) -> list[str]:
    if "argv" in args:
        return [str(a) for a in args["argv"]]
    if args["shell"]:
        return ["/bin/sh", "-c", args["cmd"]]
    try:
        return shlex.split(args["cmd"])
    except ValueError as exc:
        raise TaskFailed(f"cannot split command {args['cmd']!r}: {exc}") from None


def _guard_reason(ctx: TaskContext, args: Mapping[str, Any]) -> str | None:
    paths = _guards(args)
    if not paths:
        return None
    info = ctx.conn.run_probe("path_info", {"paths": paths})["paths"]
    creates, removes = args.get("creates"), args.get("removes")
    if creates and info[creates]["exists"]:
        return f"{creates} exists"
    if removes and not info[removes]["exists"]:
        return f"{removes} does not exist"
    return None


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    reason = _guard_reason(ctx, args)
    if reason:
        return Unchanged(f"skipped the command: {reason}", {"rc": 0, "stdout": "", "stderr": ""})
    argv = _argv(args)
    guards = {f"path:{p}": "absent" if p == args.get("creates") else "exists" for p in _guards(args)}
    # What a command leaves is known only after it ran: `creates` says where to look.
    effects: list[Effect] = (
        [Fills(posixpath.dirname(args["creates"]), f"the output of {argv[0]}")] if args.get("creates") else []
    )
    effects += [Removes(args["removes"])] if args.get("removes") else []
    return Change(f"run {shlex.join(argv)}", payload={"argv": argv}, fingerprint=guards, effects=tuple(effects))


def _guards(args: Mapping[str, Any]) -> list[str]:
    return [p for p in (args.get("creates"), args.get("removes")) if p]


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    stdin = args.get("stdin")
    started = datetime.datetime.now()
    result = ctx.conn.run(
        change.payload["argv"],
        cwd=args.get("chdir"),
        stdin=stdin.encode() if stdin is not None else None,
        check=False,
    )
    ended = datetime.datetime.now()
    data = {
        # Ansible's shape: local date-times as str() gives them, the delta as a timedelta's str()
        "start": str(started),
        "end": str(ended),
        "delta": str(ended - started),
        "rc": result.rc,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "stdout_lines": result.stdout.splitlines(),
        "cmd": change.payload["argv"],
        "duration_s": round(result.duration_s, 4),
    }
    if result.rc != 0:
        raise TaskFailed(f"non-zero return code {result.rc}\n{result.tail()}".rstrip(), data)
    return Result(changed=True, data=data)
