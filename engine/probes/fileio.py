"""The guarded primitive for reading, writing and creating files on the host.

Every path is walked one component at a time from an opened ``/`` with ``O_NOFOLLOW``
(openat per component; this Python has no openat2). A symlink on the way is trusted when
it is owned by root, by the user rigger runs as, or (for a user other than root) by the
owner of the directory it sits in: the kernel's ``protected_symlinks`` question, asked of
every component, not only in sticky directories. A link another user made is followed
only to that user's own files: the directory the walk ends in, and the file when there
is one, must belong to the link's owner, who could have read or written there anyway.
`/home/u/.ssh -> /root/.ssh` made by u is refused; a model cache a service user owns
(snapshot links into its blobs) is not. Links are resolved here, component by component,
at most MAX_LINK_HOPS of them.

Reads take regular files only (a FIFO, a device, a socket or a directory is refused
before anything blocks: the open is non-blocking), at most ``max_bytes`` (MAX_READ_BYTES
unless the caller says less), and through a final link only by the rule above.
A write goes to ``.NAME.rigger-tmp-HEX`` beside the file (random, created
``O_EXCL|O_NOFOLLOW``), is fsynced and renamed over the file. A symlink at the final name
is replaced by the file, never written through, unless ``follow`` is asked and the link
passes the rule above; then its target is written. A replaced file keeps its owner, group and mode
(``mode`` overrides the mode); a new file gets ``mode`` or 0666 less the umask. Temp
files of this file left by an interrupted write (owned by the writer or by the file's
owner) are removed by the next write. A backup copy keeps the original's owner and group
and is never more readable than it.

Other probes use this one through ``call("fileio", {"op": ...})``: ``read``, ``follow``
(the real path a link at the final name leads to, read-only), ``write``,
``backup``, ``mkdir``, ``touch``, ``symlink``/``hardlink`` (put a link in place),
``attrs`` (owner, group, mode, optionally recursive without following links),
``open_append`` (a descriptor for a log, same process) and ``rename`` (within one
directory).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

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
MAX_READ_BYTES = 64 << 20
MAX_RANGE_BYTES = 4 << 20  # one chunk of a copy between hosts (spread_model)
ANY_SIZE = 1 << 62  # read_window for a copy between hosts: a part of a file of any size (a model shard)
MAX_LINK_HOPS = 40
MAX_TREE_ENTRIES = 100_000
MAX_TREE_DEPTH = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(OSError):
    """A path rigger will not read or write through; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EPERM, message)

    def __str__(self) -> str:
        return str(self.strerror)


def temp_prefix(name: str) -> str:
    """The start of every temp file name made for the file called ``name``."""
    short = name.encode("utf-8", "surrogateescape")[:_NAME_BYTES].decode("utf-8", "ignore")
    return "." + short + TEMP_MARK


def temp_name(name: str) -> str:
    return temp_prefix(name) + secrets.token_hex(6)


def is_temp_of(name: str, entry: str) -> bool:
    """Is ``entry`` a temp file name that a write of ``name`` made?"""
    return re.fullmatch(re.escape(temp_prefix(name)) + "[0-9a-f]{12}", entry) is not None


# -- walking -----------------------------------------------------------------------------


def _check_path(path: str) -> None:
    if not isinstance(path, str) or "\0" in path:
        raise Refused(f"refusing {path!r}: not a path (it contains a NUL byte)")
    if not path.startswith("/"):
        raise Refused(f"refusing a relative path: {path!r} (give an absolute path)")


def hardlink_suspect(st: os.stat_result, directory: os.stat_result, acting_uid: int | None = None) -> bool:
    """A hard link that says nothing about who put it here: not a directory, more than one
    link, and an owner other than the directory's owner (or than ``acting_uid``, the user a
    module acts for). With fs.protected_hardlinks=0 any user can link root's file into its
    own directory; such an entry is never chowned, chmodded, truncated, appended to, read
    for a module or trusted as a link (systemd-tmpfiles refuses the same)."""
    if stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1:
        return False
    return st.st_uid != directory.st_uid or (acting_uid is not None and st.st_uid != acting_uid)


def hardlink_refusal(what: str, st: os.stat_result, directory: os.stat_result, acting_uid: int | None = None) -> None:
    if hardlink_suspect(st, directory, acting_uid):
        owner = directory.st_uid if st.st_uid != directory.st_uid else acting_uid
        raise Refused(
            f"refusing {what}: it is a hard link ({st.st_nlink} links) to a file of uid {st.st_uid} in a "
            f"place of uid {owner}; rigger does not change, read or trust it (remove the link or name the "
            "original)"
        )


def trusted_link(link: os.stat_result, directory: os.stat_result) -> bool:
    """Root's links, the writer's own, and (for a writer other than root) the directory
    owner's: the kernel's protected_symlinks question, asked of every component. A symlink
    hard-linked into another owner's directory is nobody's statement there: not trusted."""
    if hardlink_suspect(link, directory):
        return False
    euid = os.geteuid()
    return link.st_uid in (0, euid) or (euid != 0 and link.st_uid == directory.st_uid)


