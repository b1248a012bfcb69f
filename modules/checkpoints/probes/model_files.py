"""Describe files in a model directory without following symlinks (read-only).

args: {"dir": str, "names": [str], "backup_suffix": str}
Answers each name's kind (missing | file | symlink | other), the symlink target, size,
and which names already have a backup next to them.
"""

from __future__ import annotations

import os
from typing import Any


def _describe(path: str) -> dict[str, Any]:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"kind": "missing"}
    if os.path.islink(path):
        return {
            "kind": "symlink",
            "target": os.readlink(path),
            "realpath": os.path.realpath(path),
            "dangling": not os.path.exists(path),
        }
    if os.path.isfile(path):
        return {"kind": "file", "size": info.st_size, "mode": info.st_mode & 0o7777}
    return {"kind": "other"}


def main(args: dict[str, Any]) -> dict[str, Any]:
    directory = args["dir"]
    suffix = args.get("backup_suffix", ".rigger-orig")
    if not os.path.isdir(directory):
        return {"dir_exists": False, "files": {}}
    files = {}
    for name in args.get("names", []):
        path = os.path.join(directory, name)
        entry = _describe(path)
        entry["backup"] = _describe(path + suffix)
        files[name] = entry
    backups = sorted(entry[: -len(suffix)] for entry in os.listdir(directory) if entry.endswith(suffix))
    return {"dir_exists": True, "files": files, "backed_up": backups}
