"""Receive a model file from a peer host in chunks, and keep it only when its hash matches.

args: {"op": "begin" | "append" | "finish", "path": str (the file's final path), ...}
The bytes go to a part file beside the final name (``.NAME.rigger-spread``), opened by
the guarded primitive (fileio ``mkdir`` for the directories, ``open_append``: never
through a symlink; anything else found at the part's name, a FIFO or a file with another
hard link, is removed by ``remove_path`` first, never opened) and renamed over the final
name by fileio ``rename`` only after the whole part hashed to the hub's value. A file at
the final name is therefore either the old one or a verified one, never a partial or
unverified copy.
begin: {"size"}: the directories made; answers ``offset``, the bytes a part left by an
interrupted copy already holds (a part longer than ``size`` is emptied), to resume from.
append: {"offset", "data" (base64)}: refused unless the part holds exactly ``offset``
bytes (two writers, or a part changed underneath), then appended.
finish: {"expected": {"size", "sha256", "blob_id"}}: the part fsynced and hashed through
the descriptor that wrote it (sha256 for LFS files, the git blob id for the rest); a match
is renamed into place (``status: ok``), a mismatch empties the part (``status: sha256`` or
``size``, with ``detail``) and leaves the final name as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("fileio", "remove_path")

import base64
import hashlib
import os
import posixpath
import stat

PART_SUFFIX = ".rigger-spread"
CHUNK = 8 * 2**20
MODE = 0o644


def part_path(path: str) -> str:
    directory, name = posixpath.split(path)
    return posixpath.join(directory, "." + name + PART_SUFFIX)


def _ours(st: os.stat_result) -> bool:
    """A part this probe made: a regular file with no other name (a hard link planted at
    the part's name would have the copy appended to the file it names)."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1


def _open_part(path: str) -> int:
    part = part_path(path)
    try:
        planted = not _ours(os.lstat(part))
    except FileNotFoundError:
        planted = False
    if planted:  # a FIFO would block the open, a link lead elsewhere: removed, never opened
        call("remove_path", {"path": part, "files_only": True})
    fd = int(call("fileio", {"op": "open_append", "path": part, "mode": MODE})["fd"])
    if not _ours(os.fstat(fd)):
        os.close(fd)
        raise PermissionError(f"refusing {part}: it is not a plain file of its own (replaced while opened)")
    return fd


def _begin(path: str, size: int) -> dict[str, Any]:
    call("fileio", {"op": "mkdir", "path": posixpath.dirname(path)})
    fd = _open_part(path)
    try:
        held = os.fstat(fd).st_size
        if held > size:
            os.ftruncate(fd, 0)
            held = 0
    finally:
        os.close(fd)
    return {"offset": held}


def _append(path: str, offset: int, data: bytes) -> dict[str, Any]:
    fd = _open_part(path)
    try:
        held = os.fstat(fd).st_size
        if held != offset:
            raise ValueError(f"{part_path(path)} holds {held} bytes, not {offset}: another writer? start again")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return {"offset": offset + len(data)}


def _digest(fd: int, git_blob: bool, size: int) -> str:
    # read back through the same open file (its /proc/self/fd link names this inode, not a path)
    digest = hashlib.sha1(b"blob %d\0" % size) if git_blob else hashlib.sha256()
    reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.fstat(reader)[1:3] != os.fstat(fd)[1:3]:
            raise PermissionError("the part file read back is not the one written")
        for chunk in iter(lambda: os.read(reader, CHUNK), b""):
            digest.update(chunk)
    finally:
        os.close(reader)
    return digest.hexdigest()


def _mismatch(expected: dict[str, Any], fd: int, size: int) -> dict[str, Any] | None:
    if size != expected["size"]:
        return {"status": "size", "detail": f"{size} bytes, expected {expected['size']}"}
    if expected.get("sha256"):
        got = _digest(fd, False, size)
        if got != expected["sha256"]:
            return {"status": "sha256", "detail": f"sha256 {got}, expected {expected['sha256']}"}
    elif expected.get("blob_id"):
        got = _digest(fd, True, size)
        if got != expected["blob_id"]:
            return {"status": "sha256", "detail": f"git blob {got}, expected {expected['blob_id']}"}
    else:
        return {"status": "sha256", "detail": "the listing has no hash for this file: a peer copy is not trusted"}
    return None


def _finish(path: str, expected: dict[str, Any]) -> dict[str, Any]:
    fd = _open_part(path)
    try:
        os.fsync(fd)
        problem = _mismatch(expected, fd, os.fstat(fd).st_size)
        if problem is not None:
            os.ftruncate(fd, 0)
            return problem
    finally:
        os.close(fd)
    call("fileio", {"op": "rename", "path": part_path(path), "new_name": posixpath.basename(path)})
    return {"status": "ok"}


def main(args: dict[str, Any]) -> dict[str, Any]:
    op, path = args["op"], args["path"]
    if op == "begin":
        return _begin(path, int(args["size"]))
    if op == "append":
        return _append(path, int(args["offset"]), base64.b64decode(args["data"]))
    if op == "finish":
        return _finish(path, args["expected"])
    raise ValueError(f"model_peer_write: unknown op {op!r}")