def _delete_link_check(link: os.stat_result, directory: os.stat_result, where: str, real: list[str]) -> None:
    """A delete takes no link another user controls and no /proc link (another process's,
    maybe another namespace's, view of the filesystem) on the way to what it removes."""
    if real[:1] == ["proc"]:
        raise Refused(
            f"refusing {where}: it is a /proc magic link (a process's view of the filesystem); rigger removes "
            "nothing reached through it (name the real path)"
        )
    if not trusted_link(link, directory):
        raise Refused(
            f"refusing {where}: it is a symlink owned by uid {link_controller(link, directory)}, not by root or uid "
            f"{os.geteuid()}; rigger removes nothing reached through another user's link (name the real path)"
        )


# After a link another user made, the walk is confined to that user's own files: the
# directory it ends in (and the file, when there is one) must belong to the link's owner,
# who could have read or written there anyway. That keeps a model cache owned by a service
# user usable as root, and refuses `/home/u/.ssh -> /root/.ssh` made by u.
Confined = tuple[int, str] | None  # (the link owner's uid, the link), or None


def link_controller(link: os.stat_result, directory: os.stat_result) -> int:
    """Who decides where a symlink leads: its owner, or the directory's owner for a symlink
    hard-linked into that directory (anyone's link can be linked there)."""
    return directory.st_uid if hardlink_suspect(link, directory) else link.st_uid


def _confine(link: os.stat_result, directory: os.stat_result, where: str, confined: Confined) -> Confined:
    if trusted_link(link, directory):
        return confined
    controller = link_controller(link, directory)
    if confined is not None and confined[0] != controller:
        raise Refused(_escape(confined, where, controller))
    return (controller, where) if confined is None else confined


def _escape(confined: tuple[int, str], where: str, owner: int) -> str:
    uid, link = confined
    return (
        f"refusing {link}: it is a symlink owned by uid {uid}, not by root or uid {os.geteuid()}, and it "
        f"leads to {where}, owned by uid {owner}; rigger follows another user's link only to that "
        "user's own files (name the real path)"
    )


def _check_confined(st: os.stat_result, where: str, confined: Confined) -> None:
    if confined is not None and st.st_uid != confined[0]:
        raise Refused(_escape(confined, where, st.st_uid))


def _swap(old: int, new: int) -> int:
    os.close(old)
    return new


def open_dir(path: str, create: bool = False, mode: int = 0o777) -> tuple[int, str]:
    """(descriptor, real path) of the directory ``path`` names, walked as the module says;
    ``create``: missing directories are made (``mode``, less the umask)."""
    fd, real, _ = _walk_dir(path, create, mode, None)
    return fd, real


def open_dir_for_delete(path: str) -> tuple[int, str]:
    """(descriptor, real path) of the directory ``path`` names, by the same walk, where any
    link another user controls, or a /proc link, on the way is refused (not confined)."""
    fd, real, _ = _walk_dir(path, False, 0o777, None, strict=True)
    return fd, real


def _walk_dir(
    path: str, create: bool, mode: int, confined: Confined, strict: bool = False
) -> tuple[int, str, Confined]:
    _check_path(path)
    pending = [part for part in path.split("/") if part][::-1]
    fd, hops = os.open("/", _DIR_FLAGS), 0
    real: list[str] = []
    try:
        while pending:
            part = pending.pop()
            if part == ".":
                continue
            if part == "..":
                fd = _swap(fd, os.open("..", _DIR_FLAGS, dir_fd=fd))
                real = real[:-1]
                continue
            where = "/" + "/".join([*real, part])
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                # judged before the answer "missing": a create here would be refused, so the
                # plan of a write below a missing directory says so too (write_refusal)
                _check_confined(os.fstat(fd), "/" + "/".join(real), confined)
                if not create:
                    raise FileNotFoundError(errno.ENOENT, f"{where} does not exist") from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_LINK_HOPS:
                    raise Refused(f"refusing {path}: more than {MAX_LINK_HOPS} symlinks on the way")
                if strict:
                    _delete_link_check(st, os.fstat(fd), where, real)
                confined = _confine(st, os.fstat(fd), where, confined)
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    fd, real = _swap(fd, os.open("/", _DIR_FLAGS)), []
                pending.extend([p for p in target.split("/") if p][::-1])
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, f"{where} is not a directory")
            try:
                fd = _swap(fd, os.open(part, _DIR_FLAGS, dir_fd=fd))
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # became a link since the stat
                    raise Refused(f"refusing {where}: it was replaced by a symlink while being opened") from None
                raise
            real.append(part)
        _check_confined(os.fstat(fd), "/" + "/".join(real), confined)
    except BaseException:
        os.close(fd)
        raise
    return fd, "/" + "/".join(real), confined


