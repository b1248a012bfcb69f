"""Set the host's name: the running one (kernel) and the persistent one (/etc/hostname).

Ansible's `hostname`. Plan reads the running name (`uname -n`: /proc files cannot be read
as plain files by the connection) and /etc/hostname, and changes nothing when both already
hold `name`. Apply writes /etc/hostname atomically and sets the
running name with `hostname NAME` (Ansible's file strategy: Debian, generic); with
`use: systemd` it asks `hostnamectl` for both instead. The result carries Ansible's
`ansible_facts` (hostname, nodename, fqdn, domain). A name that is no valid host name (RFC
1123: letters, digits, '-' and '.', no label starting with '-') is refused: it is never
passed to a command where it could read as an option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, Result, TaskContext, TaskFailed, Unchanged, content_digest

PERSISTENT = "/etc/hostname"
_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "description": "The host name (short or fully qualified)."},
        "use": {
            "type": "string",
            "enum": ["auto", "debian", "generic", "systemd"],
            "default": "auto",
            "description": "How to set it: systemd uses hostnamectl; auto, debian and generic write "
            "/etc/hostname and run `hostname`.",
        },
    },
}


def _valid(name: str) -> str:
    if len(name) > 253 or not all(_LABEL.match(label) for label in name.rstrip(".").split(".")):
        raise TaskFailed(f"{name!r} is not a valid host name (letters, digits, '-' and '.'; no label starts with '-')")
    return name


def _read(ctx: TaskContext, path: str) -> str | None:
    data = ctx.conn.read_file(path)
    return None if data is None else data.decode("utf-8", errors="replace").strip()


def _facts(name: str) -> dict[str, Any]:
    short, _, domain = name.partition(".")
    return {"ansible_hostname": short, "ansible_nodename": name, "ansible_fqdn": name, "ansible_domain": domain}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    name = _valid(args["name"])
    running, persistent = ctx.conn.run(["uname", "-n"], read_only=True).stdout.strip(), _read(ctx, PERSISTENT)
    if running == name and persistent == name:
        return Unchanged(f"host name is already {name}", {"name": name, "ansible_facts": _facts(name)})
    diffs = []
    if running != name:
        diffs.append(Diff("host name (running)", f"{running or ''}\n", f"{name}\n"))
    if persistent != name:
        diffs.append(Diff(PERSISTENT, f"{persistent}\n" if persistent is not None else "", f"{name}\n"))
    fingerprint = {f"file:{PERSISTENT}": content_digest(ctx.conn.read_file(PERSISTENT)), "hostname": running or ""}
    return Change(f"set the host name to {name}", tuple(diffs), {"name": name}, fingerprint)


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    name = _valid(change.payload["name"])
    if args["use"] == "systemd":
        ctx.conn.run(["hostnamectl", "--static", "set-hostname", name])
        ctx.conn.run(["hostnamectl", "--transient", "set-hostname", name])
    else:
        ctx.conn.write_file(PERSISTENT, f"{name}\n".encode(), mode=0o644)
        ctx.conn.run(["hostname", name])
    data = {"name": name, "ansible_facts": _facts(name)}
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=data)
