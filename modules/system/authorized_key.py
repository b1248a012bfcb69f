"""Add or remove SSH public keys in a user's authorized_keys file.

ansible.posix's `authorized_key`: `key` holds one or more keys (one a line; `#` lines
skipped) or an http(s) URL to fetch them from (from the host, while planning too, as
Ansible fetches it in check mode). A key is matched by its base64 blob; with `present`
one whose type, options (`key_options`) or comment (`comment`) differ is rewritten,
a new one appended after the existing ones; `absent` removes it; `exclusive` removes
every other key. The file is rewritten as ansible.posix rewrites it (its `TYPE BLOB
COMMENT` lines, in order, comments and other lines kept) and written atomically through
the file primitive, 0600 and owned by the user; with `manage_dir` (default) the
directory is created 0700 and owned by the user too. The default path is
~USER/.ssh/authorized_keys (the home directory from the host's passwd database).
`follow: true` is refused: rigger writes through a link only as the file primitive
judges it, never by a realpath taken first.
"""

from __future__ import annotations

import base64
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    command_line,
    content_digest,
    operand,
)

HOST_PATHS = ("path",)
KEY_TYPES = (
    "sk-ecdsa-sha2-nistp256@openssh.com",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "ssh-ed25519",
    "ssh-dss",
    "ssh-rsa",
)
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?\Z")
_OPTIONS = re.compile(r"""((?:[^,"']|"[^"]*"|'[^']*')+)""")
_KEYS_BYTES = 1 << 20

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["user", "key"],
    "properties": {
        "user": {"type": "string", "description": "The account whose authorized_keys file it is."},
        "key": {"type": "string", "description": "The public key(s), one a line, or an http(s) URL listing them."},
        "path": {"type": "string", "description": "Another file than ~USER/.ssh/authorized_keys."},
        "manage_dir": {
            "type": "boolean",
            "default": True,
            "description": "Create the file's directory (0700, owned by the user) and fix its owner and mode.",
        },
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "present: the keys are in the file; absent: they are not.",
        },
        "key_options": {"type": "string", "description": 'sshd options for the keys (`from="10.0.0.0/8",no-pty`).'},
        "exclusive": {"type": "boolean", "default": False, "description": "Remove every other key from the file."},
        "comment": {"type": "string", "description": "Replace the keys' comments with this."},
        "validate_certs": {"type": "boolean", "default": True, "description": "Verify TLS when key is a URL."},
        "follow": {
            "type": "boolean",
            "default": False,
            "description": "Resolve a link at path first: refused when true (links are judged by the file primitive).",
        },
    },
}

Key = tuple[str, str, Any, Any, int]  # (blob or line, type or "skipped", options, comment, rank)


def parse_options(text: str | None) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for part in _OPTIONS.split(text or "")[1:-1] if text else []:
        if "=" in part:
            name, value = part.split("=", 1)
            found[name] = value
        elif part != ",":
            found[part] = None
    return found


def parse_key(raw: str, rank: int) -> Key | None:
    """ansible.posix's parsekey: options, type, blob, comment."""
    raw = raw.replace(r"\#", "#")
    # ansible.posix's shlex (no quotes, no comments, whitespace_split) splits on these only
    parts = [part for part in re.split(r"[ \t\r\n]+", raw) if part]
    if parts and parts[0] == "#":
        return (raw, "skipped", None, None, rank)
    index = next((i for i, part in enumerate(parts) if part in KEY_TYPES), None)
    if index is None or len(parts) <= index + 1:
        return None
    options = parse_options(" ".join(parts[:index]) if index > 0 else None)
    return (parts[index + 1], parts[index], options, " ".join(parts[index + 2 :]), rank)


def parse_file(text: str) -> dict[str, Key]:
    keys: dict[str, Key] = {}
    for rank, line in enumerate(text.splitlines(True)):
        parsed = parse_key(line, rank)
        if parsed:
            keys[parsed[0]] = parsed
        else:
            keys[line] = (line, "skipped", None, None, rank)
    return keys


def serialize(keys: Mapping[str, Key]) -> str:
    lines = []
    for blob, kind, options, comment, _ in sorted(keys.values(), key=lambda key: key[4]):
        if kind == "skipped":
            lines.append(blob)
            continue
        prefix = ",".join(name if value is None else f"{name}={value}" for name, value in options.items())
        lines.append(f"{prefix + ' ' if prefix else ''}{kind} {blob} {comment}\n")
    return "".join(lines)