def split_final(path: str) -> tuple[str, str]:
    """(directory, final name) of a path that names a file; refuses ``/``, ``x/``, ``.``, ``..``."""
    _check_path(path)
    if path.endswith("/"):
        raise Refused(f"refusing {path!r}: it ends in '/', a directory; name the file")
    directory, _, name = path.rpartition("/")
    if name in ("", ".", ".."):
        raise Refused(f"refusing {path!r}: it does not name a file")
    return directory or "/", name


def open_parent(path: str, create: bool = False) -> tuple[int, str, str]:
    """(descriptor of the parent directory, its real path, the final name)."""
    fd, real, name, _ = _open_parent(path, create, None)
    return fd, real, name


def _open_parent(path: str, create: bool, confined: Confined) -> tuple[int, str, str, Confined]:
    directory, name = split_final(path)
    fd, real, confined = _walk_dir(directory, create, 0o777, confined)
    try:
        if confined is not None:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode):
                    _check_confined(st, f"{real.rstrip('/')}/{name}", confined)
    except BaseException:
        os.close(fd)
        raise
    return fd, real, name, confined


def _resolve_final(path: str, follow: bool) -> tuple[int, str, str, os.stat_result | None]:
    """The parent's descriptor, its real path, the final name and its lstat (None: absent);
    ``follow``: a symlink at the final name is followed to what it names, by the rule above."""
    fd, real, name, confined = _open_parent(path, False, None)
    try:
        for _ in range(MAX_LINK_HOPS):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return fd, real, name, None
            if not follow or not stat.S_ISLNK(st.st_mode):
                return fd, real, name, st
            confined = _confine(st, os.fstat(fd), f"{real.rstrip('/')}/{name}", confined)
            target = os.readlink(name, dir_fd=fd)
            joined = target if target.startswith("/") else f"{real.rstrip('/')}/{target}"
            os.close(fd)
            fd = -1
            fd, real, name, confined = _open_parent(joined, False, confined)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise
    os.close(fd)
    raise Refused(f"refusing {path}: more than {MAX_LINK_HOPS} symlinks on the way")


def follow_final(path: str) -> str:
    """The real path of what ``path`` names, a symlink at the final name followed (a
    module's ``follow: true``) by the rule above: another user's link only to that user's
    own files. The target need not exist (a dangling link names where it would be)."""
    fd, real, name, _ = _resolve_final(path, follow=True)
    os.close(fd)
    return f"{real.rstrip('/')}/{name}"


# -- reading -----------------------------------------------------------------------------


def kind_of(mode: int) -> str:
    """What a file that is not a regular file is, for a refusal (the SFTP transport says it too)."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str, max_bytes: int = MAX_READ_BYTES) -> bytes | None:
    """The content of the regular file ``path`` (None: absent), at most ``max_bytes``;
    another owner's hard link in a directory is not trusted (``hardlink_suspect``)."""
    handle = _open_read(path, max_bytes)
    if handle is None:
        return None
    with handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(f"refusing to read {path}: it holds more than the limit of {max_bytes} bytes")
    return data


def _open_read(path: str, max_bytes: int) -> BinaryIO | None:
    """The opened regular file (None: absent), refused when special, too big or another
    owner's hard link."""
    try:
        fd, _, name, st = _resolve_final(path, follow=True)
    except FileNotFoundError:
        return None
    try:
        if st is None:
            return None
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"refusing to read {path}: it is {kind_of(st.st_mode)}, not a regular file")
        hardlink_refusal(f"to read {path}", st, os.fstat(fd))
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        file_fd = os.open(name, flags, dir_fd=fd)
    finally:
        os.close(fd)
    handle = os.fdopen(file_fd, "rb")
    opened = os.fstat(file_fd)
    if not stat.S_ISREG(opened.st_mode):  # replaced between the stat and the open
        handle.close()
        raise Refused(f"refusing to read {path}: it is {kind_of(opened.st_mode)}, not a regular file")
    if opened.st_size > max_bytes:
        handle.close()
        raise Refused(f"refusing to read {path}: it is {opened.st_size} bytes, over the limit of {max_bytes}")
    return handle


