"""Read-only facts for the file modules: lstat/stat, owner names, checksum, id lookups.

A user or group that does not exist is reported in ``unresolved`` rather than raised: an
earlier task of the same run may create it (check mode shows the change; apply resolves
again before touching anything).
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.probes._call import call

USES = ("file_mode", "fileio")

_KINDS = (
    (stat.S_ISLNK, "link"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISREG, "file"),
)


def _name(lookup: Callable[[int], Any], ident: int) -> str | None:
    try:
        return str(lookup(ident)[0])
    except KeyError:
        return None


def _checksum(path: str, algorithm: str, follow: bool) -> str:
    """The digest of the regular file at ``path``. Opened non-blocking (and, unfollowed,
    O_NOFOLLOW) and checked again after the open: a FIFO swapped in after the stat is
    refused, never waited on."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    handle = os.fdopen(os.open(path, flags), "rb")
    digest = hashlib.new(algorithm)
    with handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError(f"{path} is no longer a regular file")
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _facts(path: str, follow: bool, checksum: str | None) -> dict[str, Any]:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return {"exists": False, "path": path}
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "other")
    facts = {
        "exists": True,
        "path": path,
        "type": kind,
        "mode": f"{stat.S_IMODE(st.st_mode):04o}",
        "size": st.st_size,
        "uid": st.st_uid,
        "gid": st.st_gid,
        "owner": _name(pwd.getpwuid, st.st_uid),
        "group": _name(grp.getgrgid, st.st_gid),
        "mtime": st.st_mtime,
        "atime": st.st_atime,
        "ctime": st.st_ctime,
        "inode": st.st_ino,
        "dev": st.st_dev,
        "nlink": st.st_nlink,
        "readable": os.access(path, os.R_OK),
        "writeable": os.access(path, os.W_OK),
        "executable": os.access(path, os.X_OK),
    }
    if kind == "link":
        facts["link_target"] = os.readlink(path)
        facts["link_source"] = os.path.realpath(path)
    if kind == "file" and checksum:
        facts["checksum"] = _checksum(path, checksum, follow)
    return facts


def _resolve(lookup: Callable[[str], Any], value: Any, what: str, unresolved: list[str]) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    try:
        return int(lookup(value)[2])
    except KeyError:
        unresolved.append(f"no {what} named {value!r} on the host")
        return None


def _mode_differs(mode: int | str | None, st: os.stat_result) -> bool:
    if mode is None:
        return False
    current = stat.S_IMODE(st.st_mode)
    wanted = call("file_mode", {"mode": mode, "current": current, "is_dir": stat.S_ISDIR(st.st_mode)})["mode"]
    return bool(wanted != current)


def _tree_mismatches(root: str, uid: int | None, gid: int | None, mode: int | str | None, limit: int = 20) -> list[str]:
    """Paths under ``root`` whose owner, group or mode (octal, or symbolic applied to each
    path's own mode) differ from the wanted ones."""
    found: list[str] = []
    for rel, kind, *_ in call("fileio", {"op": "list", "path": root})["entries"]:
        path = f"{root.rstrip('/')}/{rel}"
        if kind == "link":
            continue
        st = os.lstat(path)
        wrong_owner = (uid is not None and st.st_uid != uid) or (gid is not None and st.st_gid != gid)
        if wrong_owner or _mode_differs(mode, st):
            found.append(path)
            if len(found) >= limit:
                return found
    return found


def _listing(root: str) -> dict[str, Any]:
    """Directories and files under ``root`` (relative, sorted), files with modes: the
    guarded tree walk (fileio), which never follows a symlink and stops at its bounds. A
    symlink inside the tree is refused rather than copied as whatever it points to."""
    try:
        entries = call("fileio", {"op": "list", "path": root})["entries"]
    except (NotADirectoryError, FileNotFoundError):  # a file source: nothing to list
        return {"dirs": [], "files": []}
    links = [rel for rel, kind, *_ in entries if kind == "link"]
    if links:
        raise ValueError(
            f"{root} holds symlinks, which are not followed: {', '.join(links[:5])}"
            + (" ..." if len(links) > 5 else "")
        )
    dirs = [rel for rel, kind, *_ in entries if kind == "dir"]
    files = [[rel, mode] for rel, kind, mode, _ in entries if kind == "file"]
    return {"dirs": dirs, "files": files}


def _followed(path: str, facts: dict[str, Any], checksum: str | None) -> dict[str, Any]:
    """A module's ``follow: true``: the facts of what the link at ``path`` leads to, found
    by the guarded walk (another user's link only to that user's own files), with
    ``via_link``; a link the walk refuses answers its ``write_refusal``."""
    answer = call("fileio", {"op": "follow", "path": path})
    if answer["refusal"]:
        return {**facts, "write_refusal": answer["refusal"]}
    real = answer["real"]
    return {**_facts(real, False, checksum), "via_link": path, "link_target": facts["link_target"]}


def main(args: dict[str, Any]) -> dict[str, Any]:
    follow = bool(args.get("follow", False))
    checksum = args.get("checksum")
    unresolved: list[str] = []
    answer: dict[str, Any] = {"paths": {p: _facts(p, follow, checksum) for p in args.get("paths", [])}}
    for path, facts in answer["paths"].items():  # what the guarded write would refuse, shown in the plan
        facts["write_refusal"] = call("fileio", {"op": "judge_write", "path": facts["path"]})["refusal"]
        if args.get("follow_links") and facts.get("type") == "link" and not facts["write_refusal"]:
            answer["paths"][path] = facts = _followed(path, facts, checksum)
            facts.setdefault("write_refusal", call("fileio", {"op": "judge_write", "path": facts["path"]})["refusal"])
    answer["unresolved"] = unresolved
    answer["umask"] = call("file_mode", {})["umask"]
    answer["uid"] = _resolve(pwd.getpwnam, args.get("owner"), "user", unresolved)
    answer["gid"] = _resolve(grp.getgrnam, args.get("group"), "group", unresolved)
    if args.get("list"):
        answer["listing"] = _listing(args["list"])
    tree = args.get("tree")
    if tree and os.path.isdir(tree["path"]) and not os.path.islink(tree["path"]):
        answer["tree_mismatches"] = _tree_mismatches(tree["path"], answer["uid"], answer["gid"], tree.get("mode"))
    return answer
