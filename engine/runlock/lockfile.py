"""Host side of the run lock: a file holding who runs rigger here, guarded by flock(2).

This file's text runs ON the host, inside the holder process (``holders.py``) or the
host's remote python. ``acquire`` takes the lock without waiting and keeps the
descriptor open: the lock lives exactly as long as that process. A record in an
unlocked file is a run that died without releasing: it is reported as ``previous`` and
replaced. Stdlib only.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from typing import Any

DEFAULT_PATH = "~/.cache/rigger/run.lock"


def _open(path: str) -> tuple[str, int]:
    path = os.path.expanduser(path)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return path, fd


def _read(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        raw += chunk
    try:
        return json.loads(raw.decode("utf-8")) if raw.strip() else None
    except ValueError:
        return {"owner": "unreadable lock record", "raw": raw[:200].decode("utf-8", "replace")}


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise


def _alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError, TypeError):
        return False
    except PermissionError:
        return True
    return True


def _settled_holder(fd: int, wait_s: float = 1.0) -> dict[str, Any] | None:
    """The holder's record once written: the winner of a flock race writes its record just
    after taking the lock, so a record that is empty or names a dead process is re-read."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = _read(fd)
        if (holder and _alive(holder.get("holder_pid"))) or time.monotonic() >= deadline:
            return holder
        time.sleep(0.02)


def acquire(args: dict[str, Any]) -> dict[str, Any]:
    path, fd = _open(args.get("path") or DEFAULT_PATH)
    if not _try_lock(fd):
        holder = _settled_holder(fd)
        os.close(fd)
        return {"acquired": False, "path": path, "holder": holder}
    previous = _read(fd)
    record = dict(args.get("record") or {})
    record.update({"holder_pid": os.getpid(), "host": socket.gethostname(), "user": _user()})
    record.setdefault("started_at", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, json.dumps(record, sort_keys=True).encode("utf-8") + b"\n")
    os.fsync(fd)
    return {"acquired": True, "path": path, "previous": previous, "record": record, "fd": fd}


def release(fd: int) -> None:
    """Clear the record (a clean end leaves no trace) and drop the lock."""
    os.ftruncate(fd, 0)
    os.fsync(fd)
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid())
