"""Write a file's content (literal or from a Jinja template), atomically, with a backup.

The previous version is kept beside the file as `PATH.YYYYmmddTHHMMSS.bak` unless
`backup: false`; the backup keeps the file's owner and group and is never more readable
than it. A replaced file keeps its owner, group and mode (`mode` changes the mode); a new
file gets `mode` or the umask. The diff is a unified diff of the text.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    ProbeError,
    Result,
    TaskContext,
    TaskFailed,
    TemplateError,
    Unchanged,
    Writes,
    content_digest,
    controller_files,
    render,
)

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["path"],
    "properties": {
        "path": {"type": "string", "description": "Absolute path of the file on the host."},
        "content": {"type": "string", "description": "The exact content to write."},
        "template": {
            "type": "string",
            "description": "A Jinja template on the controller (relative to the playbook), "
            "rendered with the task's variables.",
        },
        "mode": {
            "type": "string",
            "pattern": "^0?[0-7]{3,4}$",
            "description": "File mode as an octal string, e.g. '0644'.",
        },
        "backup": {
            "type": "boolean",
            "default": True,
            "description": "Keep the previous version as PATH.TIMESTAMP.bak.",
        },
    },
    "oneOf": [{"required": ["content"]}, {"required": ["template"]}],
}


def _as_text(data: bytes | None) -> str:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<binary, {len(data)} bytes>\n"


def _template_source(ctx: TaskContext, name: str) -> Path:
    """Where Ansible's template module looks: the role's templates/ (inside a role), then
    templates/ beside the playbook, then the playbook's directory."""
    playbook_dir = Path(str(ctx.vars.get("playbook_dir", ".")))
    role_path = ctx.vars.get("role_path")
    candidates = [Path(str(role_path)) / "templates" / name] if role_path else []
    candidates += [playbook_dir / "templates" / name, playbook_dir / name]
    return next((c for c in candidates if controller_files.is_file(c)), candidates[-1])


def _wanted(ctx: TaskContext, args: Mapping[str, Any]) -> str:
    if "content" in args:
        return str(args["content"])
    source = _template_source(ctx, str(args["template"]))
    try:
        text = controller_files.read_text(source)  # on a local connection: as earlier planned tasks leave it
    except OSError as exc:
        raise TaskFailed(f"cannot read template {source}: {exc.strerror}") from None
    try:
        return str(render(text, ctx.vars))
    except TemplateError as exc:
        raise TaskFailed(f"template {source}: {exc}") from None


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    path = args["path"]
    info = ctx.conn.run_probe("path_info", {"paths": [path]})["paths"][path]
    if info.get("write_refusal"):  # planned too: a link on the way that another user made
        raise TaskFailed(str(info["write_refusal"]))
    if info.get("type") in ("dir", "other"):
        raise TaskFailed(f"{path} exists and is not a regular file ({info['type']})")
    link = info.get("type") == "symlink"
    # a symlink is replaced by the file, never read through: its target may be a secret
    current = ctx.conn.read_file(path) if info["exists"] and not link else None
    wanted = _wanted(ctx, args).encode("utf-8")
    mode = args.get("mode")
    wanted_mode = int(mode, 8) if mode else None
    mode_differs = wanted_mode is not None and info.get("mode") and int(info["mode"], 8) != wanted_mode
    if current == wanted and not mode_differs and not link:
        return Unchanged(f"{path} is up to date", {"path": path, "size": len(wanted)})
    diffs = []
    if link:
        diffs.append(Diff(f"{path} (symlink, replaced by a file)", f"symlink -> {info['target']}\n", _as_text(wanted)))
    elif current != wanted:
        diffs.append(Diff(path, _as_text(current), _as_text(wanted)))
    if mode_differs:
        diffs.append(Diff(f"{path} (mode)", f"{info['mode']}\n", f"0{wanted_mode:o}\n"))
    verb = "replace the symlink" if link else "create" if current is None else "update"
    return Change(
        summary=f"{verb} {path}",
        diffs=tuple(diffs),
        payload={"data": wanted, "previous": current, "mode": wanted_mode},
        fingerprint={
            f"file:{path}": content_digest(current) + (f" mode {info['mode']}" if current is not None else "")
        },
        effects=(Writes(path, wanted, wanted_mode),),
    )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    path = args["path"]
    previous = change.payload["previous"]
    backup = None
    try:
        if previous is not None and args["backup"]:
            backup = f"{path}.{time.strftime('%Y%m%dT%H%M%S')}.bak"
            ctx.conn.run_probe("fileio", {"op": "backup", "path": path, "backup": backup})
        ctx.conn.write_file(path, change.payload["data"], mode=change.payload["mode"])
    except (OSError, ProbeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TaskFailed(f"cannot write {path}: {reason}; the file is unchanged") from None
    return Result(
        changed=True,
        msg=change.summary,
        diffs=change.diffs,
        data={"path": path, "backup": backup, "size": len(change.payload["data"])},
    )
