"""Read or atomically write a file on the host; used when a task runs with become."""

from __future__ import annotations

from typing import Any

MUTATES = True

import base64
import os
import tempfile


def write_atomic(path: str, data: bytes, mode: int | None = None) -> None:
    """Temp file in the same directory, fsync, rename, fsync the directory."""
    directory = os.path.dirname(os.path.abspath(path))
    if mode is None and os.path.exists(path):
        mode = os.stat(path).st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(prefix=".rigger-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644 if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = args["path"]
    if args["op"] == "read":
        try:
            with open(path, "rb") as handle:
                return {"exists": True, "data": base64.b64encode(handle.read()).decode()}
        except FileNotFoundError:
            return {"exists": False, "data": None}
    write_atomic(path, base64.b64decode(args["data"]), args.get("mode"))
    return {"written": True}
