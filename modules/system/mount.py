"""Manage a mount point's line in fstab and, with `mounted` / `unmounted`, the mount itself.

ansible.posix's `mount` on Linux: the line whose mount point is `path` is the one managed
(other lines, comments and blank lines are kept as they are). `present` makes it `src
path fstype opts dump passno` (spaces in a field written as `\\040`, fields separated by
one space, a new line appended), `absent` removes it and unmounts the path (and removes
the mount point when it is an empty directory), `mounted` writes the line and mounts the
path when it is not mounted (creating the mount point; a mounted path whose line changed
is remounted with `mount -o remount`), `unmounted` unmounts it and leaves fstab alone.
Mounts use the real `mount`/`umount` with `-T FSTAB` when `fstab` is not /etc/fstab, as
ansible.posix does; whether a path is mounted is read from /proc/self/mountinfo. An
existing line whose fields differ is rewritten in Ansible's format; one that matches is
left as written. `boot: false` adds `noauto` to opts. The file is written atomically
through the file primitive (with a `backup` copy when asked). Check mode reads only.
States `remounted`, `absent_from_fstab` and `ephemeral` are refused by name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    ProbeError,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    command_line,
    content_digest,
    operand,
)

HOST_PATHS = ("path", "name", "fstab")
_FIELDS = ("src", "fstype", "opts", "dump", "passno")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["state"],
    "anyOf": [{"required": ["path"]}, {"required": ["name"]}],
    "properties": {
        "path": {"type": "string", "description": "The mount point (absolute)."},
        "name": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "src": {
            "type": "string",
            "description": "The device, UUID=..., LABEL=... or remote share; needed to write a line.",
        },
        "fstype": {
            "type": "string",
            "description": "The filesystem type (ext4, xfs, nfs, tmpfs); needed to write a line.",
        },
        "opts": {"type": "string", "default": "defaults", "description": "Mount options, comma separated."},
        "dump": {"type": ["string", "integer"], "default": "0", "description": "The dump field."},
        "passno": {"type": ["string", "integer"], "default": "0", "description": "The fsck pass number field."},
        "state": {
            "type": "string",
            "enum": ["present", "absent", "mounted", "unmounted"],
            "description": "present: the line only; absent: no line, not mounted; mounted: the line and "
            "mounted; unmounted: not mounted, fstab untouched.",
        },
        "fstab": {"type": "string", "default": "/etc/fstab", "description": "The fstab file to manage."},
        "boot": {"type": "boolean", "default": True, "description": "false: add noauto (not mounted at boot)."},
        "backup": {
            "type": "boolean",
            "default": False,
            "description": "Keep a timestamped copy of the fstab replaced.",
        },
    },
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")


def _unescape(value: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), value)


def _wanted(args: Mapping[str, Any]) -> dict[str, str]:
    opts = str(args["opts"])
    if not args["boot"] and "noauto" not in opts.split(","):
        opts += ",noauto"
    wanted = {"src": args.get("src"), "fstype": args.get("fstype"), "opts": opts}
    wanted.update(dump=str(args["dump"]), passno=str(args["passno"]))
    missing = [key for key in ("src", "fstype") if not wanted[key]]
    if missing:
        raise TaskFailed(f"state {args['state']} needs {' and '.join(missing)} to write the fstab line")
    return {key: _escape(str(value)) for key, value in wanted.items()}


def edited(text: str, path: str, wanted: dict[str, str] | None) -> str:
    """fstab with the line of ``path`` made ``wanted`` (None: removed), as ansible.posix edits it."""
    escaped = _escape(path)
    out, found = [], False
    for line in text.splitlines(keepends=True):
        fields = line.split()
        if not fields or fields[0].startswith("#") or len(fields) < 2 or fields[1] != escaped:
            out.append(line)
            continue
        if wanted is None or found:
            continue  # absent: every line of the path goes; present: the first one is kept
        found = True
        current = dict(zip(_FIELDS, [fields[0], *fields[2:]], strict=False))
        same = all(current.get(key, "0" if key in ("dump", "passno") else None) == wanted[key] for key in _FIELDS)
        out.append(line if same else _line(path, wanted))
    if wanted is not None and not found:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out.append(_line(path, wanted))
    return "".join(out)


def _line(path: str, wanted: dict[str, str]) -> str:
    return (
        " ".join([wanted["src"], _escape(path), wanted["fstype"], wanted["opts"], wanted["dump"], wanted["passno"]])
        + "\n"
    )


def _mounted(ctx: TaskContext, path: str) -> bool:
    data = ctx.conn.read_file("/proc/self/mountinfo") or b""
    points = {
        _unescape(line.split()[4]) for line in data.decode("utf-8", "replace").splitlines() if len(line.split()) > 4
    }
    return path.rstrip("/") in points or (path == "/" and "/" in points)


def _checked_path(args: Mapping[str, Any]) -> str:
    path = operand(args.get("path") or args.get("name"), "path")
    if not path.startswith("/"):
        raise TaskFailed(f"path: {path!r} is not an absolute path")
    return path.rstrip("/") or "/"


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    path, state, fstab = _checked_path(args), args["state"], args["fstab"]
    operand(fstab, "fstab")
    data = ctx.conn.read_file(fstab)
    text = "" if data is None else data.decode("utf-8", "replace")
    after = text
    if state in ("present", "mounted"):
        after = edited(text, path, _wanted(args))
    elif state == "absent":
        after = edited(text, path, None)
    mounted = _mounted(ctx, path) if state != "present" else False
    mount = state == "mounted" and not mounted
    remount = state == "mounted" and mounted and after != text
    # ansible.posix unmounts (and removes the mount point) for absent only when it removed a line
    unmount = mounted and (state == "unmounted" or (state == "absent" and after != text))
    diffs = [Diff(fstab, text, after)] if after != text else []
    if mount or unmount:
        diffs.append(Diff(f"{path} (mounted)", f"{'yes' if mounted else 'no'}\n", f"{'yes' if mount else 'no'}\n"))
    data_out = {"name": path, "src": args.get("src"), "fstype": args.get("fstype"), "opts": args["opts"]}
    data_out.update(dump=str(args["dump"]), passno=str(args["passno"]), fstab=fstab)
    if not diffs and not remount:
        return Unchanged(f"{path} is {state}", data_out)
    verbs = [
        v
        for v, on in (("write fstab", after != text), ("mount", mount), ("remount", remount), ("unmount", unmount))
        if on
    ]
    payload = {"content": after if after != text else None, "mount": mount, "remount": remount, "unmount": unmount}
    fingerprint = {f"file:{fstab}": content_digest(data), f"mounted:{path}": str(mounted)}
    return Change(f"{', '.join(verbs)} {path}", tuple(diffs), {**payload, "data": data_out}, fingerprint)


def _mount_cmd(args: Mapping[str, Any], *head: str) -> list[str]:
    fstab = args["fstab"]
    extra = ["-T", operand(fstab, "fstab")] if fstab != "/etc/fstab" else []
    return command_line(["mount", *head, *extra], [_checked_path(args)])


def _run(ctx: TaskContext, argv: list[str]) -> None:
    done = ctx.conn.run(argv, check=False)
    if done.rc != 0:
        raise TaskFailed(f"Error {' '.join(argv)} (rc {done.rc}): {done.tail()}".rstrip())


def _remove_mount_point(ctx: TaskContext, path: str) -> None:
    """ansible.posix's os.rmdir of the mount point: an empty directory is removed (by
    identity, through the one delete primitive), a non-empty one fails the task."""
    facts = ctx.conn.run_probe("file_facts", {"paths": [path]})["paths"][path]
    if not facts.get("exists"):
        return
    if facts["type"] != "directory":
        raise TaskFailed(f"Error rmdir {path}: it is a {facts['type']}, not a directory")
    if ctx.conn.run_probe("fileio", {"op": "list", "path": path})["entries"]:
        raise TaskFailed(f"Error rmdir {path}: [Errno 39] Directory not empty: '{path}'")
    try:
        ctx.conn.run_probe(
            "file_set", {"ops": [{"op": "remove", "path": path, "identity": [facts["dev"], facts["inode"]]}]}
        )
    except ProbeError as exc:
        raise TaskFailed(f"Error rmdir {path}: {exc}") from None


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    path, payload = _checked_path(args), change.payload
    if payload["content"] is not None:
        if args["backup"]:
            backup = f"{args['fstab']}.{time.strftime('%Y%m%dT%H%M%S')}.bak"
            ctx.conn.run_probe("fileio", {"op": "backup", "path": args["fstab"], "backup": backup})
        ctx.conn.write_file(args["fstab"], payload["content"].encode())
    if payload["unmount"]:
        _run(ctx, command_line(["umount"], [path]))
    if payload["mount"]:
        ctx.conn.run_probe("fileio", {"op": "mkdir", "path": path})
        _run(ctx, _mount_cmd(args))
    if payload["remount"]:
        _run(ctx, _mount_cmd(args, "-o", "remount"))
    if args["state"] == "absent" and payload["content"] is not None:
        _remove_mount_point(ctx, path)
    return Result(True, change.summary, diffs=change.diffs, data=dict(payload["data"]))
