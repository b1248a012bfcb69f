"""Make sure one line is in a text file (or is not), replacing the line a regexp finds.

Ansible's `lineinfile`: with `state: present`, the last line matching `regexp` (the first
with `firstmatch`) becomes `line`; when nothing matches and `line` is not already there,
it is inserted after the last match of `insertafter` (default EOF) or before the match of
`insertbefore` (or BOF). `backrefs` fills `\\1` from the regexp and changes nothing when it
does not match. `state: absent` removes every line matching `regexp` (or equal to `line`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, TaskFailed, TextRegex, Unchanged
from modules.files.filework import CONTENT_PROPERTIES, Content, apply_content, plan_content, target_path

# path arguments Ansible expands on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("path", "dest", "name")
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["path"]}, {"required": ["dest"]}, {"required": ["name"]}],
    "properties": {
        "path": {"type": "string", "description": "The file on the host."},
        "dest": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "name": {"type": "string", "description": "Another name for path (Ansible's alias)."},
        "line": {"type": "string", "description": "The line to have in the file (state present)."},
        "regexp": {"type": "string", "description": "Python regular expression finding the line to replace or remove."},
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "Whether the line should be there.",
        },
        "insertafter": {"type": "string", "description": "`EOF` or a regexp: insert after its last match."},
        "insertbefore": {"type": "string", "description": "`BOF` or a regexp: insert before its last match."},
        "firstmatch": {
            "type": "boolean",
            "default": False,
            "description": "Use the first match of regexp/insertafter/insertbefore, not the last.",
        },
        "backrefs": {
            "type": "boolean",
            "default": False,
            "description": "Expand \\1.. in line from the regexp's match; no match changes nothing.",
        },
        "create": {
            "type": "boolean",
            "default": False,
            "description": "Create the file when it does not exist (else the task fails).",
        },
        **CONTENT_PROPERTIES,
    },
}


def _compile(args: Mapping[str, Any], key: str) -> TextRegex | None:
    """The user's regex, searched with engine/userregex.py's time bound (Python's ``re`` has
    none: a backtracking regexp over a long line would hang the task)."""
    if args.get(key) is None:
        return None
    return TextRegex(args[key], key)


def _matches(lines: list[str], pattern: TextRegex, first: bool) -> list[int]:
    found = [i for i, text in enumerate(lines) if pattern.search(text.rstrip("\r\n"))]
    return found[:1] if first else found[-1:]


def _insert_at(lines: list[str], args: Mapping[str, Any]) -> int:
    first = args["firstmatch"]
    if args.get("insertbefore") == "BOF":
        return 0
    if args.get("insertbefore"):
        pattern = _compile(args, "insertbefore")
        assert pattern is not None
        found = _matches(lines, pattern, first)
        return found[0] if found else len(lines)
    if args.get("insertafter") and args["insertafter"] != "EOF":
        pattern = _compile(args, "insertafter")
        assert pattern is not None
        found = _matches(lines, pattern, first)
        return found[0] + 1 if found else len(lines)
    return len(lines)


def _present(lines: list[str], args: Mapping[str, Any]) -> tuple[list[str], str]:
    line = args["line"]
    regexp = _compile(args, "regexp")
    if regexp is not None:
        found = _matches(lines, regexp, args["firstmatch"])
        if found:
            index = found[0]
            new = regexp.search(lines[index].rstrip("\r\n")).expand(line) if args["backrefs"] else line
            if lines[index].rstrip("\r\n") == new:
                return lines, ""
            return [*lines[:index], new + "\n", *lines[index + 1 :]], "replace a line in"
        if args["backrefs"]:
            return lines, ""
    if any(text.rstrip("\r\n") == line for text in lines):
        return lines, ""
    at = _insert_at(lines, args)
    before = list(lines)
    if at == len(before) and before and not before[-1].endswith("\n"):
        before[-1] += "\n"
    return [*before[:at], line + "\n", *before[at:]], "add a line to"


def _absent(lines: list[str], args: Mapping[str, Any]) -> tuple[list[str], str]:
    regexp = _compile(args, "regexp")
    if regexp is not None:
        kept = [text for text in lines if not regexp.search(text.rstrip("\r\n"))]
    else:
        kept = [text for text in lines if text.rstrip("\r\n") != args["line"]]
    removed = len(lines) - len(kept)
    return kept, f"remove {removed} line(s) from" if removed else ""


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    path = target_path(args, "path")
    state = args["state"]
    if state == "present" and "line" not in args:
        raise TaskFailed("state present needs line")
    if state == "absent" and "line" not in args and "regexp" not in args:
        raise TaskFailed("state absent needs regexp or line")
    current = ctx.conn.read_file(path)
    if current is None and state == "present" and not args["create"]:
        raise TaskFailed(f"{path} does not exist (set create: true to create it)")
    text = (current or b"").decode("utf-8", errors="surrogateescape")
    lines = text.splitlines(keepends=True)
    new_lines, what = _present(lines, args) if state == "present" else _absent(lines, args)
    if current is None and state == "absent":
        return Unchanged(f"{path} does not exist", {"path": path})
    wanted = "".join(new_lines).encode("utf-8", errors="surrogateescape")
    change = plan_content(ctx, args, Content(path, wanted), what or "set attributes of")
    if change is None:
        return Unchanged(f"{path}: line already as wanted", {"path": path})
    return change


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=apply_content(ctx, args, change))
