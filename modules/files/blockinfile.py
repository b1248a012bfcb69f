"""Keep a block of lines between two marker lines in a text file (or remove it).

Ansible's `blockinfile`: the block sits between `# BEGIN ANSIBLE MANAGED BLOCK` and
`# END ANSIBLE MANAGED BLOCK` (`marker`, with `{mark}` replaced by `marker_begin` /
`marker_end`). When both markers are there the lines between them are replaced; else the
block is inserted after the last line matching `insertafter` (default EOF) or before the
last match of `insertbefore` (or BOF). An empty `block` or `state: absent` removes the
markers and what is between them. The file is written like lineinfile writes it (atomic,
attributes, backup, validate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed, TextRegex, Unchanged
from modules.files.filework import CONTENT_PROPERTIES, Content, apply_content, plan_content, target_path

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["path"]}, {"required": ["dest"]}, {"required": ["destfile"]}, {"required": ["name"]}],
    "not": {"required": ["insertafter", "insertbefore"]},
    "properties": {
        "path": {"type": "string", "description": "The file on the host."},
        "dest": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "destfile": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "name": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "block": {"type": "string", "default": "", "description": "The lines to have between the markers."},
        "content": {"type": "string", "description": "Another name for block (Ansible's alias)."},
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "Whether the block should be there.",
        },
        "marker": {
            "type": "string",
            "default": "# {mark} ANSIBLE MANAGED BLOCK",
            "description": "The marker line template; {mark} becomes marker_begin or marker_end.",
        },
        "marker_begin": {"type": "string", "default": "BEGIN", "description": "{mark} of the first marker."},
        "marker_end": {"type": "string", "default": "END", "description": "{mark} of the last marker."},
        "insertafter": {"type": "string", "description": "`EOF` or a regexp: insert after its last match."},
        "insertbefore": {"type": "string", "description": "`BOF` or a regexp: insert before its last match."},
        "create": {
            "type": "boolean",
            "default": False,
            "description": "Create the file when it does not exist (else the task fails).",
        },
        "prepend_newline": {
            "type": "boolean",
            "default": False,
            "description": "Put a blank line before the block unless one is there (or it starts the file).",
        },
        "append_newline": {
            "type": "boolean",
            "default": False,
            "description": "Put a blank line after the block unless one is there (or it ends the file).",
        },
        **CONTENT_PROPERTIES,
    },
}


def _insert_pattern(args: Mapping[str, Any]) -> TextRegex | None:
    """insertafter/insertbefore, searched with engine/userregex.py's time bound."""
    for key, edge in (("insertafter", "EOF"), ("insertbefore", "BOF")):
        if args.get(key) not in (None, edge):
            return TextRegex(args[key], key)
    return None


def _insert_at(lines: list[str], original: str, args: Mapping[str, Any]) -> int:
    """Where a block goes when its markers are not both in the file (Ansible's rules)."""
    pattern = _insert_pattern(args)
    after = args.get("insertafter") is not None or args.get("insertbefore") is None
    if pattern is None:
        return len(lines) if after else 0
    at = None
    if pattern.multiline:
        match = pattern.search(original)
        if match:
            at = original.count("\n", 0, match.end() if after else match.start())
            return at
        return len(lines)
    for i, line in enumerate(lines):
        if pattern.search(line):
            at = i
    if at is None:
        return len(lines)
    return at + 1 if after else at


def edit(original: str, args: Mapping[str, Any]) -> str:
    """The file's text with the block put in place (or taken out)."""
    lines = original.splitlines(keepends=True)
    begin = args["marker"].replace("{mark}", args["marker_begin"]) + "\n"
    end = args["marker"].replace("{mark}", args["marker_end"]) + "\n"
    block = args.get("content", args["block"])
    present = args["state"] == "present"
    body = block if block.endswith("\n") or not block else block + "\n"
    new = [begin, *body.splitlines(keepends=True), end] if present and block else []
    first = next((i for i in reversed(range(len(lines))) if lines[i] == begin), None)
    last = next((i for i in reversed(range(len(lines))) if lines[i] == end), None)
    if first is None or last is None:
        at = _insert_at(lines, original, args)
    else:
        at = min(first, last)
        del lines[at : max(first, last) + 1]
    if at > 0 and not lines[at - 1].endswith("\n"):
        lines[at - 1] += "\n"
    if args["prepend_newline"] and present and at != 0 and lines[at - 1] != "\n":
        lines.insert(at, "\n")
        at += 1
    lines[at:at] = new
    after = at + len(new)
    if args["append_newline"] and present and after < len(lines) and lines[after] != "\n":
        lines.insert(after, "\n")
    return "".join(lines)


def _verb(created: bool, same: bool, inserted: bool) -> str:
    if created:
        return "create with a block"
    if same:
        return "set attributes of"
    return "insert a block in" if inserted else "remove a block from"


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    path = target_path({**args, "path": args.get("path") or args.get("destfile")}, "path")
    current = ctx.conn.read_file(path)
    if current is None and args["state"] == "absent":
        return Unchanged(f"File {path} not present", {"path": path})
    if current is None and not args["create"]:
        raise TaskFailed(f"Path {path} does not exist ! (set create: true to create it)")
    original = (current or b"").decode("utf-8", errors="surrogateescape")
    wanted = edit(original, args)
    verb = _verb(current is None, wanted == original, args["state"] == "present" and bool(wanted.strip()))
    change = plan_content(ctx, args, Content(path, wanted.encode("utf-8", errors="surrogateescape")), verb)
    if change is None:
        return Unchanged(f"{path}: block already as wanted", {"path": path})
    return change


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=apply_content(ctx, args, change))
