"""Apply the file modules' planned operations on the host, in order, each one checked.

Removal and replacement verify that the path is still the one the plan saw (device and
inode), so a path swapped between plan and apply is never deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.probes._call import call

MUTATES = True
USES = ("file_mode",)

import grp
import os
import pwd
import shutil
import stat
import time


def _same(path: str, identity: list[int] | None) -> bool:
    if identity is None:
        return True
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return [st.st_dev, st.st_ino] == list(identity)


def _guard(op: dict[str, Any]) -> None:
    if not _same(op["path"], op.get("identity")):
        raise RuntimeError(f"{op['path']} changed since it was planned; not touching it")


def _remove(op: dict[str, Any]) -> None:
    _guard(op)
    path = op["path"]
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _mkdir(op: dict[str, Any]) -> None:
    os.makedirs(op["path"], exist_ok=True)


def _touch(op: dict[str, Any]) -> None:
    path = op["path"]
    if not os.path.lexists(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    elif op.get("update_times"):
        os.utime(path)


def _link(op: dict[str, Any], make: Callable[[str, str], None]) -> None:
    path, src = op["path"], op["src"]
    _guard(op)
    temp = f"{path}.rigger-{os.getpid()}-{time.monotonic_ns()}"
    make(src, temp)
    try:
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def _attrs(op: dict[str, Any]) -> None:
    path = op["path"]
    uid = -1 if op.get("uid") is None else op["uid"]
    gid = -1 if op.get("gid") is None else op["gid"]
    targets = [path]
    if op.get("recurse") and os.path.isdir(path) and not os.path.islink(path):
        for base, dirs, files in os.walk(path):
            targets.extend(os.path.join(base, name) for name in dirs + files)
    for target in targets:
        is_link = os.path.islink(target)
        if uid != -1 or gid != -1:
            os.lchown(target, uid, gid) if is_link else os.chown(target, uid, gid)
        if op.get("mode") is None or is_link:
            continue
        st = os.lstat(target)
        current = stat.S_IMODE(st.st_mode)
        wanted = call("file_mode", {"mode": op["mode"], "current": current, "is_dir": stat.S_ISDIR(st.st_mode)})
        if wanted["mode"] != current:
            os.chmod(target, wanted["mode"])


_OPS: dict[str, Callable[[dict[str, Any]], None]] = {
    "remove": _remove,
    "mkdir": _mkdir,
    "touch": _touch,
    "symlink": lambda op: _link(op, os.symlink),
    "hardlink": lambda op: _link(op, os.link),
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
