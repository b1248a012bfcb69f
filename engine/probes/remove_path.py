"""Remove exactly the object that was judged: a file, a symlink (never its target) or a tree.

Args: ``path`` and the ``dev``/``ino`` the planner judged, or ``files_only`` (a clean-up of
a file the caller made: whatever is there now, a file or a link, never a directory). This
is the one place rigger deletes anything on a host. The path is judged again
(``path_judge``); then its resolved parent is opened by the one path walk (``fileio``,
the delete's link rule: no link another user controls), and everything after works
relative to open directory descriptors: the object must still have the judged device and
inode, a tree is walked without following symlinks, and any protected object or other
filesystem met on the way stops the removal.
Answer: ``removed`` (the real path) or ``gone`` when it no longer exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("path_judge", "fileio")

import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    pass


def _remove_tree(
    parent_fd: int, name: str, expected: os.stat_result, label: str, protected: set[tuple[int, ...]]
) -> None:
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (expected.st_dev, expected.st_ino):
            raise Refused(f"{label} was replaced while being removed; stopped")
        with os.scandir(fd) as listing:
            entries = list(listing)
        for entry in entries:
            child = entry.stat(follow_symlinks=False)
            where = f"{label}/{entry.name}"
            if (child.st_dev, child.st_ino) in protected:
                raise Refused(f"{where} is protected; stopped")
            if child.st_dev != st.st_dev:
                raise Refused(f"{where} is on another filesystem; stopped")
            if stat.S_ISDIR(child.st_mode):
                _remove_tree(fd, entry.name, child, where, protected)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def main(args: dict[str, Any]) -> dict[str, Any]:
    judged = call("path_judge", {"path": args["path"], "protected": True})
    if judged["refusal"]:
        raise Refused(judged["refusal"])
    if not judged["exists"]:
        return {"gone": True, "removed": None}
    resolved = judged["resolved"]
    if args.get("files_only"):
        if judged["type"] == "dir":
            raise Refused(f"refusing to remove {resolved}: it is a directory, and only a file was expected")
        planned = (judged["dev"], judged["ino"])
    else:
        planned = (args["dev"], args["ino"])
    if (judged["dev"], judged["ino"]) != planned:
        raise Refused(f"{resolved} is not the object that was planned (replaced since); nothing removed")
    protected = {tuple(key) for key in judged["protected"]}
    parent_fd = int(call("fileio", {"op": "open_delete_dir", "path": judged["parent"]})["fd"])
    try:
        st = os.stat(judged["name"], dir_fd=parent_fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != planned:
            raise Refused(f"{resolved} was replaced since it was judged; nothing removed")
        if stat.S_ISDIR(st.st_mode):
            _remove_tree(parent_fd, judged["name"], st, resolved, protected)
        else:
            os.unlink(judged["name"], dir_fd=parent_fd)
    finally:
        os.close(parent_fd)
    return {"gone": False, "removed": resolved}
