"""Judge a path for removal by what it is on the host, never by how it is spelled.

Args: ``path`` (absolute), ``protected`` (also answer the protected identities). The
path is split into its parent directory and its final name, taken without following it:
trailing slashes are dropped, so ``link/`` is the link itself. A final ``.`` or ``..`` is
refused (it names a directory through another one). The parent is walked by the one path
walk (``fileio``: component by component from ``/``, O_NOFOLLOW), where a delete refuses
any symlink another user controls and any link in /proc (``/proc/PID/cwd``, ``root``):
root never removes what a user's link leads to. The object is compared by device and
inode with the protected set: ``/``, every entry directly under it, the system
directories below, every user's home and every mount point, whatever their type; a file
(anything but a directory) directly in a system directory (``/``, ``/boot``, ``/etc``,
SYSTEM_DIRS and the top-level ones) is refused too. A directory is walked (never following symlinks) and refused
when it holds a protected object, anything on another filesystem, or is nested deeper
than MAX_DEPTH. Answer: ``exists``, ``type``, ``resolved`` (the real
path), ``parent``, ``name``, ``dev``, ``ino``, ``size`` (bytes, the whole tree),
``refusal`` (why it must not be removed, or None) and, when asked, ``protected``
[[dev, ino], ...].
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("fileio",)

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
# Files directly in these are the system's own: none is removed (a directory below them is
# judged as any other). The top-level ones are here for hosts without merged /usr.
SYSTEM_FILE_DIRS = ("/", "/boot", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", *SYSTEM_DIRS)
# rigger's own random temp files (fileio's write temps, validate's copies): its clean-up
# removes them wherever the write was, /etc included
_OWN_TEMP = re.compile(r"\..+\.rigger-(tmp|validate)-[0-9a-f]{12,16}", re.DOTALL)
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

    def add(path: str, why: str) -> None:
        """The object, whatever its type, and, when the name is a symlink (merged-/usr
        /bin, /vmlinuz), the link too."""
        try:
            link = os.lstat(path)
            st = os.stat(path) if stat.S_ISLNK(link.st_mode) else link
        except (OSError, ValueError):
            st = None
        if st is None:
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
        add(point, f"the mount point {point}")
    return found


def system_dirs() -> dict[tuple[int, int], str]:
    """{(dev, ino): path} of the directories whose files are the system's own."""
    found: dict[tuple[int, int], str] = {}
    for path in SYSTEM_FILE_DIRS:
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            found.setdefault((st.st_dev, st.st_ino), path)
    return found


def _system_file_refusal(path: str, parent: str, name: str, st: os.stat_result) -> str | None:
    if stat.S_ISDIR(st.st_mode) or _OWN_TEMP.fullmatch(name):
        return None
    try:
        directory = os.stat(parent)
    except OSError:
        return None
    where = system_dirs().get((directory.st_dev, directory.st_ino))
    if where is None:
        return None
    return (
        f"refusing to remove {path!r}: it is a file directly in the system directory {where}; rigger "
        "removes no system file (remove it by hand, or through the package that owns it)"
    )


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


def judge(path: str, with_protected: bool = False) -> dict[str, Any]:
    parent, name = split_path(path)
    walked = call("fileio", {"op": "judge_delete", "path": parent})
    if walked["refusal"]:
        return {"path": path, "parent": None, "name": name, "exists": None, "refusal": walked["refusal"]}
    real_parent = walked["real"]
    resolved = os.path.join(real_parent or parent, name)
    answer: dict[str, Any] = {"path": path, "parent": real_parent, "name": name, "resolved": resolved, "refusal": None}
    try:
        if real_parent is None:
            raise FileNotFoundError(path)
        st = os.lstat(resolved)
    except (FileNotFoundError, NotADirectoryError):
        return {**answer, "exists": False, "type": None, "size": 0}
    protected = protected_set()
    kind = _kind(st.st_mode)
    answer.update(exists=True, type=kind, dev=st.st_dev, ino=st.st_ino, size=st.st_size)
    why = protected.get((st.st_dev, st.st_ino))
    if why:
        answer["refusal"] = f"refusing to remove {path!r}: it is {why}"
    elif _system_file_refusal(path, real_parent, name, st):
        answer["refusal"] = _system_file_refusal(path, real_parent, name, st)
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
