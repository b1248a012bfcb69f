"""Read, atomically write or back up a file on the host (local writes, the agent, become).

A write goes to ``.NAME.rigger-tmp-HEX`` beside the file (the name says whose temp file it
is), is fsynced and renamed over the file. A replaced file keeps its owner, group and
mode (``mode`` overrides the mode); a new file gets ``mode`` or 0666 less the umask.
Temp files of this file left by an interrupted write (owned by the writer or by the
file's owner) are removed by the next write. A
backup copy keeps the original's owner and group and is never more readable than it.
"""

from __future__ import annotations

from typing import Any

MUTATES = True

import base64
import contextlib
import errno
import os
import re
import secrets
import stat

TEMP_MARK = ".rigger-tmp-"
_NAME_BYTES = 180  # NAME_MAX is 255: the temp name adds a dot, the mark and 12 hex digits


def temp_prefix(name: str) -> str:
    """The start of every temp file name made for the file called ``name``."""
    short = name.encode("utf-8", "surrogateescape")[:_NAME_BYTES].decode("utf-8", "ignore")
    return "." + short + TEMP_MARK


def temp_name(name: str) -> str:
    return temp_prefix(name) + secrets.token_hex(6)


def is_temp_of(name: str, entry: str) -> bool:
    """Is ``entry`` a temp file name that a write of ``name`` made?"""
    return re.fullmatch(re.escape(temp_prefix(name)) + "[0-9a-f]{12}", entry) is not None


def _remove_stale_temps(dir_fd: int, name: str, owners: set[int]) -> None:
    """Temps of this file that a writer left: regular files owned by this user or by the
    file's owner (a temp gets that owner before the rename), never anybody else's."""
    with os.scandir(dir_fd) as entries:
        stale = [
            e.name
            for e in entries
            if is_temp_of(name, e.name)
            and e.is_file(follow_symlinks=False)
            and e.stat(follow_symlinks=False).st_uid in owners
        ]
    for entry in stale:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry, dir_fd=dir_fd)


def _keep_owner(fd: int, like: os.stat_result, required: bool) -> bool:
    """Give the temp file the owner and group of ``like``; True when it has them."""
    st = os.fstat(fd)
    if (st.st_uid, st.st_gid) == (like.st_uid, like.st_gid):
        return True
    try:
        os.fchown(fd, like.st_uid, like.st_gid)
    except PermissionError:
        if required:
            raise PermissionError(
                errno.EPERM,
                f"cannot keep the owner {like.st_uid}:{like.st_gid} as uid {os.geteuid()} "
                "(become: true writes it as root)",
            ) from None
        return False
    return True


def write_atomic(path: str, data: bytes, mode: int | None = None, like: os.stat_result | None = None) -> None:
    """Write ``data`` to ``path`` atomically. ``like``: a stat whose owner (and, without
    ``mode``, mode) the file gets instead of the current file's (used for backups)."""
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        existing = None
        with contextlib.suppress(FileNotFoundError):
            existing = os.stat(name, dir_fd=dir_fd)
        _remove_stale_temps(dir_fd, name, {os.geteuid()} | ({existing.st_uid} if existing else set()))
        current = like or existing
        tmp = temp_name(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o666 if mode is None and current is None else 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                if current is not None:
                    _keep_owner(handle.fileno(), current, required=like is None)
                    mode = stat.S_IMODE(current.st_mode) if mode is None else mode
                if mode is not None:
                    os.fchmod(handle.fileno(), mode)
                os.fsync(handle.fileno())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def backup_copy(path: str, backup: str) -> None:
    """Copy ``path`` to ``backup``: same owner and group, mode no wider than the original's
    permission bits (only the owner's when the owner cannot be kept)."""
    with open(path, "rb") as handle:
        original = os.fstat(handle.fileno())
        data = handle.read()
    mode = stat.S_IMODE(original.st_mode) & 0o777
    if os.geteuid() != 0 and (original.st_uid, original.st_gid) != (os.geteuid(), os.getegid()):
        mode &= 0o700
    write_atomic(backup, data, mode, like=original)


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = args["path"]
    if args["op"] == "read":
        try:
            with open(path, "rb") as handle:
                return {"exists": True, "data": base64.b64encode(handle.read()).decode()}
        except FileNotFoundError:
            return {"exists": False, "data": None}
    if args["op"] == "backup":
        backup_copy(path, args["backup"])
        return {"backup": args["backup"]}
    write_atomic(path, base64.b64decode(args["data"]), args.get("mode"))
    return {"written": True}
