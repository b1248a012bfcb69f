"""Read-only facts about paths: existence, type, mode, size (recursive when asked), and
whether this process (the connection's user, or the user a task becomes) may make and
remove entries in a directory: the kernel's own answer (``access``), never a guess from the
mode bits (groups, ACLs, read-only mounts)."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)


def _tree_bytes(path: str) -> int:
    """Bytes under ``path`` by the guarded walk (no links followed, bounded)."""
    entries = call("fileio", {"op": "list", "path": path})["entries"]
    return sum(int(entry[3]) for entry in entries)


def _write_refusal(path: str) -> str | None:
    return call("fileio", {"op": "judge_write", "path": path})["refusal"]  # type: ignore[no-any-return]


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
    if kind == "dir":
        info["writable"] = os.access(path, os.W_OK | os.X_OK)
        if recursive:
            info["size"] = _tree_bytes(path)
    return info


def main(args: dict[str, Any]) -> dict[str, Any]:
    recursive = bool(args.get("recursive"))
    return {
        "paths": {p: {**_info(p, recursive), "write_refusal": _write_refusal(p)} for p in args["paths"]},
        "home": os.path.expanduser("~"),
        "euid": os.geteuid(),
    }