def file_identity(st: os.stat_result) -> list[int]:
    """What a copy in several reads pins: the same file, not rewritten in place."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def read_window(
    path: str, offset: int, length: int, max_size: int = MAX_READ_BYTES, identity: list[int] | None = None
) -> tuple[bytes, list[int]] | None:
    """``length`` bytes (at most MAX_RANGE_BYTES) of the regular file ``path`` from ``offset``,
    and the file's identity (device, inode, size, mtime: see ``file_identity``); None where
    it is absent. The one way to read part of a file: judged and opened as ``read_bytes``
    opens it, the window bounded, and with ``identity`` (an earlier read's) refused when the
    file is not that one any more, so parts of two files are never mixed.

    ``max_size`` is the one rule the callers really differ on, the size of the whole file:
    the SSH transport without a remote python gathers a file whole in parts (op
    ``read_part``) and keeps ``read_bytes``'s cap; a copy between hosts (op ``read_range``,
    spread_model) sends each window on and reads model shards of any size (ANY_SIZE)."""
    if not 0 <= length <= MAX_RANGE_BYTES or offset < 0:
        raise Refused(f"refusing a read of {length} bytes at {offset}: outside 0..{MAX_RANGE_BYTES}")
    handle = _open_read(path, max_size)
    if handle is None:
        return None
    with handle:
        found = file_identity(os.fstat(handle.fileno()))
        if identity is not None and list(identity) != found:
            raise Refused(f"{path} changed since the copy began (replaced or rewritten); start again")
        return os.pread(handle.fileno(), length, offset), found


def walk_tree(
    top: str, max_entries: int = MAX_TREE_ENTRIES, max_depth: int = MAX_TREE_DEPTH
) -> Iterator[tuple[str, os.stat_result]]:
    """(path relative to ``top``, lstat) of everything under the directory ``top``, sorted,
    never following a symlink nor crossing into another filesystem (a mount point inside
    is refused: `/` walks into /proc); a tree over the bounds is refused with the bound named."""
    fd, _ = open_dir(top)
    top_dev = os.fstat(fd).st_dev
    count = 0

    def walk(dir_fd: int, prefix: str, depth: int) -> Iterator[tuple[str, os.stat_result]]:
        nonlocal count
        if depth > max_depth:
            raise Refused(f"refusing {top}: it is nested deeper than {max_depth} directories ({prefix[:200]})")
        with os.scandir(dir_fd) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            count += 1
            if count > max_entries:
                raise Refused(f"refusing {top}: it holds more than {max_entries} entries")
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if st.st_dev != top_dev:
                raise Refused(f"refusing {top}: {prefix + name} is another filesystem (a mount point)")
            yield prefix + name, st
            if stat.S_ISDIR(st.st_mode):
                child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
                try:
                    yield from walk(child, prefix + name + "/", depth + 1)
                finally:
                    os.close(child)

    try:
        yield from walk(fd, "", 1)
    finally:
        os.close(fd)


# -- rigger's own state ------------------------------------------------------------------
# The controller's state directory ($RIGGER_STATE_DIR, ~/.local/state/rigger), the run
# lock's, and every file in them: the baselines store, quarantine.json, watch's files.


def _others_may_replace(st: os.stat_result, bits: int = 0o022) -> bool:
    """Others (``bits``: group and world, or world only) may write in the directory and it
    is not sticky: they can rename its entries."""
    return bool(st.st_mode & bits) and not st.st_mode & stat.S_ISVTX


def _check_state_ancestors(real: str) -> None:
    """Every directory above a state directory belongs to root or this user and lets no
    one else rename its entries, so the real path stays what was checked (SQLite opens
    the store by that path)."""
    fd = os.open("/", _DIR_FLAGS)
    try:
        parts = [part for part in real.split("/") if part][:-1]
        for index in range(len(parts) + 1):
            st, where = os.fstat(fd), "/" + "/".join(parts[:index])
            # world-writable only: a home shared with the user's private group (0775) is common
            if st.st_uid not in (0, os.geteuid()) or _others_may_replace(st, 0o002):
                raise Refused(
                    f"refusing the state directory {real}: {where} above it belongs to uid {st.st_uid} "
                    f"(mode {stat.S_IMODE(st.st_mode):04o}), who could move it; keep rigger's state under "
                    "directories of root's or your own (set RIGGER_STATE_DIR)"
                )
            if index < len(parts):
                fd = _swap(fd, os.open(parts[index], _DIR_FLAGS, dir_fd=fd))
    finally:
        os.close(fd)


def _unusable_state_dir(path: str, exc: OSError) -> str:
    """The OS's refusal to make or open a state directory, named in full (the walk's own
    error names only the component it stopped at), with what to do."""
    number = exc.errno or 0
    reason = f"{exc.strerror or exc} ({errno.errorcode.get(number, number)})"
    where = f" at {exc.filename!r}" if exc.filename else ""
    return (
        f"cannot make or open the state directory {path}: {reason}{where}; make it writable for uid "
        f"{os.geteuid()} who runs rigger, or set RIGGER_STATE_DIR to a directory of your own"
    )


def open_state_dir(path: str, create: bool = True) -> tuple[int, str]:
    """(descriptor, real path) of a state directory, walked as above and made 0700 when
    missing. Refused when another user owns it (it was there first), when others may
    write in it and it is not sticky (nobody but its user may replace what rigger keeps
    there), or when a directory above it is neither root's nor this user's. A sticky one
    of root's or this user's (/tmp, the shared lock directory every login user of a host
    locks in) is accepted: others cannot rename or remove rigger's entries there, and each
    state file must be rigger's own."""
    try:
        fd, real = open_dir(path, create=create, mode=0o700)
    except Refused:
        raise
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and not create:  # state never written: the callers' "absent"
            raise
        raise Refused(_unusable_state_dir(path, exc)) from None
    try:
        _check_state_ancestors(real)
        st = os.fstat(fd)
        shared = bool(st.st_mode & stat.S_ISVTX) and st.st_uid == 0  # /tmp-like: root's, sticky
        if st.st_uid != os.geteuid() and not shared:
            raise Refused(
                f"refusing the state directory {real}: it belongs to uid {st.st_uid}, not to uid {os.geteuid()} "
                "who runs rigger (remove it, or set RIGGER_STATE_DIR to a directory of your own)"
            )
        if _others_may_replace(st):
            raise Refused(
                f"refusing the state directory {real}: others may write in it (mode "
                f"{stat.S_IMODE(st.st_mode):04o}); chmod go-w it, or set RIGGER_STATE_DIR to a directory of your own"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, real


def open_state_file(dir_fd: int, name: str, flags: int, where: str) -> int:
    """A descriptor of the state file ``name`` in an opened state directory: never through
    a link, non-blocking (a FIFO is refused, never waited on), a regular file of this user
    with no other hard link (stricter than ``hardlink_suspect``: in a sticky shared
    directory another user can hard-link root's file under the lock's name)."""
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Refused(f"refusing the state file {where}: it is a symlink; rigger never follows one there") from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader, a device without its driver
            kind = kind_of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            raise Refused(f"refusing the state file {where}: it is {kind}, not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"refusing the state file {where}: it is {kind_of(st.st_mode)}, not a regular file")
        if st.st_uid != os.geteuid():
            raise Refused(f"refusing the state file {where}: it belongs to uid {st.st_uid}, not to uid {os.geteuid()}")
        if st.st_nlink != 1:  # rigger never links its state files: a link is somebody's trap
            raise Refused(
                f"refusing the state file {where}: it has {st.st_nlink} hard links; rigger's state files have one "
                "(remove it)"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_state(path: str, max_bytes: int = 16 << 20) -> bytes | None:
    """The content of a state file (None: it or its directory is absent), by the rules above."""
    directory, name = split_final(path)
    try:
        dir_fd, real = open_state_dir(directory, create=False)
    except FileNotFoundError:
        return None
    try:
        try:
            fd = open_state_file(dir_fd, name, os.O_RDONLY, f"{real.rstrip('/')}/{name}")
        except FileNotFoundError:
            return None
    finally:
        os.close(dir_fd)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(f"refusing the state file {path}: it holds more than the limit of {max_bytes} bytes")
    return data


def write_state(path: str, data: bytes) -> None:
    """Replace a state file atomically (0600) in its state directory, made 0700 if missing."""
    directory, name = split_final(path)
    dir_fd, real = open_state_dir(directory)
    try:
        with contextlib.suppress(FileNotFoundError):  # what is there must be rigger's own, as for a read
            os.close(open_state_file(dir_fd, name, os.O_RDONLY, f"{real.rstrip('/')}/{name}"))
    finally:
        os.close(dir_fd)
    write_atomic(f"{real.rstrip('/')}/{name}", data, 0o600)


def open_state_append(path: str) -> int:
    """A descriptor appending to a state file (a journal), created 0600 if absent."""
    directory, name = split_final(path)
    dir_fd, real = open_state_dir(directory)
    try:
        return open_state_file(dir_fd, name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, f"{real.rstrip('/')}/{name}")
    finally:
        os.close(dir_fd)


# -- writing -----------------------------------------------------------------------------


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


def write_atomic(
    path: str,
    data: bytes,
    mode: int | None = None,
    like: os.stat_result | None = None,
    follow: bool = False,
) -> None:
    """Write ``data`` to ``path`` atomically. ``like``: a stat whose owner (and, without
    ``mode``, mode) the file gets instead of the current file's (used for backups)."""
    temp = _open_temp(path, mode, like, follow)
    try:
        with os.fdopen(os.dup(temp["fd"]), "wb") as handle:
            handle.write(data)
    except BaseException:
        _abort_temp(temp)
        raise
    _finish_temp(temp)


def _open_temp(path: str, mode: int | None, like: os.stat_result | None, follow: bool) -> dict[str, Any]:
    """The judged directory and a new temp file beside ``path`` (both descriptors kept open:
    a chunked write over SSH fills it over several requests to this same process)."""
    dir_fd, real, name, existing = _resolve_final(path, follow)
    try:
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"{real.rstrip('/')}/{name} is a directory")
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            existing = None  # a link (not followed) or special file is replaced, its owner not kept
        if existing is not None:  # its owner and mode would be kept: not another owner's hard link
            hardlink_refusal(f"to replace {real.rstrip('/')}/{name}", existing, os.fstat(dir_fd))
        _remove_stale_temps(dir_fd, name, {os.geteuid()} | ({existing.st_uid} if existing else set()))
        current = like or existing
        tmp = temp_name(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o666 if mode is None and current is None else 0o600, dir_fd=dir_fd)
    except BaseException:
        os.close(dir_fd)
        raise
    made = os.fstat(fd)
    return {
        "dir_fd": dir_fd,
        "fd": fd,
        "temp": tmp,
        "name": name,
        "mode": mode,
        "temp_id": [made.st_dev, made.st_ino],
        "existing_id": None if existing is None else [existing.st_dev, existing.st_ino],
        "like": None if like is None else [like.st_uid, like.st_gid, like.st_mode],
        "_current": current,
    }


def _finish_temp(temp: dict[str, Any]) -> None:
    """Owner, mode, fsync, rename over the final name; the descriptors are closed."""
    dir_fd, fd, tmp, name, mode = temp["dir_fd"], temp["fd"], temp["temp"], temp["name"], temp["mode"]
    try:
        current = temp.get("_current")
        if current is not None:
            _keep_owner(fd, current, required=temp["like"] is None)
            mode = stat.S_IMODE(current.st_mode) if mode is None else mode
        if mode is not None:
            os.fchmod(fd, mode)
        os.fsync(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _abort_temp(temp)
        raise
    os.close(fd)
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)
    os.close(dir_fd)


def _abort_temp(temp: dict[str, Any]) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp["temp"], dir_fd=temp["dir_fd"])
    for fd in (temp["fd"], temp["dir_fd"]):
        with contextlib.suppress(OSError):
            os.close(fd)


# A write in chunks (a file too big for one request over SSH) through the remote python,
# which keeps the descriptors between requests: ``write_open`` judges the path exactly as a
# one-piece write does and creates the temp file; ``write_chunk`` appends to it, checking
# by device and inode that the descriptor is still that temp file; ``write_commit`` checks
# that the final name still holds the file judged at the start (a swap meanwhile is
# refused) and renames; ``write_abort`` removes the temp file.


def _held(args: dict[str, Any]) -> dict[str, Any]:
    temp = dict(args["temp"])
    st = os.fstat(temp["fd"])
    if [st.st_dev, st.st_ino] != list(temp["temp_id"]) or not stat.S_ISREG(st.st_mode):
        raise Refused(f"refusing to write {args['path']}: the temp file's descriptor is no longer that file")
    return temp


def write_open(args: dict[str, Any]) -> dict[str, Any]:
    temp = _open_temp(args["path"], args.get("mode"), None, bool(args.get("follow")))
    current = temp.pop("_current")
    if current is not None:
        temp["like"] = None
        temp["current"] = [current.st_uid, current.st_gid, current.st_mode]
    return {"temp": temp}


def write_chunk(args: dict[str, Any]) -> dict[str, Any]:
    temp = _held(args)
    data = memoryview(base64.b64decode(args["data"]))
    while data:
        data = data[os.write(temp["fd"], data) :]
    return {"written": True}


def write_commit(args: dict[str, Any]) -> dict[str, Any]:
    temp = _held(args)
    try:
        now = os.stat(temp["name"], dir_fd=temp["dir_fd"], follow_symlinks=False)
        now_id: list[int] | None = [now.st_dev, now.st_ino] if stat.S_ISREG(now.st_mode) else None
    except FileNotFoundError:
        now_id = None
    if now_id != temp["existing_id"]:
        _abort_temp(temp)
        raise Refused(f"refusing to write {args['path']}: it was replaced while it was being written")
    if temp.get("current") is not None:
        uid, gid, mode = temp["current"]
        temp["_current"] = os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))
    _finish_temp(temp)
    return {"written": True}


