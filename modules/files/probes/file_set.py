"""Apply the file modules' planned operations on the host, in order, each one checked.

Every effect goes through the guarded primitives: ``remove_path`` (the path judged by
identity against the protected set, then removed relative to opened directories) and
``fileio`` (paths walked without following untrusted links). Removal and replacement
verify that the path is still the one the plan saw (device and inode), so a path
swapped between plan and apply is never deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.probes._call import call

MUTATES = True
USES = ("file_mode", "fileio", "remove_path")

import grp
import pwd


def _remove(op: dict[str, Any]) -> None:
    identity = op.get("identity")
    if identity is None:  # a temp file of this task (validate): only ever a file
        call("remove_path", {"path": op["path"], "files_only": True})
        return
    call("remove_path", {"path": op["path"], "dev": identity[0], "ino": identity[1]})


def _mkdir(op: dict[str, Any]) -> None:
    call("fileio", {"op": "mkdir", "path": op["path"]})


def _touch(op: dict[str, Any]) -> None:
    call("fileio", {"op": "touch", "path": op["path"], "update_times": op.get("update_times")})


def _link(op: dict[str, Any], kind: str) -> None:
    call("fileio", {"op": kind, "path": op["path"], "src": op["src"], "identity": op.get("identity")})


def _attrs(op: dict[str, Any]) -> None:
    mode = op.get("mode")

    def mode_of(current: int, is_dir: bool) -> int:
        return int(call("file_mode", {"mode": mode, "current": current, "is_dir": is_dir})["mode"])

    call(
        "fileio",
        {
            "op": "attrs",
            "path": op["path"],
            "uid": -1 if op.get("uid") is None else op["uid"],
            "gid": -1 if op.get("gid") is None else op["gid"],
            "mode_of": None if mode is None else mode_of,
            "recurse": bool(op.get("recurse")),
        },
    )


_OPS: dict[str, Callable[[dict[str, Any]], None]] = {
    "remove": _remove,
    "mkdir": _mkdir,
    "touch": _touch,
    "symlink": lambda op: _link(op, "symlink"),
    "hardlink": lambda op: _link(op, "hardlink"),
    "attrs": _attrs,
}


def _resolve_names(ops: list[dict[str, Any]]) -> None:
    """Owner/group names an op carries are resolved before any op runs: all or nothing."""
    for op in ops:
        try:
            if op.get("uid") is None and op.get("owner") is not None:
                op["uid"] = pwd.getpwnam(op["owner"]).pw_uid
        except KeyError:
            raise LookupError(f"no user named {op['owner']!r} on the host") from None
        try:
            if op.get("gid") is None and op.get("group") is not None:
                op["gid"] = grp.getgrnam(op["group"]).gr_gid
        except KeyError:
            raise LookupError(f"no group named {op['group']!r} on the host") from None


def main(args: dict[str, Any]) -> dict[str, Any]:
    _resolve_names(args["ops"])
    done = []
    for op in args["ops"]:
        _OPS[op["op"]](op)
        done.append(op["op"] + " " + op["path"])
    return {"done": done}
