"""Make sure a path does not exist (file, symlink or directory tree); reports bytes freed.

The path is judged on the host by what it is, not how it is spelled: its parent is
resolved there and the object compared by device and inode with `/`, the top-level and
system directories, every home directory and every mount point, which are never removed,
nor is a directory holding one of them or another filesystem. A relative path, or one
ending in `.` or `..`, is refused. A symlink is removed itself, never its target,
whatever slashes follow it. The object removed is the one judged: removal works relative
to directories opened without following symlinks, and stops if anything was swapped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, ProbeError, Removes, Result, TaskContext, TaskFailed, Unchanged

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


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    path = args["path"]
    try:
        judged = ctx.conn.run_probe("path_judge", {"path": path})
    except ProbeError as exc:  # e.g. a parent directory that may not be read
        raise TaskFailed(f"cannot judge {path}: {str(exc).removeprefix('probe path_judge failed: ')}") from None
    if judged["refusal"]:
        raise TaskFailed(judged["refusal"])
    if not judged["exists"]:
        return Unchanged(f"{path} is absent", {"path": path, "bytes_freed": 0})
    size = int(judged["size"])
    return Change(
        summary=f"remove {judged['type']} {judged['resolved']} ({size} bytes)",
        payload={"size": size, "type": judged["type"], "dev": judged["dev"], "ino": judged["ino"]},
        fingerprint={
            f"path:{judged['resolved']}": f"{judged['type']} dev {judged['dev']} ino {judged['ino']} size {size}"
        },
        effects=(Removes(path), Removes(judged["resolved"])),
    )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    path = args["path"]
    identity = {"dev": change.payload["dev"], "ino": change.payload["ino"]}
    try:
        done = ctx.conn.run_probe("remove_path", {"path": path, **identity})
    except ProbeError as exc:
        raise TaskFailed(str(exc).removeprefix("probe remove_path failed: ")) from None
    size = 0 if done["gone"] else change.payload["size"]
    return Result(
        changed=not done["gone"],
        msg=f"removed {done['removed']} ({size} bytes freed)" if done["removed"] else f"{path} was already gone",
        data={"path": path, "bytes_freed": size, "type": change.payload["type"]},
    )
