"""Read-only: Ansible's find on the host, walked as its os.walk walks (top-down, no links).

Each start path is resolved through the file primitive first (a link there is followed
only as fileio's trust rule allows), then listed relative to opened directories, never
following a link below it (``follow: true`` is refused by the module). Content
(``contains``) is read through the file primitive; checksums come from file_facts.
Answer: ``files`` (Ansible's stat dicts), ``examined``, ``skipped_paths``, ``msg``.
"""

from __future__ import annotations

import base64
import fnmatch
import grp
import os
import pwd
import re
import stat
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio", "file_facts")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _matches(name: str, patterns: list[str], excludes: list[str], use_regex: bool) -> bool:
    """Ansible's pfilter: a pattern matches the base name and no exclude does."""

    def hit(pattern: str) -> bool:
        return bool(re.match(pattern, name)) if use_regex else fnmatch.fnmatch(name, pattern)

    return any(hit(p) for p in patterns) and not any(hit(e) for e in excludes)


def _name(lookup: Any, ident: int) -> str:
    try:
        return str(lookup(ident)[0])
    except KeyError:
        return ""


def statinfo(st: os.stat_result) -> dict[str, Any]:
    mode = st.st_mode
    info: dict[str, Any] = {
        "mode": f"{stat.S_IMODE(mode):04o}",
        "isdir": stat.S_ISDIR(mode),
        "ischr": stat.S_ISCHR(mode),
        "isblk": stat.S_ISBLK(mode),
        "isreg": stat.S_ISREG(mode),
        "isfifo": stat.S_ISFIFO(mode),
        "islnk": stat.S_ISLNK(mode),
        "issock": stat.S_ISSOCK(mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "size": st.st_size,
        "inode": st.st_ino,
        "dev": st.st_dev,
        "nlink": st.st_nlink,
        "atime": st.st_atime,
        "mtime": st.st_mtime,
        "ctime": st.st_ctime,
        "gr_name": _name(grp.getgrgid, st.st_gid),
        "pw_name": _name(pwd.getpwuid, st.st_uid),
    }
    for who in ("usr", "grp", "oth"):
        for perm in ("r", "w", "x"):
            info[perm + who] = bool(mode & getattr(stat, f"S_I{perm.upper()}{who.upper()}"))
    info["isuid"], info["isgid"] = bool(mode & stat.S_ISUID), bool(mode & stat.S_ISGID)
    return info


def _walk(fd: int, root: str) -> Iterator[tuple[str, list[str], list[str], int]]:
    """(root, files, dirs, fd) top-down like os.walk; links are never descended into."""
    names = os.listdir(fd)  # directory order, as os.walk lists (a limit stops at the same entries)
    files: list[str] = []
    dirs: list[str] = []
    for name in names:
        try:
            is_dir = stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=True).st_mode)
        except OSError:
            is_dir = False
        (dirs if is_dir else files).append(name)
    yield root, files, dirs, fd
    for name in dirs:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue  # a link to a directory (not followed), or gone
        try:
            yield from _walk(child, os.path.join(root, name))
        finally:
            os.close(child)


def _contains(path: str, pattern: str | None, encoding: str | None, whole: bool) -> bool:
    if pattern is None:
        return True
    answer = call("fileio", {"op": "read", "path": path})
    if not answer["exists"]:
        return False
    text = base64.b64decode(answer["data"]).decode(encoding or "utf-8")
    if whole:
        return bool(re.search(pattern, text))
    return any(re.match(pattern, line) for line in text.splitlines(keepends=True))


def _any_kind(mode: int) -> bool:
    return True


_KIND_TESTS: dict[str, Callable[[int], bool]] = {
    "file": stat.S_ISREG,
    "directory": stat.S_ISDIR,
    "link": stat.S_ISLNK,
    "any": _any_kind,
}


def _within(value: float, bound: float | None) -> bool:
    """Ansible's age and size filters: a bound >= 0 is a minimum, a negative one a maximum."""
    return bound is None or (value >= bound if bound >= 0 else value <= -bound)


def _wanted(st: os.stat_result, args: dict[str, Any], now: float, path: str, name: str) -> bool:
    kind, mode = args["file_type"], st.st_mode
    if not _KIND_TESTS[kind](mode) or not _matches(name, args["patterns"], args["excludes"], args["use_regex"]):
        return False
    if not _within(now - getattr(st, "st_" + args["age_stamp"]), args["age"]):
        return False
    if stat.S_ISREG(mode) and kind in ("file", "any") and not _within(st.st_size, args["size"]):
        return False
    wanted = args["mode"]
    bits = stat.S_IMODE(mode)
    if wanted is not None and not (bits == wanted if args["exact_mode"] else bits & wanted):
        return False
    return kind != "file" or _contains(path, args["contains"], args["encoding"], args["read_whole_file"])


def _search(top: str, args: dict[str, Any], found: list[dict[str, Any]], skipped: dict[str, str], now: float) -> int:
    """Matches under ``top`` appended to ``found``; the number of entries looked at."""
    judged = call("fileio", {"op": "follow", "path": top})
    if judged["refusal"]:
        raise OSError(judged["refusal"])
    fd = os.open(judged["real"], _DIR_FLAGS)
    looked = 0
    base = top.rstrip("/") + "/"
    try:
        for root, files, dirs, dir_fd in _walk(fd, top):
            looked += len(files) + len(dirs)
            for name in files + dirs:
                path = os.path.normpath(os.path.join(root, name))
                if args["depth"] and path.count("/") - base.count("/") + 1 > args["depth"]:
                    dirs.clear()
                    continue
                if name.startswith(".") and not args["hidden"]:
                    continue
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError as exc:  # gone or unreadable since the listing: skipped, as Ansible does
                    skipped[path] = str(exc)
                    continue
                if _wanted(st, args, now, path, name):
                    found.append({"path": path, **statinfo(st)})
                if len(found) == args["limit"]:
                    return looked
            if not args["recurse"]:
                break
    finally:
        os.close(fd)
    return looked


def main(args: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    looked, now = 0, time.time()
    for top in args["paths"]:
        try:
            looked += _search(top, args, found, skipped, now)
        except (OSError, ValueError, re.error) as exc:
            skipped[top] = (
                str(exc) if not isinstance(exc, UnicodeDecodeError) else f"Failed to read a file under {top}: {exc}"
            )
        if len(found) == args["limit"]:
            break
    if args["get_checksum"]:
        regular = [entry["path"] for entry in found if entry["isreg"]]
        facts = call("file_facts", {"paths": regular, "checksum": args["checksum_algorithm"]})["paths"]
        for entry in found:
            if entry["isreg"]:
                entry["checksum"] = facts[entry["path"]].get("checksum")
    msg = "Not all paths examined, check warnings for details" if skipped else "All paths examined"
    if args["limit"] is not None and len(found) == args["limit"]:
        msg = "Limit of matches reached"
    return {"files": found, "examined": looked, "skipped_paths": skipped, "msg": msg}
