"""Set a kernel parameter in a sysctl file and, with `sysctl_set`, in the running kernel.

ansible.posix's `sysctl`: `name` in `sysctl_file` (default /etc/sysctl.conf; a drop-in
such as /etc/sysctl.d/90-gpu.conf is the usual choice) is made `name=value`, or removed
with `state: absent`. The file is rewritten as Ansible rewrites it: other settings kept
as `key=value` (the first of duplicates only), comments and blank lines kept (every line
stripped of surrounding blanks), a new setting appended at the end; the write is atomic
(the file primitive). With `reload` (the default) a changed file is loaded with
`sysctl -p FILE`; with `sysctl_set` the live value (`sysctl -e -n`) is compared too and
set with `sysctl -w` (both with `-e` under `ignoreerrors`). The file's value is compared
as text, the live one word by word (`1 2` equals `1   2`), as ansible.posix compares
them; a boolean-like value (`yes`, `on`, `true`) is written as 1, `no`/`off`/`false` as
0. A key the running kernel lacks fails the task before the file is written (Ansible
writes the file, then fails setting it). A key outside letters, digits, `_ . - /` (or
starting with `-`) is refused before anything runs.
"""

from __future__ import annotations

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

_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*\Z")
_TRUE = ("y", "yes", "on", "1", "true", "t")
_FALSE = ("n", "no", "off", "0", "false", "f")

HOST_PATHS = ("sysctl_file",)
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "anyOf": [{"required": ["name"]}, {"required": ["key"]}],
    "properties": {
        "name": {"type": "string", "description": "The kernel parameter (`vm.swappiness`)."},
        "key": {"type": "string", "description": "Another name for name (Ansible's alias)."},
        "value": {
            "type": ["string", "number", "boolean"],
            "description": "Its value; needed with state present. Ansible's alias val.",
        },
        "val": {"type": ["string", "number", "boolean"], "description": "Another name for value (Ansible's alias)."},
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "present: the file holds name=value; absent: the file no longer names it.",
        },
        "sysctl_file": {
            "type": "string",
            "default": "/etc/sysctl.conf",
            "description": "The file that keeps the setting across reboots.",
        },
        "reload": {
            "type": "boolean",
            "default": True,
            "description": "After a change to the file, load it with `sysctl -p FILE`.",
        },
        "sysctl_set": {
            "type": "boolean",
            "default": False,
            "description": "Also compare the running kernel's value and set it with `sysctl -w`.",
        },
        "ignoreerrors": {
            "type": "boolean",
            "default": False,
            "description": "Ignore unknown keys when reloading (`sysctl -e -p`).",
        },
    },
}


def _normal(value: Any) -> str:
    """Ansible's _parse_value: booleans to 1/0, text stripped."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    text = str(value)
    if text.lower() in _TRUE:
        return "1"
    if text.lower() in _FALSE:
        return "0"
    return text.strip()


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a.split() == b.split()


def _settings(args: Mapping[str, Any]) -> tuple[str, str]:
    name = str(args.get("name") or args.get("key")).strip()
    if not _KEY.match(name):
        raise TaskFailed(f"{name!r} is not a sysctl key (letters, digits, '_', '.', '-', '/'; not starting with '-')")
    raw = args.get("value", args.get("val"))
    if args["state"] == "present" and (raw is None or raw == ""):
        raise TaskFailed(f"value cannot be {'None' if raw is None else 'blank'} (state present, {name})")
    value = _normal(raw)
    if "\n" in value:
        raise TaskFailed(f"the value for {name} spans lines: a sysctl value is one line")
    return name, value


def file_values(lines: list[str]) -> dict[str, str]:
    found = {}
    for line in lines:
        text = line.strip()
        if text and not text.startswith(("#", ";")) and "=" in text:
            key, value = text.split("=", 1)
            found[key.strip()] = value.strip()
    return found


def fixed_lines(lines: list[str], name: str, value: str, present: bool) -> list[str]:
    """The file as ansible.posix's fix_lines and write_sysctl rewrite it: every line
    stripped, settings as key=value, the first of duplicates kept, the new one last."""
    checked: list[str] = []
    fixed = []
    for line in (raw.strip() for raw in lines):
        if not line or line.startswith(("#", ";")) or "=" not in line:
            fixed.append(line + "\n")
            continue
        key, old = (part.strip() for part in line.split("=", 1))
        if key in checked:
            continue
        checked.append(key)
        if key != name:
            fixed.append(f"{key}={old}\n")
        elif present:
            fixed.append(f"{key}={value}\n")
    if name not in checked and present:
        fixed.append(f"{name}={value}\n")
    return fixed


def _live(ctx: TaskContext, name: str) -> str | None:
    """The running kernel's value; None for a key it lacks (`-e`: empty answer, rc 0)."""
    argv = command_line(["sysctl", "-e", "-n"], [operand(name, "name", _KEY)])
    done = ctx.conn.run(argv, read_only=True, check=False)
    return done.stdout.strip() if done.rc == 0 and done.stdout.strip() else None


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    name, value = _settings(args)
    path = args["sysctl_file"]
    data = ctx.conn.read_file(path)
    text = "" if data is None else data.decode("utf-8", errors="replace")
    lines = text.splitlines(keepends=True)
    present = args["state"] == "present"
    in_file = file_values(lines).get(name)
    # the file compares as text (ansible.posix), the running kernel word by word
    write = in_file != value if present else bool(in_file)
    live = _live(ctx, name) if args["sysctl_set"] else None
    if args["sysctl_set"] and present and live is None and not args["ignoreerrors"]:
        raise TaskFailed(f"the running kernel has no sysctl {name} (sysctl -e -n answered nothing)")
    set_live = args["sysctl_set"] and present and live is not None and not _same(live, value)
    if not write and not set_live:
        return Unchanged(f"{name} is already {value or 'absent'} in {path}", {"name": name, "value": value})
    diffs = []
    after = "".join(fixed_lines(lines, name, value, present)) if write else text
    if write:
        diffs.append(Diff(path, text, after))
    if set_live:
        diffs.append(Diff(f"sysctl {name} (running kernel)", f"{live}\n", f"{value}\n"))
    verb = f"set {name}={value}" if present else f"remove {name}"
    fingerprint = {f"file:{path}": content_digest(data)}
    if args["sysctl_set"]:
        fingerprint[f"sysctl:{name}"] = live or ""
    payload = {"name": name, "value": value, "content": after if write else None, "set_live": set_live}
    return Change(f"{verb} in {path}" if write else f"{verb} in the running kernel", tuple(diffs), payload, fingerprint)


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    name, value, path = change.payload["name"], change.payload["value"], args["sysctl_file"]
    _settings(args)  # the key is judged again before it reaches a command line
    if change.payload["content"] is not None:
        ctx.conn.write_file(path, change.payload["content"].encode())
        if args["reload"]:
            head = ["sysctl", *(["-e"] if args["ignoreerrors"] else []), "-p"]
            ctx.conn.run(command_line(head, [operand(path, "sysctl_file")]))
    if change.payload["set_live"]:
        head = ["sysctl", *(["-e"] if args["ignoreerrors"] else []), "-w"]
        ctx.conn.run(command_line(head, [operand(f"{name}={value}", "name=value")]))
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data={"name": name, "value": value})
