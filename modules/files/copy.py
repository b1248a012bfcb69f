"""Copy a file or a directory tree from the controller, or literal content, to the host.

Ansible's `copy`: `src` is looked up in the role's `files/`, then the playbook's `files/`,
then the playbook directory; with `remote_src` it is a path on the host (read through the
connection, so best for configuration-sized files). A directory `src` is copied recursively (with a trailing `/`
only its contents). Each file is written atomically; `validate` checks the new content
before it replaces the old; `backup` keeps the old version.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed, Unchanged, controller_files
from modules.files.filework import (
    CONTENT_PROPERTIES,
    Content,
    apply_content,
    controller_file,
    host_facts,
    parse_mode,
    plan_content,
    run_ops,
)

# path arguments Ansible expands on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("dest",)
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["dest"],
    "properties": {
        "dest": {
            "type": "string",
            "description": "Absolute path on the host; a directory (or a path "
            "ending in /) receives the source under its own name.",
        },
        "src": {
            "type": "string",
            "description": "File or directory on the controller (on the host with remote_src); with a "
            "trailing / only a directory's contents are copied.",
        },
        "remote_src": {
            "type": "boolean",
            "default": False,
            "description": "src is on the host: copied there, a replaced file taking the source's mode "
            "(a directory's files always), as Ansible's copystat does.",
        },
        "content": {"type": "string", "description": "Literal content to write instead of src."},
        "force": {
            "type": "boolean",
            "default": True,
            "description": "Replace a file whose content differs; false: only create missing files.",
        },
        "directory_mode": {
            "type": ["string", "integer"],
            "description": "Mode of directories created when copying a tree.",
        },
        **CONTENT_PROPERTIES,
    },
    "oneOf": [{"required": ["src"]}, {"required": ["content"]}],
}


def _tree(source: Path, dest: str) -> tuple[list[str], list[Content]]:
    root = dest.rstrip("/") if str(source).endswith("/") else f"{dest.rstrip('/')}/{source.name}"
    dirs = [root]
    files = []
    for path in sorted(source.rglob("*")):
        target = f"{root}/{path.relative_to(source).as_posix()}"
        if path.is_dir():
            dirs.append(target)
        else:
            files.append(Content(target, path.read_bytes()))
    return dirs, files


def _into(ctx: TaskContext, dest: str, name: str, follow: bool) -> str:
    """dest, or dest/name when dest is a directory (or ends with /); ``follow``: a link to
    a directory (judged on the host) is that directory."""
    facts = host_facts(ctx, [dest], follow_links=follow)["paths"][dest]
    if facts.get("via_link") and facts.get("type") == "directory":
        return f"{facts['path'].rstrip('/')}/{name}"
    return f"{dest.rstrip('/')}/{name}" if dest.endswith("/") or facts.get("type") == "directory" else dest


def _host_source(ctx: TaskContext, src: str, dest: str, follow: bool) -> tuple[list[str], list[Content]]:
    """remote_src: a file or a directory tree on the host, read through the connection."""
    answer = host_facts(ctx, [src], follow=True, listing=src.rstrip("/") or "/")
    facts = answer["paths"][src]
    if not facts.get("exists"):
        raise TaskFailed(f"Source {src} not found")
    if facts["type"] != "directory":  # the guarded read refuses a FIFO, a device, a socket
        data = ctx.conn.read_file(src) or b""
        return [], [Content(_into(ctx, dest, posixpath.basename(src), follow), data, int(facts["mode"], 8))]
    base = src.rstrip("/")
    root = dest.rstrip("/") if src.endswith("/") else f"{dest.rstrip('/')}/{posixpath.basename(base)}"
    listing = answer["listing"]
    dirs = [root] + [f"{root}/{rel}" for rel in listing["dirs"]]
    files = [
        Content(f"{root}/{rel}", ctx.conn.read_file(f"{base}/{rel}") or b"", mode, for_new=True)
        for rel, mode in listing["files"]
    ]
    return dirs, files


def _wanted(ctx: TaskContext, args: Mapping[str, Any]) -> tuple[list[str], list[Content]]:
    dest = args["dest"]
    if "content" in args:
        if dest.endswith("/"):
            raise TaskFailed(f"dest {dest} is a directory; content needs a file path")
        return [], [Content(dest, str(args["content"]).encode("utf-8"))]
    if args["remote_src"]:
        return _host_source(ctx, args["src"], dest, args["follow"])
    source = controller_file(ctx, args["src"], "files")
    if controller_files.is_dir(source):
        return _tree(Path(f"{source}/") if args["src"].endswith("/") else source, dest)
    data = controller_files.read_bytes(source)  # on a local connection: as earlier planned tasks leave it
    return [], [Content(_into(ctx, dest, source.name, args["follow"]), data)]


def _dir_ops(ctx: TaskContext, dirs: list[str], args: Mapping[str, Any]) -> list[dict[str, Any]]:
    if not dirs:
        return []
    mode = parse_mode(args.get("directory_mode"))
    facts = host_facts(ctx, dirs)["paths"]
    missing = [d for d in dirs if not facts[d].get("exists")]
    return [op for d in missing for op in ({"op": "mkdir", "path": d}, {"op": "attrs", "path": d, "mode": mode})]


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    dirs, files = _wanted(ctx, args)
    dir_ops = _dir_ops(ctx, dirs, args)
    changes = []
    for content in files:
        change = plan_content(ctx, args, content, "copy to")
        if change is not None and (args["force"] or change.payload["previous"] is None):
            changes.append(change)
    if not changes and not dir_ops:
        return Unchanged(f"{args['dest']} is up to date", {"dest": args["dest"]})
    diffs = tuple(d for c in changes for d in c.diffs)
    summary = (
        changes[0].summary if len(changes) == 1 and not dir_ops else f"copy {len(changes)} files to {args['dest']}"
    )
    prints = {k: v for c in changes for k, v in c.fingerprint.items()}
    effects = tuple(e for c in changes for e in c.effects)
    return Change(summary, diffs, {"dir_ops": dir_ops, "files": changes}, prints, effects)


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    run_ops(ctx, change.payload["dir_ops"])
    written = [apply_content(ctx, args, file_change) for file_change in change.payload["files"]]
    data: dict[str, Any] = {"dest": args["dest"], "files": [w["dest"] for w in written]}
    if len(written) == 1:
        data.update(written[0])
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=data)
