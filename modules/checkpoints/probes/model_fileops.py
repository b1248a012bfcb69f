"""Keep or put back the pristine original of a model file (mutating).

args: {"op": "backup" | "restore", "path": str, "backup_suffix": str}
backup: when no backup exists yet, save the file next to itself: a symlink is kept as a
symlink to the same target (the blob it points at is never opened for writing), a
regular file is copied with its owner and group, never more readable than it. An
existing backup is never overwritten.
restore: atomically rename the backup over the file (the backup is consumed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("fileio",)

import os


def _backup(path: str, backup: str) -> dict[str, bool]:
    if os.path.lexists(backup):
        return {"created": False}
    if not os.path.islink(path):
        call("fileio", {"op": "backup", "path": path, "backup": backup})
        return {"created": True}
    # the link is copied as a link (a random temp renamed into place by fileio)
    call("fileio", {"op": "symlink", "path": backup, "src": os.readlink(path), "identity": None})
    return {"created": True}


def _restore(path: str, backup: str) -> dict[str, bool]:
    renamed = call("fileio", {"op": "rename", "path": backup, "new_name": os.path.basename(path)})["renamed"]
    return {"restored": bool(renamed)}


def main(args: dict[str, Any]) -> dict[str, Any]:
    path = args["path"]
    backup = path + args.get("backup_suffix", ".rigger-orig")
    if args["op"] == "backup":
        return _backup(path, backup)
    if args["op"] == "restore":
        return _restore(path, backup)
    raise ValueError("unknown op " + repr(args["op"]))
