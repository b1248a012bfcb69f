"""Make sure a path does not exist (file, symlink or directory tree); reports bytes freed.

Refuses `/`, the home directory, top-level system directories and relative paths,
whatever the playbook says. A symlink is removed itself, never its target.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged

PROTECTED = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
        "/usr/bin",
        "/usr/lib",
        "/usr/local",
        "/usr/sbin",
        "/var/lib",
        "/var/log",
    }
)

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["path"],
    "properties": {
        "path": {
            "type": "string",
            "minLength": 1,
            "description": "Absolute path to remove (a file, a symlink, or a directory and everything under it).",
        },
    },
}


def _refusal(path: str, home: str) -> str | None:
    if not path.startswith("/"):
        return f"refusing a relative path: {path!r}"
    normal = posixpath.normpath(path)
    if normal in PROTECTED:
        return f"refusing to remove the system path {normal}"
    if normal == posixpath.normpath(home) or normal == posixpath.dirname(posixpath.normpath(home)):
        return f"refusing to remove the home directory {normal}"
    return None


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    path = args["path"]
    probe = ctx.conn.run_probe("path_info", {"paths": [path]})
    refusal = _refusal(path, probe["home"])
    if refusal:
        raise TaskFailed(refusal)
    info = probe["paths"][path]
    if info.get("type") == "dir":
        info = ctx.conn.run_probe("path_info", {"paths": [path], "recursive": True})["paths"][path]
    if info.get("exists") is None:
        raise TaskFailed(f"cannot inspect {path}: {info.get('error')}")
    if not info["exists"]:
        return Unchanged(f"{path} is absent", {"path": path, "bytes_freed": 0})
    size = int(info.get("size", 0))
    return Change(
        summary=f"remove {info['type']} {path} ({size} bytes)",
        payload={"size": size, "type": info["type"]},
        fingerprint={f"path:{path}": f"{info['type']} size {size} mtime {info.get('mtime')}"},
    )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    path = args["path"]
    ctx.conn.run_probe("remove_path", {"path": path})
    size = change.payload["size"]
    return Result(
        changed=True,
        msg=f"removed {path} ({size} bytes freed)",
        data={"path": path, "bytes_freed": size, "type": change.payload["type"]},
    )
