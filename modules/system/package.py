"""Install or remove packages with the host's package manager: `apt` (the one rigger has).

Ansible's `package`: `use: auto` takes the manager from the gathered `ansible_pkg_mgr`
fact, or, without facts, from the host's /etc/os-release as Ansible's setup decides it;
every other argument goes to that manager's module unchanged (no `state`: present, as
apt's default is what Ansible's action plugin ends up with), so plan, check mode and
diffs are apt's. A host whose manager is dnf, yum, zypper, apk or pacman is refused by
name before anything runs (rigger has no module for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged
from modules.system import apt

SUPPORTED = {"apt": apt}
# /etc/os-release ID or ID_LIKE -> the manager Ansible's setup reports for that family
FAMILY_MANAGERS = {
    "debian": "apt",
    "ubuntu": "apt",
    "rhel": "dnf",
    "fedora": "dnf",
    "centos": "dnf",
    "suse": "zypper",
    "opensuse": "zypper",
    "alpine": "apk",
    "arch": "pacman",
}
STATES = {"installed": "present", "removed": "absent"}

APT_PROPERTIES: dict[str, Any] = dict(apt.SCHEMA["properties"])  # type: ignore[call-overload]
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        **{key: value for key, value in APT_PROPERTIES.items() if key not in ("state", "pkg")},
        "state": {
            "type": "string",
            "enum": ["present", "absent", "latest", "installed", "removed"],
            "default": "present",
            "description": "present/installed, absent/removed, or latest (as the manager reads them). "
            "Ansible's documentation calls it required but its action plugin passes the task on to "
            "the manager's module, whose default is present: so is this one's.",
        },
        "use": {
            "type": "string",
            "default": "auto",
            "description": "The manager's module to use; auto: the host's (ansible_pkg_mgr).",
        },
    },
}


def _os_release_manager(ctx: TaskContext) -> str:
    text = (ctx.conn.read_file("/etc/os-release") or b"").decode("utf-8", errors="replace")
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    names = [fields.get("ID", ""), *fields.get("ID_LIKE", "").split()]
    for name in (n.strip().strip('"') for n in names):
        if name in FAMILY_MANAGERS:
            return FAMILY_MANAGERS[name]
    return "unknown"


def manager(ctx: TaskContext, args: Mapping[str, Any]) -> str:
    if args["use"] != "auto":
        return str(args["use"])
    gathered = ctx.vars.get("ansible_facts")
    if isinstance(gathered, Mapping) and gathered.get("pkg_mgr"):
        return str(gathered["pkg_mgr"])
    return _os_release_manager(ctx)


def _backend(ctx: TaskContext, args: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    name = manager(ctx, args)
    if name not in SUPPORTED:
        raise TaskFailed(
            f"the host's package manager is '{name}': rigger's package module has only "
            f"{', '.join(sorted(SUPPORTED))}; nothing was changed"
        )
    module = SUPPORTED[name]
    backend_args = {key: value for key, value in args.items() if key != "use"}
    backend_args["state"] = STATES.get(args["state"], args["state"])
    defaults = {key: prop["default"] for key, prop in module.SCHEMA["properties"].items() if "default" in prop}
    return module, {**defaults, **backend_args}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    module, backend_args = _backend(ctx, args)
    outcome: Change | Unchanged = module.plan(ctx, backend_args)
    return outcome


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    module, backend_args = _backend(ctx, args)
    result: Result = module.apply(ctx, backend_args, change)
    return result
