"""Read-only facts about paths: existence, type, mode, size (recursive when asked)."""

from __future__ import annotations

import contextlib
import os
import stat
from typing import Any


def _tree_bytes(path: str) -> int:
    total = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        for name in files + dirs:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def _info(path: str, recursive: bool) -> dict[str, Any]:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    except OSError as exc:
        return {"exists": None, "error": str(exc)}
    kind = (
        "symlink"
        if stat.S_ISLNK(st.st_mode)
        else "dir"
        if stat.S_ISDIR(st.st_mode)
        else "file"
        if stat.S_ISREG(st.st_mode)
        else "other"
    )
    info = {
        "exists": True,
        "type": kind,
        "mode": f"0{stat.S_IMODE(st.st_mode):o}",
        "size": st.st_size,
        "uid": st.st_uid,
        "mtime": st.st_mtime,
    }
    if kind == "symlink":
        info["target"] = os.readlink(path)
        info["resolved"] = os.path.realpath(path)
    if kind == "dir" and recursive:
        info["size"] = _tree_bytes(path)
    return info


def main(args: dict[str, Any]) -> dict[str, Any]:
    recursive = bool(args.get("recursive"))
    return {
        "paths": {p: _info(p, recursive) for p in args["paths"]},
        "home": os.path.expanduser("~"),
    }
