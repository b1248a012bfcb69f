"""Keep or put back the pristine original of a model file (mutating).

args: {"op": "backup" | "restore", "path": str, "backup_suffix": str}
backup: when no backup exists yet, save the file next to itself: a symlink is kept as a
symlink to the same target (the blob it points at is never opened for writing), a
regular file is copied. An existing backup is never overwritten.
restore: atomically rename the backup over the file (the backup is consumed).
"""

from __future__ import annotations

from typing import Any

MUTATES = True

import os
import shutil
import tempfile


def _temp_name(directory: str) -> str:
    fd, tmp = tempfile.mkstemp(prefix=".rigger-", dir=directory)
    os.close(fd)
    os.unlink(tmp)
    return tmp


def _backup(path: str, backup: str) -> dict[str, bool]:
    if os.path.lexists(backup):
        return {"created": False}
    directory = os.path.dirname(os.path.abspath(path))
    tmp = _temp_name(directory)
    try:
        if os.path.islink(path):
            os.symlink(os.readlink(path), tmp)
        else:
            shutil.copy2(path, tmp)
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
        os.replace(tmp, backup)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return {"created": True}


def _restore(path: str, backup: str) -> dict[str, bool]:
    if not os.path.lexists(backup):
        return {"restored": False}
    os.replace(backup, path)
    return {"restored": True}


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = args["path"]
    backup = path + args.get("backup_suffix", ".rigger-orig")
    if args["op"] == "backup":
        return _backup(path, backup)
    if args["op"] == "restore":
        return _restore(path, backup)
    raise ValueError("unknown op " + repr(args["op"]))
