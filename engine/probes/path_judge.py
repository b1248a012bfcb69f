"""Judge a path for removal by what it is on the host, never by how it is spelled.

Args: ``path`` (absolute), ``protected`` (also answer the protected identities). The
path is split into its parent directory, resolved on the host (symlinks and ``..`` as
the kernel follows them), and its final name, taken without following it: trailing
slashes are dropped, so ``link/`` is the link itself. A final ``.`` or ``..`` is refused
(it names a directory through another one). The object is compared by device and inode
with the protected set: ``/``, every directory directly under it, the system
directories below, every user's home directory and every mount point. A directory is
walked (never following symlinks) and refused when it holds a protected object,
anything on another filesystem, or is nested deeper than MAX_DEPTH. Answer: ``exists``, ``type``, ``resolved`` (the real
path), ``parent``, ``name``, ``dev``, ``ino``, ``size`` (bytes, the whole tree),
``refusal`` (why it must not be removed, or None) and, when asked, ``protected``
[[dev, ino], ...].
"""

from __future__ import annotations

import os
import pwd
import stat
from typing import Any

SYSTEM_DIRS = (
    "/usr/bin",
    "/usr/include",
    "/usr/lib",
    "/usr/lib32",
    "/usr/lib64",
    "/usr/libexec",
    "/usr/local",
    "/usr/sbin",
    "/usr/share",
    "/usr/src",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/spool",
)
MAX_DEPTH = 400  # the removal holds one directory fd per level and recurses


def _mount_points() -> list[str]:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    points = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:
            points.append(_unescape(fields[4]))
    return points


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    out, index = [], 0
    while index < len(field):
        chunk = field[index : index + 4]
        if len(chunk) == 4 and chunk[0] == "\\" and chunk[1:].isdigit():
            out.append(chr(int(chunk[1:], 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)


def protected_set() -> dict[tuple[int, int], str]:
    """{(dev, ino): description} of everything that is never removed."""
    found: dict[tuple[int, int], str] = {}

    def add(path: str, why: str, dirs_only: bool = True) -> None:
        """The object and, when the name is a symlink (merged-/usr /bin), the link too."""
        try:
            st, link = os.stat(path), os.lstat(path)
        except (OSError, ValueError):
            return
        if dirs_only and not stat.S_ISDIR(st.st_mode):
            return
        found.setdefault((st.st_dev, st.st_ino), why)
        found.setdefault((link.st_dev, link.st_ino), why)

    add("/", "the root directory /")
    with os.scandir("/") as entries:
        for entry in entries:
            add(entry.path, f"the top-level system directory {entry.path}")
    for path in SYSTEM_DIRS:
        add(path, f"the system directory {path}")
    for user in pwd.getpwall():
        add(user.pw_dir, f"the home directory of {user.pw_name} ({user.pw_dir})")
    home = os.path.expanduser("~")
    add(home, f"the home directory {home}")
    for point in _mount_points():
        add(point, f"the mount point {point}", dirs_only=False)
    return found


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def split_path(path: str) -> tuple[str, str]:
    """(parent as given, final name), or raise ValueError saying why the path is refused."""
    if "\0" in path:
        raise ValueError(f"refusing {path!r}: it contains a NUL byte")
    if not path.startswith("/"):
        raise ValueError(f"refusing a relative path: {path!r}")
    stripped = path.rstrip("/")
    if not stripped:
        raise ValueError(f"refusing to remove {path!r}: it is the root directory /")
    parent, _, name = stripped.rpartition("/")
    if name in (".", ".."):
        raise ValueError(f"refusing {path!r}: it ends in {name!r}; name the directory itself")
    return parent or "/", name


def _walk_refusal(top: str, top_dev: int, protected: dict[tuple[int, int], str]) -> tuple[int, str | None]:
    """(bytes in the tree, why it must not be removed or None), never following symlinks."""
    total, pending = 0, [(top, 0)]
    while pending:
        directory, depth = pending.pop()
        if depth > MAX_DEPTH:
            return total, f"it is nested more than {MAX_DEPTH} directories deep ({directory[:200]}...)"
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:
            return total, f"cannot read {directory}: {exc.strerror}"
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            why = protected.get((st.st_dev, st.st_ino))
            if why:
                return total, f"it contains {why}"
            if st.st_dev != top_dev:
                return total, f"it contains {entry.path}, on another filesystem"
            total += st.st_size
            if stat.S_ISDIR(st.st_mode):
                pending.append((entry.path, depth + 1))
    return total, None


def _same_directory(spelled: str, real: str) -> bool:
    """Does the kernel reach the same directory through the spelling as through the real
    path? Not through /proc/PID/root or /proc/PID/cwd (another mount namespace)."""
    a, b = os.stat(spelled), os.stat(real)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def judge(path: str, with_protected: bool = False) -> dict[str, Any]:
    parent, name = split_path(path)
    real_parent = os.path.realpath(parent)
    resolved = os.path.join(real_parent, name)
    answer: dict[str, Any] = {"path": path, "parent": real_parent, "name": name, "resolved": resolved, "refusal": None}
    try:
        st = os.lstat(resolved)
        if not _same_directory(parent, real_parent):
            answer["refusal"] = f"refusing {path!r}: its directory is not {real_parent} (a /proc magic link)"
            return {**answer, "exists": None}
    except (FileNotFoundError, NotADirectoryError):
        return {**answer, "exists": False, "type": None, "size": 0}
    protected = protected_set()
    kind = _kind(st.st_mode)
    answer.update(exists=True, type=kind, dev=st.st_dev, ino=st.st_ino, size=st.st_size)
    why = protected.get((st.st_dev, st.st_ino))
    if why:
        answer["refusal"] = f"refusing to remove {path!r}: it is {why}"
    elif kind == "dir":
        size, inside = _walk_refusal(resolved, st.st_dev, protected)
        answer["size"] += size
        if inside:
            answer["refusal"] = f"refusing to remove {path!r} ({resolved}): {inside}"
    if with_protected:
        answer["protected"] = [list(key) for key in protected]
    return answer


def main(args: dict[str, Any]) -> dict[str, Any]:
    try:
        return judge(args["path"], bool(args.get("protected")))
    except ValueError as exc:
        return {"path": args["path"], "exists": None, "refusal": str(exc)}
