"""Find files, directories or links on the host by name, age, size, mode or content; never changes them.

Ansible's `find`: every path in `paths` is listed (with `recurse`, the whole tree,
top-down, to `depth`), entries named by `patterns` (shell globs, or regexes with
`use_regex`, matched against the base name) and not by `excludes` are checked against
`file_type`, `age` (`2d`, `-1h`: older than, younger than), `size` (`10m`, `-1k`), `mode`
and, for files, `contains` (a regex matched at the start of a line, or searched in the
whole file with `read_whole_file`). The result has Ansible's `files` (each with `path`,
`mode`, `isdir`, `isreg`, `islnk`, `size`, `uid`, `pw_name`, `mtime`, ..., and `checksum`
with `get_checksum`), `matched`, `examined`, `skipped_paths` and `msg`. A start path that
is a link is followed only as the file primitive trusts links; links below it are
reported, never descended into (`follow: true` is refused); `mode` takes octal only.
It only reads, so it runs the same in check mode.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, Unchanged

HOST_PATHS = ("paths", "path", "name")  # a string; the items of a list are not expanded
_AGE = re.compile(r"^(-?\d+)(s|m|h|d|w)?\Z")
_SIZE = re.compile(r"^(-?\d+)(b|k|m|g|t)?\Z")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_BYTES = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def _list(description: str) -> dict[str, Any]:
    return {"type": ["array", "string"], "items": {"type": "string"}, "description": description}


SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["paths"]}, {"required": ["path"]}, {"required": ["name"]}],
    "properties": {
        "paths": _list("Directories to search (a list, or one string, comma-separated as Ansible splits it)."),
        "path": _list("Another name for paths (Ansible's alias)."),
        "name": _list("Another name for paths (Ansible's alias)."),
        "patterns": _list("Base-name patterns, any of which must match (globs; regexes with use_regex)."),
        "pattern": _list("Another name for patterns (Ansible's alias)."),
        "excludes": _list("Base-name patterns that cull matches."),
        "exclude": _list("Another name for excludes (Ansible's alias)."),
        "contains": {"type": "string", "description": "A regex a line of the file must match (files only)."},
        "read_whole_file": {
            "type": "boolean",
            "default": False,
            "description": "Search contains in the whole file instead of matching line by line.",
        },
        "file_type": {
            "type": "string",
            "enum": ["any", "directory", "file", "link"],
            "default": "file",
            "description": "What kind of entry to report.",
        },
        "age": {"type": "string", "description": "Older than this (`3d`, `12h`); negative: younger than."},
        "age_stamp": {
            "type": "string",
            "enum": ["atime", "ctime", "mtime"],
            "default": "mtime",
            "description": "Which time age compares.",
        },
        "size": {"type": "string", "description": "At least this size (`10m`, `1g`); negative: at most."},
        "recurse": {"type": "boolean", "default": False, "description": "Search the directories below too."},
        "hidden": {"type": "boolean", "default": False, "description": "Include names starting with '.'."},
        "follow": {
            "type": "boolean",
            "default": False,
            "description": "Descend into links to directories: refused when true "
            "(rigger follows no link it has not judged).",
        },
        "get_checksum": {"type": "boolean", "default": False, "description": "Add each file's checksum."},
        "checksum_algorithm": {
            "type": "string",
            "enum": ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"],
            "default": "sha1",
            "description": "Digest for get_checksum.",
        },
        "use_regex": {"type": "boolean", "default": False, "description": "patterns and excludes are regexes."},
        "depth": {"type": "integer", "description": "How many levels deep to go with recurse (1: the path's entries)."},
        "mode": {"type": "string", "description": "Permission bits (octal, `0644`) the entry must have."},
        "exact_mode": {
            "type": "boolean",
            "default": True,
            "description": "mode must equal the entry's bits; false: any of them set.",
        },
        "encoding": {"type": "string", "description": "Encoding of files searched with contains (default UTF-8)."},
        "limit": {"type": "integer", "description": "Stop after this many matches."},
    },
}


def _strings(value: Any) -> list[str]:
    """Ansible's list type: a string is split on commas."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(item) for item in value]


def _amount(value: str | None, grammar: re.Pattern[str], units: Mapping[str, int], what: str) -> int | None:
    if value is None:
        return None
    found = grammar.match(value.lower())
    if not found:
        raise TaskFailed(f"failed to process {what}: {value!r}")
    return int(found.group(1)) * units.get(found.group(2) or "", 1)


def _request(args: Mapping[str, Any]) -> dict[str, Any]:
    if args["follow"]:
        raise TaskFailed("follow: true is not supported: rigger never descends into links it has not judged")
    if args.get("limit") is not None and args["limit"] <= 0:
        raise TaskFailed(f"limit cannot be {args['limit']} (use None for unlimited)")
    mode = args.get("mode")
    if mode is not None and not re.fullmatch(r"0?[0-7]{3,4}", str(mode)):
        raise TaskFailed(f"mode: {mode!r} is not an octal mode (symbolic modes are not supported by find here)")
    patterns = _strings(args.get("patterns", args.get("pattern")))
    request = {key: args[key] for key in ("file_type", "age_stamp", "recurse", "hidden", "use_regex", "exact_mode")}
    request |= {key: args[key] for key in ("read_whole_file", "get_checksum", "checksum_algorithm")}
    for pattern in [*patterns, *_strings(args.get("excludes", args.get("exclude")))] if args["use_regex"] else []:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise TaskFailed(f"{pattern!r} is not a valid regex: {exc}") from None
    return request | {
        "paths": _strings(args.get("paths") or args.get("path") or args.get("name")),
        "patterns": patterns or ([".*"] if args["use_regex"] else ["*"]),
        "excludes": _strings(args.get("excludes", args.get("exclude"))),
        "contains": args.get("contains"),
        "encoding": args.get("encoding"),
        "age": _amount(args.get("age"), _AGE, _SECONDS, "age"),
        "size": _amount(args.get("size"), _SIZE, _BYTES, "size"),
        "mode": None if mode is None else int(str(mode), 8),
        "depth": args.get("depth"),
        "limit": args.get("limit"),
    }


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    answer = ctx.conn.run_probe("find_files", _request(args))
    files = answer["files"]
    data = {
        "files": files,
        "matched": len(files),
        "examined": answer["examined"],
        "skipped_paths": answer["skipped_paths"],
        "msg": answer["msg"],
    }
    warnings = tuple(
        f"Skipped '{path}' path due to this access issue: {why}" for path, why in answer["skipped_paths"].items()
    )
    return Unchanged(f"{len(files)} matched of {answer['examined']} examined", data, warnings)
