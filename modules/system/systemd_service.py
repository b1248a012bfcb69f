"""Start, stop, restart, reload, enable, disable and mask systemd units (ansible.builtin.systemd_service).

ansible-core 2.19's `systemd_service` (also written `systemd`): `state` started or stopped
acts only when the unit is not already so; restarted and reloaded always act (and start a
unit that is not running); `enabled` and `masked` act only when `systemctl is-enabled`
says otherwise; `daemon_reload` and `daemon_reexec` run first, and are not changes (in
check mode rigger lists them as what would run). `scope: user` talks to the user's manager
(`systemctl --user`; where XDG_RUNTIME_DIR is unset, at /run/user/UID as in Ansible),
`global` edits the enablement of every user (no `state`). Where `systemctl mask` fails on
a unit that exists, the task fails with systemctl's words (Ansible goes on silently).
Returns `name`, `state`, `enabled` (as asked) and `status`, the unit's `systemctl show`
properties read before acting. A unit that systemd does not know fails the task ("Could not
find the requested service"), in check mode too. The name is a value after `--`, never an
option; a glob in it is refused, as in Ansible. Hosts without a running systemd are refused
by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged
from modules.system import units

_BOOL = {"type": "boolean"}
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [
        {"required": [key]} for key in ("state", "enabled", "masked", "daemon_reload", "daemon-reload", "daemon_reexec")
    ],
    "properties": {
        "name": {"type": "string", "description": "The unit (`vllm.service`; `.service` when no suffix is given)."},
        "service": {"type": "string", "description": "Another name for name (Ansible's alias)."},
        "unit": {"type": "string", "description": "Another name for name (Ansible's alias)."},
        "state": {
            "type": "string",
            "enum": units.STATES,
            "description": "started/stopped: only when needed; restarted/reloaded: always.",
        },
        "enabled": {**_BOOL, "description": "Whether the unit starts at boot (`systemctl enable`/`disable`)."},
        "masked": {**_BOOL, "description": "Whether the unit is masked (`systemctl mask`/`unmask`)."},
        "daemon_reload": {
            **_BOOL,
            "default": False,
            "description": "Run `systemctl daemon-reload` first (after a unit file changed).",
        },
        "daemon-reload": {**_BOOL, "description": "Another name for daemon_reload (Ansible's alias)."},
        "daemon_reexec": {**_BOOL, "default": False, "description": "Run `systemctl daemon-reexec` first."},
        "scope": {
            "type": "string",
            "enum": ["system", "user", "global"],
            "default": "system",
            "description": "system: the system manager; user: the user's (`--user`); global: every user's.",
        },
        "no_block": {**_BOOL, "default": False, "description": "Queue the job and do not wait (`--no-block`)."},
        "force": {**_BOOL, "default": False, "description": "Override existing symlinks (`--force`)."},
    },
}


def normalized(args: Mapping[str, Any]) -> dict[str, Any]:
    """Ansible's aliases folded in, and its required_by rules checked."""
    merged = dict(args)
    merged["daemon_reload"] = bool(args["daemon_reload"] or args.get("daemon-reload"))
    merged.pop("daemon-reload", None)
    named = units.unit_name(args) is not None
    for key in ("state", "enabled", "masked"):
        if args.get(key) is not None and not named:
            raise TaskFailed(f"{key} needs name (the unit to act on)")
    if args["scope"] == "global" and args.get("state") is not None:
        raise TaskFailed("state: scope global edits every user's enablement; there is no global manager to start in")
    return merged


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    return units.plan_units(ctx, normalized(args), "systemd_service")


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    return units.apply_units(ctx, normalized(args), change)
