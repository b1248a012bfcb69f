"""Load or unload a kernel module (`nvidia-peermem`, `nvidia-uvm`), and keep it loaded at boot.

community.general's `modprobe`: `state: present` runs `modprobe NAME PARAMS...` when
/proc/modules (or the running kernel's modules.builtin) does not list it; `absent` runs
`modprobe -r NAME` when it does. Check mode asks `modprobe -n` (a dry run: the module
must exist) and loads nothing. `persistent: present` makes the module load at boot:
/etc/modules-load.d/NAME.conf holding the name unless a file there already names it, and
with `params`, /etc/modprobe.d/NAME.conf holding `options NAME key=value` lines (older
`options NAME` lines elsewhere in /etc/modprobe.d are commented out first);
`persistent: absent` comments out every line of those directories that loads it or sets
its options; `disabled` (the default) leaves them alone. Files are written through the
file primitive. A name outside letters, digits, `_` and `-`, or a parameter that is not
`key=value`, is refused before anything runs: neither is ever read as an option.
"""

from __future__ import annotations

import re
import shlex
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
    operands,
)

LOAD_DIR = "/etc/modules-load.d"
OPTIONS_DIR = "/etc/modprobe.d"
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*\Z")
_PARAM = re.compile(r"^\w+=\S+\Z")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "description": "The kernel module's name."},
        "state": {
            "type": "string",
            "enum": ["present", "absent"],
            "default": "present",
            "description": "present: loaded now; absent: unloaded now.",
        },
        "params": {
            "type": "string",
            "default": "",
            "description": "Parameters to load it with, `key=value` separated by spaces.",
        },
        "persistent": {
            "type": "string",
            "enum": ["disabled", "absent", "present"],
            "default": "disabled",
            "description": "present: loaded at boot (modules-load.d, modprobe.d options); absent: no "
            "longer; disabled: leave the boot configuration alone.",
        },
    },
}


def _checked(args: Mapping[str, Any]) -> tuple[str, list[str]]:
    name = operand(args["name"], "name")
    if not _NAME.match(name):
        raise TaskFailed(f"name: {name!r} is not a kernel module name (letters, digits, '_' and '-')")
    params = shlex.split(args["params"])
    bad = [param for param in params if not _PARAM.match(param)]
    if bad:
        raise TaskFailed(f"params: {bad[0]!r} is not key=value (a module parameter)")
    return name, operands(params, "params")


def _patterns(name: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """community.general's: a line that loads the module, a line that sets one option."""
    quoted = re.escape(name)
    return (
        re.compile(rf"^ *{quoted} *(?:[#;].*)?\n?\Z"),
        re.compile(rf"^options {quoted} (\w+=\S+) *(?:[#;].*)?\n?\Z"),
    )


def _commented(text: str, pattern: re.Pattern[str]) -> str:
    return "".join("#" + line if pattern.match(line) else line for line in text.splitlines(keepends=True))


def _boot_files(name: str, params: list[str], persistent: str, facts: Mapping[str, Any]) -> dict[str, str]:
    """Path -> new content of each boot configuration file to write."""
    loads, option = _patterns(name)
    load_files, options_files = facts["load_files"], facts["options_files"]
    persistently = any(loads.match(line) for text in load_files.values() for line in text.splitlines(True))
    set_now = {
        m.group(1) for text in options_files.values() for line in text.splitlines(True) if (m := option.match(line))
    }
    writes: dict[str, str] = {}
    if persistent == "present" and not (persistently and set(params) == set_now):
        if not persistently:
            writes[f"{LOAD_DIR}/{name}.conf"] = f"{name}\n"
        if set(params) != set_now:
            writes.update(_disabled(options_files, option))
            writes[f"{OPTIONS_DIR}/{name}.conf"] = "".join(f"options {name} {param}\n" for param in params)
    elif persistent == "absent" and (persistently or set_now):
        writes.update(_disabled(load_files, loads))
        writes.update(_disabled(options_files, option))
    return writes


def _disabled(files: Mapping[str, str], pattern: re.Pattern[str]) -> dict[str, str]:
    changed = {path: _commented(text, pattern) for path, text in files.items()}
    return {path: text for path, text in changed.items() if text != files[path]}


def _dry_run(ctx: TaskContext, argv: list[str]) -> None:
    done = ctx.conn.run(argv, read_only=True, check=False)
    if done.rc != 0:
        raise TaskFailed(f"{' '.join(argv)} failed (rc {done.rc}): {done.stderr.strip() or done.stdout.strip()}")


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    name, params = _checked(args)
    facts = ctx.conn.run_probe("kernel_modules", {"name": name, "load_dir": LOAD_DIR, "options_dir": OPTIONS_DIR})
    present = args["state"] == "present"
    live = present != facts["loaded"]
    if live:  # modprobe -n: the module exists (or is loaded) and would be (un)loaded
        _dry_run(ctx, command_line(["modprobe", "-n", *([] if present else ["-r"])], [name, *params]))
    writes = _boot_files(name, params, args["persistent"], facts)
    data = {"name": name, "params": args["params"], "state": args["state"]}
    if not live and not writes:
        return Unchanged(f"{name} is already {'loaded' if present else 'unloaded'}", data)
    old = {**facts["load_files"], **facts["options_files"]}
    diffs = [Diff(path, old.get(path, ""), text) for path, text in writes.items()]
    if live:
        diffs.insert(
            0, Diff(f"kernel module {name}", f"{'un' if present else ''}loaded\n", f"{'' if present else 'un'}loaded\n")
        )
    steps = ([f"{'load' if present else 'unload'} {name}"] if live else []) + (
        [f"{'keep' if args['persistent'] == 'present' else 'stop'} loading {name} at boot"] if writes else []
    )
    fingerprint = {f"file:{path}": content_digest(old[path].encode() if path in old else None) for path in writes}
    fingerprint[f"kmod:{name}"] = "loaded" if facts["loaded"] else "unloaded"
    payload = {"load": live, "writes": writes, "created": [path for path in writes if path not in old], **data}
    return Change("; ".join(steps), tuple(diffs), payload, fingerprint)


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    name, params = _checked(args)
    if change.payload["load"]:
        head = ["modprobe"] if args["state"] == "present" else ["modprobe", "-r"]
        ctx.conn.run(command_line(head, [name, *params]))
    for path, text in change.payload["writes"].items():
        # a new file is 0644 as modprobe.d files are; an edited one keeps its mode
        ctx.conn.write_file(path, text.encode(), mode=0o644 if path in change.payload["created"] else None)
    data = {"name": name, "params": args["params"], "state": args["state"]}
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=data)
