"""Remove leaked shared-memory segments, re-checking each one just before unlinking.

Args: ``path``, ``patterns``, ``min_age_s``, ``owners`` (as for the ``shm`` probe) and
``names`` [{name, dev, ino, ctime_ns}] chosen by the planner. The directory is inspected
again (open fds and maps of every process); a name is unlinked only if it is still a
regular file with the same device, inode and change time (checked again relative to the
opened directory just before the unlink), still unused, old enough and owned as asked.
The unlink is relative to a descriptor of the directory the ``shm`` probe found to be a
tmpfs (same device and inode), so nothing outside it is touched. Answer: ``removed`` [{name,
bytes}], ``skipped`` [{name, reason}], ``free_mib``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("shm",)

import os
import stat


def _safe_name(name: str) -> bool:
    return bool(name) and "/" not in name and name not in (".", "..") and "\0" not in name


def _identity(entry: dict[str, Any]) -> tuple[Any, Any, Any]:
    """Device, inode and change time: an inode number alone is reused at once on tmpfs."""
    return (entry["dev"], entry["ino"], entry.get("ctime_ns"))


def _still_there(dir_fd: int, name: str, want: dict[str, Any]) -> bool:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino, st.st_ctime_ns) == _identity(want)


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = args.get("path", "/dev/shm")
    now = call(
        "shm",
        {
            "path": path,
            "patterns": args.get("patterns") or [],
            "min_age_s": args.get("min_age_s", 0),
            "owners": args.get("owners") or [],
        },
    )
    current = {e["name"]: e for e in now["entries"]}
    removed, skipped = [], []
    dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        st = os.fstat(dir_fd)
        if [st.st_dev, st.st_ino] != now["dir"]:
            raise RuntimeError(f"{path} was replaced by another directory while it was inspected; nothing removed")
        for want in args.get("names", []):
            name = want["name"]
            entry = current.get(name)
            if not _safe_name(name):
                reason = "not a plain name in the directory"
            elif entry is None:
                reason = "gone"
            elif _identity(entry) != _identity(want) or not _still_there(dir_fd, name, want):
                reason = "replaced by another file since planning"
            else:
                reason = entry["reason"]
            if reason or entry is None:
                skipped.append({"name": name, "reason": reason or "gone"})
                continue
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                skipped.append({"name": name, "reason": "gone"})
                continue
            removed.append({"name": name, "bytes": entry["size"]})
        space = os.statvfs(dir_fd)
    finally:
        os.close(dir_fd)
    return {"removed": removed, "skipped": skipped, "free_mib": space.f_bavail * space.f_frsize // 2**20}