def write_abort(args: dict[str, Any]) -> dict[str, Any]:
    _abort_temp(dict(args["temp"]))
    return {"aborted": True}


def backup_copy(path: str, backup: str) -> None:
    """Copy ``path`` to ``backup``: same owner and group, mode no wider than the original's
    permission bits (only the owner's when the owner cannot be kept)."""
    fd, _, _, original = _resolve_final(path, follow=True)
    os.close(fd)
    data = read_bytes(path)
    if original is None or data is None:
        raise FileNotFoundError(errno.ENOENT, f"{path} does not exist")
    mode = stat.S_IMODE(original.st_mode) & 0o777
    if os.geteuid() != 0 and (original.st_uid, original.st_gid) != (os.geteuid(), os.getegid()):
        mode &= 0o700
    write_atomic(backup, data, mode, like=original)


def write_refusal(path: str) -> str | None:
    """Why a write or create at ``path`` would be refused (read-only: only walks), or None
    (a missing directory on the way is not a refusal: it may be created first)."""
    if isinstance(path, str) and path.startswith("/") and not path.strip("/"):
        return None  # `/` itself: no component to walk (a delete of it is path_judge's)
    try:
        fd, _, _ = open_parent(path.rstrip("/") if isinstance(path, str) else path)
    except Refused as exc:
        return str(exc)
    except OSError:
        return None
    os.close(fd)
    return None


