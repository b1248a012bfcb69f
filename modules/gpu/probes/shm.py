"""Read-only view of a shared-memory directory (/dev/shm): entries and who uses them.

Args: ``path`` (default /dev/shm), ``patterns`` (shell globs on the name), ``min_age_s``,
``owners`` (user names or uids; empty = anyone). The directory is opened on the host
(the kernel resolves the path) and must be a tmpfs (statfs magic; mountinfo by device
where ctypes is missing): any other directory is refused. Every entry directly in it is
looked at without following symlinks; subdirectories are never entered. An entry is "in
use" when any live process has it open (/proc/PID/fd) or mapped (/proc/PID/maps),
compared by device and inode, not name; where rigger cannot see every process (it is not
in the host's PID namespace, or /proc shows another one) no entry is proven unused.
Answer: ``entries`` [{name, type, size, uid, user, age_s, dev, ino, in_use_by, candidate,
reason}], ``path``, ``resolved`` (its real path), ``dir`` [dev, ino], ``free_mib``,
``total_mib``, ``unreadable_pids`` (processes whose fds/maps could not be read: as root
they are reported only; otherwise a segment one of them could have opened is not proven
unused).
"""

from __future__ import annotations

import fnmatch
import os
import pwd
import stat
import time
from typing import Any

TMPFS_MAGIC = 0x01021994
# The kernel's initial (host) PID namespace always has this inode (PROC_PID_INIT_INO).
HOST_PID_NS_INO = 0xEFFFFFFC


def pid_namespace_blind_spot() -> str | None:
    """Why this process cannot see every process that might map a segment, or None.

    In a PID namespace that is not the host's (a container), processes of the parent
    namespace, and of sibling containers sharing this tmpfs, are invisible in /proc: no
    segment can be proven unused. The same when /proc shows another namespace than ours.
    """
    try:
        own = os.stat("/proc/self/ns/pid")
    except OSError as exc:
        return f"cannot read its own PID namespace ({exc.strerror})"
    if own.st_ino != HOST_PID_NS_INO:
        return f"rigger runs in a PID namespace that is not the host's (pid:[{own.st_ino}])"
    try:
        proc_root = os.readlink("/proc/1/ns/pid")
    except OSError:
        return None  # PID 1 hidden from us (a sandbox's supervisor): we are still the host's
    if proc_root != f"pid:[{own.st_ino}]":
        return f"/proc shows another PID namespace ({proc_root}) than rigger's"
    return None


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
    entry: dict[str, Any],
    patterns: list[str],
    min_age_s: float,
    owners: list[str],
    unreadable: list[dict[str, Any]],
    blind_spot: str | None,
) -> str | None:
    if not any(fnmatch.fnmatchcase(entry["name"], p) for p in patterns):
        return "does not match patterns"
    if entry["type"] != "file":
        return f"not a regular file ({entry['type']})"
    if entry["in_use_by"]:
        return "in use by pid " + ", ".join(str(p) for p in entry["in_use_by"])
    if blind_spot:
        return f"cannot prove it unused: {blind_spot}; processes rigger cannot see may map it"
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


def _statfs_type(fd: int) -> int:
    """The filesystem magic of an open fd (statfs f_type, the struct's first field)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(512)
    if libc.fstatfs(fd, buf) != 0:
        raise OSError(ctypes.get_errno(), "fstatfs failed")
    return ctypes.c_long.from_buffer(buf).value


def _mountinfo_type(fd: int) -> str | None:
    dev = os.fstat(fd).st_dev
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields, _, tail = line.partition(" - ")
            if fields.split(" ")[2:3] == [wanted]:
                return tail.split(" ")[0]
    return None


def is_tmpfs(fd: int) -> bool:
    try:
        return _statfs_type(fd) == TMPFS_MAGIC
    except (ImportError, AttributeError, OSError):
        return _mountinfo_type(fd) == "tmpfs"


def open_shm_dir(path: str) -> tuple[str, int]:
    """An fd of the directory as the kernel resolves ``path`` (a /proc/PID/root path stays
    in that process's mount namespace), refused unless it is a tmpfs; and its real path."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        resolved = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        resolved = os.path.realpath(path)
    if not is_tmpfs(fd):
        os.close(fd)
        raise ValueError(f"{path} ({resolved}) is not a tmpfs: only a shared-memory directory is cleaned")
    return resolved, fd


def _entries(dir_fd: int) -> list[dict[str, Any]]:
    now = time.time()
    users: dict[int, str] = {}
    out = []
    for item in os.scandir(dir_fd):
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
    dir_fd: int, patterns: list[str], min_age_s: float, owners: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    entries = _entries(dir_fd)
    in_use, unreadable = users_of({(e["dev"], e["ino"]) for e in entries if e["type"] == "file"})
    blind_spot = pid_namespace_blind_spot()
    for entry in entries:
        entry["in_use_by"] = sorted(in_use.get((entry["dev"], entry["ino"]), []))
        entry["reason"] = _classify(entry, patterns, min_age_s, owners, unreadable, blind_spot)
        entry["candidate"] = entry["reason"] is None
    return entries, unreadable


def space(dir_fd: int) -> dict[str, int]:
    st = os.statvfs(dir_fd)
    return {
        "free_mib": st.f_bavail * st.f_frsize // 2**20,
        "total_mib": st.f_blocks * st.f_frsize // 2**20,
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = args.get("path", "/dev/shm")
    resolved, dir_fd = open_shm_dir(path)
    try:
        st = os.fstat(dir_fd)
        entries, unreadable = inspect(
            dir_fd,
            list(args.get("patterns") or []),
            float(args.get("min_age_s", 0)),
            [str(o) for o in args.get("owners") or []],
        )
        return {
            "path": path,
            "resolved": resolved,
            "dir": [st.st_dev, st.st_ino],
            "entries": entries,
            "unreadable_pids": unreadable,
            **space(dir_fd),
        }
    finally:
        os.close(dir_fd)
