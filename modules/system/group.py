"""Create, change the gid of, or remove a local group with groupadd, groupmod and groupdel.

Ansible's `group` for Linux: a present group with another gid gets `groupmod -g`; `system`
only matters on creation (a gid from the system range). Removing a group that is a user's
primary group fails with groupdel's own message and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, Result, TaskContext, Unchanged
from modules.system.accounts import ACCOUNT_NAME, account_facts, lines, run_tool

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": ACCOUNT_NAME,
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "present: the group exists (with gid, when given); absent: it does not.",
        },
        "gid": {"type": "integer", "minimum": 0, "description": "The group's gid."},
        "system": {
            "type": "boolean",
            "default": False,
            "description": "Create a system group (gid from the system range); only on creation.",
        },
    },
}


def _current(ctx: TaskContext, name: str) -> Mapping[str, Any] | None:
    found: Mapping[str, Any] | None = account_facts(ctx, groups=[name])["groups"][name]
    # a digit-only name is looked up as a gid by the probe: only an exact name counts here
    return found if found is not None and found["name"] == name else None


def _commands(args: Mapping[str, Any], current: Mapping[str, Any] | None) -> list[list[str]]:
    name, gid = args["name"], args.get("gid")
    if args["state"] == "absent":
        return [["groupdel", name]] if current is not None else []
    if current is None:
        return [["groupadd", *(["-g", str(gid)] if gid is not None else []), *(["-r"] if args["system"] else []), name]]
    return [["groupmod", "-g", str(gid), name]] if gid is not None and gid != current["gid"] else []


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    name = args["name"]
    current = _current(ctx, name)
    commands = _commands(args, current)
    if not commands:
        return Unchanged(f"group {name} is {args['state']}", {"name": name, "state": args["state"]})
    before = lines({"gid": current["gid"]}) if current else "absent\n"
    after = "absent\n" if args["state"] == "absent" else lines({"gid": args.get("gid")}) or "present\n"
    verb = {"groupadd": "create", "groupmod": "change", "groupdel": "remove"}[commands[0][0]]
    fingerprint = {f"group:{name}": f"gid={current['gid']}" if current else "absent"}
    return Change(f"{verb} group {name}", (Diff(f"group {name}", before, after),), {}, fingerprint)


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    for argv in _commands(args, _current(ctx, args["name"])):
        run_tool(ctx, argv)
    current = _current(ctx, args["name"])
    data: dict[str, Any] = {"name": args["name"], "state": args["state"], "system": args["system"]}
    if current is not None:
        data["gid"] = current["gid"]
    return Result(True, change.summary, diffs=change.diffs, data=data)