def delete_parent(directory: str) -> dict[str, Any]:
    """The delete judgement's walk of the directory a removed object sits in: ``real`` (its
    real path, None when missing), ``uid`` (its owner) and ``refusal``."""
    try:
        fd, real = open_dir_for_delete(directory)
    except Refused as exc:
        return {"real": None, "uid": None, "refusal": str(exc)}
    except (FileNotFoundError, NotADirectoryError):
        return {"real": None, "uid": None, "refusal": None}
    try:
        return {"real": real, "uid": os.fstat(fd).st_uid, "refusal": None}
    finally:
        os.close(fd)


def make_dirs(path: str, mode: int = 0o777) -> str:
    """Create the directory and its missing parents (walked as above); its real path."""
    fd, real = open_dir(path, create=True, mode=mode)
    os.close(fd)
    return real


def touch(path: str, update_times: bool) -> None:
    """Create an empty file if nothing is there (never through a link); else update times."""
    fd, _, name = open_parent(path)
    try:
        try:
            os.close(
                os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=fd)
            )
        except FileExistsError:
            if update_times:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                hardlink_refusal(f"to touch {path}", st, os.fstat(fd))
                os.utime(name, dir_fd=fd, follow_symlinks=False)
    finally:
        os.close(fd)


def put_link(path: str, src: str, hard: bool, identity: list[int] | None) -> None:
    """Put a link at ``path`` (replacing what is there, which must still be ``identity``)."""
    fd, _, name = open_parent(path)
    try:
        _check_identity(fd, name, path, identity)
        temp = temp_name(name)
        if hard:
            src_fd, _, src_name, src_st = _resolve_final(src, follow=False)
            try:
                if src_st is None:
                    raise FileNotFoundError(errno.ENOENT, f"{src} does not exist")
                os.link(src_name, temp, src_dir_fd=src_fd, dst_dir_fd=fd, follow_symlinks=False)
            finally:
                os.close(src_fd)
        else:
            os.symlink(src, temp, dir_fd=fd)
        try:
            os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            os.unlink(temp, dir_fd=fd)
            raise
    finally:
        os.close(fd)


