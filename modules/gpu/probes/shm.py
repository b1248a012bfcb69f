"""Read-only view of a shared-memory directory (/dev/shm): entries and who uses them.

Args: ``path`` (default /dev/shm), ``patterns`` (shell globs on the name), ``min_age_s``,
``owners`` (user names or uids; empty = anyone). Every entry directly in ``path`` is
looked at without following symlinks. An entry is "in use" when any live process has it
open (/proc/PID/fd) or mapped (/proc/PID/maps), compared by device and inode, not name.
Answer: ``entries`` [{name, type, size, uid, user, age_s, dev, ino, in_use_by, candidate,
reason}], ``free_mib``, ``total_mib``, ``unreadable_pids`` (processes whose fds/maps could
not be read: as root they are reported only; otherwise a segment one of them could
have opened is not proven unused).
"""

from __future__ import annotations

import fnmatch
import os
import pwd
import stat
import time
from typing import Any


def _type(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    return "other"


def _maps_keys(pid: int) -> set[tuple[int, int]]:
    """(device, inode) pairs of the files mapped by pid."""
    keys = set()
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            parts = line.split(None, 5)
            if len(parts) < 5 or parts[4] == "0":
                continue
            major, _, minor = parts[3].partition(":")
            keys.add((os.makedev(int(major, 16), int(minor, 16)), int(parts[4])))
    return keys


def _fd_keys(pid: int) -> set[tuple[int, int]]:
    keys = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            st = os.stat(f"{fd_dir}/{fd}")
        except OSError:
            continue
        keys.add((st.st_dev, st.st_ino))
    return keys


def _proc_uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _could_open(uid: int | None, entry: dict[str, Any]) -> bool:
    """Could a process of this uid have opened the segment (so mapped it)?"""
    mode = entry["mode"]
    return uid == 0 or uid == entry["uid"] or bool(mode & 0o066)


def blockers(entry: dict[str, Any], unreadable: list[dict[str, Any]]) -> list[int]:
    """Uninspectable processes that might use the entry.

    As root every ordinary process is readable; one that is not is hidden by the kernel
    from this container (a sandbox supervisor, another user namespace) and cannot be
    using a file in our /dev/shm through our mount, so it is reported, not counted.
    Not as root, another user's process counts when it could have opened the file.
    """
    if os.geteuid() == 0:
        return []
    return [u["pid"] for u in unreadable if _could_open(u["uid"], entry)]


def users_of(wanted: set[tuple[int, int]]) -> tuple[dict[tuple[int, int], list[int]], list[dict[str, Any]]]:
    """{(dev, ino): [pids]} for the wanted keys, plus pids that could not be inspected."""
    found: dict[tuple[int, int], list[int]] = {key: [] for key in wanted}
    unreadable = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            keys = _fd_keys(pid) | _maps_keys(pid)
        except FileNotFoundError:
            continue  # exited while we looked
        except PermissionError:
            uid = _proc_uid(pid)
            if uid is not None:
                unreadable.append({"pid": pid, "uid": uid})
            continue
        except OSError:
            continue
        for key in keys & found.keys():
            found[key].append(pid)
    return found, unreadable


def _user(uid: int, cache: dict[int, str]) -> str:
    if uid not in cache:
        try:
            cache[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            cache[uid] = str(uid)
    return cache[uid]


def _owner_ok(entry: dict[str, Any], owners: list[str]) -> bool:
    return not owners or entry["user"] in owners or str(entry["uid"]) in owners


def _classify(
    entry: dict[str, Any], patterns: list[str], min_age_s: float, owners: list[str], unreadable: list[dict[str, Any]]
) -> str | None:
    if not any(fnmatch.fnmatchcase(entry["name"], p) for p in patterns):
        return "does not match patterns"
    if entry["type"] != "file":
        return f"not a regular file ({entry['type']})"
    if entry["in_use_by"]:
        return "in use by pid " + ", ".join(str(p) for p in entry["in_use_by"])
    blocking = blockers(entry, unreadable)
    if blocking:
        return (
            f"cannot prove it unused: {len(blocking)} processes of other users could "
            "use it and cannot be inspected (run with become)"
        )
    if entry["age_s"] < min_age_s:
        return f"too young ({entry['age_s']:.0f}s < min_age_s {min_age_s:g})"
    if not _owner_ok(entry, owners):
        return f"owned by {entry['user']}, not one of owners"
    return None


def _entries(path: str) -> list[dict[str, Any]]:
    now = time.time()
    users: dict[int, str] = {}
    out = []
    for item in os.scandir(path):
        st = item.stat(follow_symlinks=False)
        out.append(
            {
                "name": item.name,
                "type": _type(st.st_mode),
                "size": st.st_blocks * 512 if stat.S_ISREG(st.st_mode) else 0,
                "apparent_size": st.st_size,
                "uid": st.st_uid,
                "mode": stat.S_IMODE(st.st_mode),
                "user": _user(st.st_uid, users),
                "age_s": max(0.0, now - st.st_mtime),
                "dev": st.st_dev,
                "ino": st.st_ino,
                "ctime_ns": st.st_ctime_ns,
            }
        )
    return out


def inspect(
    path: str, patterns: list[str], min_age_s: float, owners: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    entries = _entries(path)
    in_use, unreadable = users_of({(e["dev"], e["ino"]) for e in entries if e["type"] == "file"})
    for entry in entries:
        entry["in_use_by"] = sorted(in_use.get((entry["dev"], entry["ino"]), []))
        entry["reason"] = _classify(entry, patterns, min_age_s, owners, unreadable)
        entry["candidate"] = entry["reason"] is None
    return entries, unreadable


def space(path: str) -> dict[str, int]:
    st = os.statvfs(path)
    return {
        "free_mib": st.f_bavail * st.f_frsize // 2**20,
        "total_mib": st.f_blocks * st.f_frsize // 2**20,
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = args.get("path", "/dev/shm")
    entries, unreadable = inspect(
        path,
        list(args.get("patterns") or []),
        float(args.get("min_age_s", 0)),
        [str(o) for o in args.get("owners") or []],
    )
    return {"path": path, "entries": entries, "unreadable_pids": unreadable, **space(path)}
