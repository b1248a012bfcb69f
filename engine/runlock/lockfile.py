"""Host side of the run lock: a file holding who runs rigger here, guarded by flock(2).

This file's text runs ON the host, inside the holder process (``holders.py``) or the
host's remote python. ``acquire`` takes the lock without waiting and keeps the
descriptor open: the lock lives exactly as long as that process. A record in an
unlocked file is a run that died without releasing: it is reported as ``previous`` and
replaced. Stdlib only.

The file is opened by fileio's state-file rules (engine/probes/fileio.py, whose source
``lockfile_source()`` sends along as FILEIO_SOURCE): its directory walked without another
user's links, made 0700 when missing and refused when another user's or open to others'
writes (unless sticky, like a shared lock directory); the file itself never through a
link, non-blocking (a FIFO there is refused, never waited on), a regular file of this
user that is not another owner's hard link, so truncating it can only ever clear the lock.
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


def _fileio() -> Any:
    """The state-file primitive: from the source sent with this file on a host, else the
    engine's own module (this file imported on the controller, in tests)."""
    source = globals().get("FILEIO_SOURCE")
    if source is None:
        from engine.probes import fileio

        return fileio
    namespace: dict[str, Any] = {"__name__": "rigger_runlock_fileio"}
    exec(compile(source, "<fileio>", "exec"), namespace)
    return type("fileio", (), {name: staticmethod(value) for name, value in namespace.items() if callable(value)})


def _open(path: str) -> tuple[str, int]:
    # {uid}: one lock per login user in a shared state directory ($RIGGER_STATE_DIR)
    path = os.path.abspath(os.path.expanduser(path).replace("{uid}", str(os.getuid())))
    fileio = _fileio()
    dir_fd, _ = fileio.open_state_dir(os.path.dirname(path))
    try:
        return path, fileio.open_state_file(dir_fd, os.path.basename(path), os.O_RDWR | os.O_CREAT, path)
    finally:
        os.close(dir_fd)


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


def still_named(path: str, fd: int) -> bool:
    """Whether ``path`` still names the file ``fd`` has open (device and inode): a lock taken
    on a file that was removed (scripts/clean.sh, by hand) after we opened it guards nothing,
    since the next run creates a new file at the path and locks that one."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _locked(path: str) -> tuple[str, int, bool]:
    """Open and try to lock the file at ``path``, again when it was replaced meanwhile."""
    for _ in range(5):
        path, fd = _open(path)
        if not _try_lock(fd):
            return path, fd, False
        if still_named(path, fd):
            return path, fd, True
        os.close(fd)
    raise OSError(errno.EAGAIN, f"{path} keeps being replaced while rigger locks it")


def _lock_once_gone(fd: int, pid: int, timeout_s: float) -> bool:
    """Take the lock as soon as ``pid`` (the holder of a run whose controller is dead) has
    let it go: it exits as soon as it reads EOF, so this waits for that event, bounded by
    the staleness limit. False when it still holds the lock then."""
    deadline = time.monotonic() + timeout_s
    while not _try_lock(fd):
        if not _alive(pid):
            return _try_lock(fd)
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def acquire(args: dict[str, Any]) -> dict[str, Any]:
    try:
        path, fd, taken = _locked(args.get("path") or DEFAULT_PATH)
    except OSError as exc:  # the state-file rules refused it, or the OS did: a message, never a traceback
        return {"acquired": False, "path": args.get("path") or DEFAULT_PATH, "refused": str(exc)}
    dying = args.get("dying_holder_pid")
    if not taken and dying and (_read(fd) or {}).get("holder_pid") == dying:
        taken = _lock_once_gone(fd, int(dying), float(args.get("stale_after_s", 60))) and still_named(path, fd)
    if not taken:
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