def _check_identity(fd: int, name: str, path: str, identity: list[int] | None) -> None:
    if identity is None:
        return
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        st = None
    if st is None or [st.st_dev, st.st_ino] != list(identity):
        raise Refused(f"{path} changed since it was planned; not touching it")


def _set_attrs(fd: int, name: str, st: os.stat_result, uid: int, gid: int, mode_of: Any) -> None:
    if uid != -1 or gid != -1:
        os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode) or mode_of is None:
        return
    wanted = mode_of(stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode))
    if wanted != stat.S_IMODE(st.st_mode):
        _chmod_same(fd, name, st, wanted)


def _chmod_same(fd: int, name: str, st: os.stat_result, mode: int) -> None:
    """chmod the entry ``name`` only while it is still ``st`` and not a link. Linux has no
    lchmod and chmod follows links: the entry is opened O_PATH|O_NOFOLLOW, checked by
    dev/ino, and changed through that descriptor, so a swap for a link after the lstat
    (a user racing a recursive chmod in its own directory) changes nothing."""
    entry = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    try:
        now = os.fstat(entry)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or stat.S_ISLNK(now.st_mode):
            raise Refused(f"refusing to change the mode of {name}: it was replaced while being changed")
        os.chmod(f"/proc/self/fd/{entry}", mode)  # the open inode itself, never a link's target
    finally:
        os.close(entry)


def set_attrs(path: str, uid: int, gid: int, mode_of: Any, recurse: bool) -> None:
    """Owner/group (-1: keep) and mode (``mode_of(current, is_dir)``, None: keep) of the
    path itself (a link: the link), and with ``recurse`` of everything under a directory:
    the whole tree is walked first, so a tree over the bounds, holding a mount point or a
    hard link of another owner's file (``hardlink_suspect``, acting for ``uid`` when an
    owner is asked) is refused before anything changes."""
    if path.startswith("/") and not path.strip("/"):
        raise Refused(f"refusing to change the owner or mode of {path!r}: it is the root directory /")
    acting = None if uid == -1 else uid
    fd, real, name, st = _resolve_final(path.rstrip("/"), follow=False)
    try:
        if st is None:
            raise FileNotFoundError(errno.ENOENT, f"{path} does not exist")
        top = f"{real.rstrip('/')}/{name}"
        hardlink_refusal(f"to change the owner or mode of {top}", st, os.fstat(fd), acting)
        inside = list(walk_tree(top)) if recurse and stat.S_ISDIR(st.st_mode) else []
        dirs = {"": st, **{rel: child for rel, child in inside if stat.S_ISDIR(child.st_mode)}}
        for rel, child in inside:
            where = f"to change the owner or mode of {top}/{rel}"
            hardlink_refusal(where, child, dirs[rel.rpartition("/")[0]], acting)
        _set_attrs(fd, name, st, uid, gid, mode_of)
    finally:
        os.close(fd)
    for rel, child in inside:
        parent_fd, _, child_name = open_parent(f"{top}/{rel}")
        try:
            _set_attrs(parent_fd, child_name, child, uid, gid, mode_of)
        finally:
            os.close(parent_fd)


