"""Start, stop, restart, reload and enable services (ansible.builtin.service), on systemd hosts.

On a host that runs systemd, ansible-core 2.19's `service` hands the task to
`systemd_service`: so does rigger, with the same return values (`name`, `state`,
`enabled`, `status`) and check mode. Other init systems (sysvinit, OpenRC, upstart) are
refused by name. `pattern`, `arguments` (`args`), `sleep` and `runlevel` are not
implemented: a task that sets one fails, naming it, before anything on the host is read; a
`use` other than `auto` or `systemd` is refused too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged
from modules.system import units

_UNSUPPORTED = ("pattern", "arguments", "args", "sleep", "runlevel")
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "anyOf": [{"required": ["state"]}, {"required": ["enabled"]}],
    "properties": {
        "name": {"type": "string", "description": "The service (`vllm`, `nvidia-persistenced.service`)."},
        "state": {
            "type": "string",
            "enum": units.STATES,
            "description": "started/stopped: only when needed; restarted/reloaded: always.",
        },
        "enabled": {"type": "boolean", "description": "Whether the service starts at boot."},
        "use": {
            "type": "string",
            "default": "auto",
            "description": "The service manager: auto or systemd (the only one rigger drives).",
        },
        "pattern": {"type": "string", "description": "Not implemented (a task that sets it fails, naming it)."},
        "arguments": {"type": "string", "description": "Not implemented (a task that sets it fails, naming it)."},
        "args": {"type": "string", "description": "Another name for arguments (Ansible's alias); not implemented."},
        "sleep": {"type": "integer", "description": "Not implemented (a task that sets it fails, naming it)."},
        "runlevel": {"type": "string", "description": "Not implemented (a task that sets it fails, naming it)."},
    },
}


def _as_systemd(args: Mapping[str, Any]) -> dict[str, Any]:
    for key in _UNSUPPORTED:
        if args.get(key) not in (None, ""):
            raise TaskFailed(
                f"{key}: rigger's service does not implement {key!r}; leave it out (systemd tracks the unit)"
            )
    if args["use"] not in ("auto", "systemd"):
        raise TaskFailed(f"use: {args['use']!r} is not a service manager rigger drives (auto or systemd)")
    return {"name": args["name"], "state": args.get("state"), "enabled": args.get("enabled")}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    return units.plan_units(ctx, _as_systemd(args), "service")


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    return units.apply_units(ctx, _as_systemd(args), change)