def enforce(text: str, wanted: list[str], args: Mapping[str, Any]) -> str | None:
    """The file's new content, or None when it already holds what the task says."""
    existing = parse_file(text)
    present, to_keep, write = args["state"] == "present", [], False
    top = len(existing)
    for rank, raw in enumerate(wanted):
        parsed = parse_key(raw, rank)
        if not parsed or parsed[1] == "skipped":
            raise TaskFailed(f"invalid key specified: {raw}")
        blob, kind, options, comment, _ = parsed
        if args.get("key_options") is not None:
            options = parse_options(args["key_options"])
        if args.get("comment") is not None:
            comment = args["comment"]
        new = (blob, kind, options, comment, rank)
        matched = blob in existing and (not present or new[:4] == existing[blob][:4])
        if present:
            to_keep.append(blob)
            if blob in existing and not matched:
                del existing[blob]
                write = True
            if not matched:
                existing[blob] = (blob, kind, options, comment, top + rank)
                write = True
        elif matched:
            del existing[blob]
            write = True
    if present and args["exclusive"]:
        for blob in set(existing) - set(to_keep):
            del existing[blob]
            write = True
    return serialize(existing) if write else None


def _account(ctx: TaskContext, user: str) -> tuple[int, int, str] | None:
    done = ctx.conn.run(command_line(["getent", "passwd"], [operand(user, "user", _USER)]), read_only=True, check=False)
    fields = done.stdout.strip().split(":")
    return (int(fields[2]), int(fields[3]), fields[5]) if done.rc == 0 and len(fields) >= 7 else None


def _wanted_keys(ctx: TaskContext, args: Mapping[str, Any]) -> list[str]:
    text = args["key"]
    if text.startswith("http"):
        request = {"url": text, "validate_certs": args["validate_certs"], "max_bytes": _KEYS_BYTES, "timeout": 10}
        answer = ctx.conn.run_probe("http_get", request)
        if answer["status"] != 200:
            raise TaskFailed(f"Error getting key from: {text}")
        text = base64.b64decode(answer["body"]).decode("utf-8", "replace")
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    if args["follow"]:
        raise TaskFailed("follow: true is not supported: the file primitive judges a link at path itself")
    account = _account(ctx, args["user"])
    if account is None and args.get("path") is None:
        raise TaskFailed("Either user must exist or you must provide full path to key file in check mode")
    path = args.get("path") or posixpath.join(account[2] if account else "", ".ssh", "authorized_keys")
    data = ctx.conn.read_file(path)
    text = "" if data is None else data.decode("utf-8", errors="replace")
    after = enforce(text, _wanted_keys(ctx, args), args)
    result = {"user": args["user"], "keyfile": path, "state": args["state"], "exclusive": args["exclusive"]}
    if after is None:
        return Unchanged(f"{path} already {'holds' if args['state'] == 'present' else 'lacks'} the key(s)", result)
    fingerprint = {f"file:{path}": content_digest(data)}
    verb = "add or update" if args["state"] == "present" else "remove"
    return Change(f"{verb} key(s) in {path}", (Diff(path, text, after),), {"path": path, "content": after}, fingerprint)


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    account = _account(ctx, args["user"])
    if account is None:
        raise TaskFailed(f"Failed to lookup user {args['user']}: not in the host's passwd database")
    uid, gid, _ = account
    path = change.payload["path"]
    directory = posixpath.dirname(path)
    if args["manage_dir"]:
        ctx.conn.run_probe("fileio", {"op": "mkdir", "path": directory, "mode": 0o700})
        ctx.conn.run_probe("fileio", {"op": "attrs", "path": directory, "uid": uid, "gid": gid, "mode": 0o700})
    ctx.conn.write_file(path, change.payload["content"].encode(), mode=0o600)
    ctx.conn.run_probe("fileio", {"op": "attrs", "path": path, "uid": uid, "gid": gid, "mode": 0o600})
    data = {"user": args["user"], "keyfile": path, "state": args["state"], "exclusive": args["exclusive"]}
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=data)
