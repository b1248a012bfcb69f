"""Load variables from YAML or JSON files on the controller into the host's variables.

Ansible's `include_vars`: `file` (or the free form) names one file, searched in the
role's `vars/`, the role, the playbook's `vars/`, then the playbook directory; `dir` loads
every file below a directory in name order (`depth` levels, 0: all; `files_matching` a
regexp on the name; `ignore_files`; `extensions`). `name` puts everything under one
variable. Values are rendered as Ansible renders vars files (they may refer to each other
and to the task's variables). Nothing on the host is read or changed, so check mode runs it
too; a vault-encrypted file is refused by name.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from engine.module_api import TaskContext, TaskFailed, Unchanged, controller_files, render_loaded

FREE_FORM = "file"
MAX_BYTES = 16 * 1024 * 1024  # a vars file larger than this is not a vars file

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "oneOf": [{"required": ["file"]}, {"required": ["dir"]}],
    "properties": {
        "file": {"type": "string", "description": "The vars file (YAML or JSON)."},
        "dir": {"type": "string", "description": "A directory whose vars files are all loaded, in name order."},
        "name": {"type": "string", "description": "Put the loaded variables under this one variable."},
        "depth": {
            "type": "integer",
            "minimum": 0,
            "default": 0,
            "description": "With dir: levels to descend (0: all).",
        },
        "files_matching": {"type": "string", "description": "With dir: only files whose name matches this regexp."},
        "ignore_files": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "With dir: file names (regexps) to leave out.",
        },
        "extensions": {
            "type": "array",
            "items": {"type": "string"},
            "default": ["json", "yaml", "yml"],
            "description": "With dir: the file extensions to load.",
        },
        "ignore_unknown_extensions": {
            "type": "boolean",
            "default": False,
            "description": "With dir: skip files of other extensions instead of failing.",
        },
        "hash_behaviour": {
            "type": ["string", "null"],
            "enum": ["replace", None],
            "default": None,
            "description": "Only replace is supported (a later file's variable replaces an earlier one).",
        },
    },
}


def _roots(variables: Mapping[str, Any]) -> list[Path]:
    roots = []
    if variables.get("role_path"):
        role = Path(str(variables["role_path"]))
        roots += [role / "vars", role]
    playbook = Path(str(variables.get("playbook_dir", ".")))
    return [*roots, playbook / "vars", playbook]


def _find(variables: Mapping[str, Any], name: str) -> Path:
    if Path(name).is_absolute():
        return Path(name)
    roots = _roots(variables)
    for root in roots:
        if controller_files.exists(root / name):
            return root / name
    raise TaskFailed(f"could not find {name!r} in {', '.join(str(r) for r in roots)}")


def _load(path: Path) -> dict[str, Any]:
    if not controller_files.is_file(path):
        raise TaskFailed(f"{path} is not a file")
    if controller_files.size(path) > MAX_BYTES:
        raise TaskFailed(f"{path} is larger than {MAX_BYTES} bytes")
    text = controller_files.read_text(path)
    if text.lstrip().startswith("$ANSIBLE_VAULT"):
        raise TaskFailed(f"{path} is vault-encrypted: vault is not supported by rigger")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TaskFailed(f"{path}: not valid YAML or JSON: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TaskFailed(f"{path} must hold a mapping of variables, not a {type(data).__name__}")
    return data


def _dir_files(args: Mapping[str, Any], top: Path) -> list[Path]:
    if not top.is_dir():
        raise TaskFailed(f"{top} is not a directory")
    matching = re.compile(args["files_matching"]) if args.get("files_matching") else None
    ignored = [re.compile(p) for p in args["ignore_files"]]
    found = []
    for folder, dirs, files in os.walk(top):
        level = len(Path(folder).relative_to(top).parts)
        dirs.sort()
        if args["depth"] and level + 1 >= args["depth"]:
            dirs.clear()
        for name in sorted(files):
            if (matching and not matching.search(name)) or any(p.search(name) for p in ignored):
                continue
            if name.rpartition(".")[2] not in args["extensions"]:
                if args["ignore_unknown_extensions"]:
                    continue
                raise TaskFailed(
                    f"{Path(folder) / name} does not have a valid extension: {', '.join(args['extensions'])}"
                )
            found.append(Path(folder) / name)
    return sorted(found)


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    paths = [_find(ctx.vars, args["file"])] if args.get("file") else _dir_files(args, _find(ctx.vars, args["dir"]))
    loaded: dict[str, Any] = {}
    for path in paths:
        loaded.update(_load(path))
    values = render_loaded(loaded, ctx.vars)
    if args.get("name"):
        values = {args["name"]: values}
    files = [str(p) for p in paths]
    msg = f"loaded {len(loaded)} variable(s) from {len(files)} file(s)"
    return Unchanged(msg, {"ansible_facts": values, "ansible_included_var_files": files}, set_vars=values)