def open_append(path: str, mode: int = 0o640) -> int:
    """A descriptor appending to ``path``, created if absent; never through a symlink
    (a dangling link there is refused, not used to create its target)."""
    fd, _, name = open_parent(path)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            log_fd = os.open(name, flags, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(f"refusing {path}: it is a symlink; rigger does not write through it") from None
            raise
        try:
            _check_writable_file(log_fd, fd, f"to append to {path}")
        except BaseException:
            os.close(log_fd)
            raise
        return log_fd
    finally:
        os.close(fd)


def _check_writable_file(file_fd: int, dir_fd: int, what: str) -> None:
    """An opened file rigger is about to write in place: a regular file (a FIFO or a
    device is refused: the open was non-blocking), not another owner's hard link."""
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode):
        raise Refused(f"refusing {what}: it is {kind_of(st.st_mode)}, not a regular file")
    hardlink_refusal(what, st, os.fstat(dir_fd))
    os.set_blocking(file_fd, True)


def rename_within(path: str, new_name: str) -> bool:
    """Rename ``path`` to ``new_name`` in the same directory (whatever it is, links not
    followed); False when there was nothing to rename."""
    fd, _, name = open_parent(path)
    try:
        os.replace(name, new_name, src_dir_fd=fd, dst_dir_fd=fd)
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
    return True


def _entry_kind(mode: int) -> str:
    return "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def _mode_function(args: dict[str, Any]) -> Any:
    """mode as a number, or as ``mode_of`` from the file_mode probe's answer per path."""
    if args.get("mode") is None:
        return None
    fixed = args["mode"]
    return lambda current, is_dir: fixed


_CHUNKED = {
    "write_open": write_open,
    "write_chunk": write_chunk,
    "write_commit": write_commit,
    "write_abort": write_abort,
}


def _read_window_answer(op: str, path: str, args: dict[str, Any]) -> dict[str, Any]:
    """``read_window`` in each caller's answer: ``read_range`` (a copy between hosts; the
    file may be of any size; absent is an error), ``read_part`` (a whole file in parts over
    SSH; ``read_bytes``'s cap; absent is an answer)."""
    whole_in_parts = op == "read_part"
    max_size = int(args.get("max_bytes") or MAX_READ_BYTES) if whole_in_parts else ANY_SIZE
    part = read_window(path, int(args["offset"]), int(args["length"]), max_size, args.get("identity"))
    if part is None:
        if whole_in_parts:
            return {"exists": False, "data": None, "size": 0, "id": None}
        raise FileNotFoundError(path)
    data, identity = part
    encoded = base64.b64encode(data).decode()
    if whole_in_parts:
        return {"exists": True, "data": encoded, "size": identity[2], "id": identity}
    return {"data": encoded, "length": len(data), "identity": identity}


def main(args: dict[str, Any]) -> dict[str, Any]:
    op, path = args["op"], args["path"]
    if op == "read":
        data = read_bytes(path, int(args.get("max_bytes") or MAX_READ_BYTES))
        return {"exists": data is not None, "data": None if data is None else base64.b64encode(data).decode()}
    if op in ("read_range", "read_part"):
        return _read_window_answer(op, path, args)
    if op == "list":
        entries = [[rel, _entry_kind(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size] for rel, st in walk_tree(path)]
        return {"entries": entries}
    if op == "judge_write":
        return {"refusal": write_refusal(path)}
    if op == "judge_delete":
        return delete_parent(path)
    if op == "open_delete_dir":
        return {"fd": open_dir_for_delete(path)[0]}
    if op == "follow":
        try:
            return {"real": follow_final(path), "refusal": None}
        except Refused as exc:
            return {"real": None, "refusal": str(exc)}
    if op == "backup":
        backup_copy(path, args["backup"])
        return {"backup": args["backup"]}
    if op == "write":
        write_atomic(path, base64.b64decode(args["data"]), args.get("mode"), follow=bool(args.get("follow")))
        return {"written": True}
    if op in _CHUNKED:
        return _CHUNKED[op](args)
    if op == "mkdir":
        return {"real": make_dirs(path, int(args.get("mode") or 0o777))}
    if op == "touch":
        touch(path, bool(args.get("update_times")))
    elif op in ("symlink", "hardlink"):
        put_link(path, args["src"], op == "hardlink", args.get("identity"))
    elif op == "attrs":
        set_attrs(
            path,
            args.get("uid", -1),
            args.get("gid", -1),
            args.get("mode_of") or _mode_function(args),
            bool(args.get("recurse")),
        )
    elif op == "open_append":
        return {"fd": open_append(path, int(args.get("mode") or 0o640))}
    elif op == "rename":
        return {"renamed": rename_within(path, args["new_name"])}
    else:
        raise ValueError(f"fileio: unknown op {op!r}")
    return {"done": op}
