"""File reads and atomic writes over SFTP, for a host where no python runs (bootstrapping).

Every other file effect over SSH goes through the fileio probe on the host (the one path
walk); this is the fallback, and it applies the same bounds or refuses, naming why:

- The path is judged before the SSH server resolves it: absolute, no ``..``; every
  directory on the way (and every symlink, which is followed only when root or the login
  user owns it) must belong to root or the login user and be closed to others' writes
  (sticky excepted), so nobody else can swap a component between rigger's look and the
  server's use. Anything else is refused: "install python3 on the host" is the way on.
- Reads take regular files only (a FIFO, a device, a directory is refused from its lstat,
  before any open that could block), at most fileio's MAX_READ_BYTES, checked again on
  the opened handle.
- Another owner's hard link (fileio's rule: a link count above 1, owner other than the
  directory's) is neither read nor replaced keeping its owner; SFTP's attributes carry no
  link count, so it is read from the directory listing's long name.
- Every request waits at most SFTP_TIMEOUT_S; one that does not answer (a server blocked
  on something) fails the task with ``SFTPTimedOut`` and the session is dropped.

A write goes to a temp file beside the target (created exclusively, named as the fileio
probe names it, so the next write removes one an interrupted write left), is fsynced when
the server supports ``fsync@openssh.com``, gets the replaced file's owner, group and mode
(or ``mode``; a new file keeps the server's umask), and is renamed over the target with
``posix-rename@openssh.com`` (atomic replace). A failed write removes the temp file.
"""

from __future__ import annotations

import contextlib
import errno
import posixpath
import stat

import paramiko
from paramiko.sftp import CMD_EXTENDED

from engine.errors import TaskFailed
from engine.probes.fileio import MAX_READ_BYTES, is_temp_of, kind_of, temp_name

SFTP_TIMEOUT_S = 30.0
NO_PYTHON = "this host has no python for the guarded walk: install python3 (or set ansible_python_interpreter)"


class SFTPTimedOut(TaskFailed):
    """The SSH server did not answer an SFTP request in time: the session is unusable."""


class _Refused(Exception):
    """What rigger will not do over SFTP; the message says why."""


def bounded(sftp: paramiko.SFTPClient, timeout_s: float = SFTP_TIMEOUT_S) -> paramiko.SFTPClient:
    """The session with every request's wait bounded."""
    sftp.get_channel().settimeout(timeout_s)  # type: ignore[union-attr]
    return sftp


def login_uid(sftp: paramiko.SFTPClient) -> int:
    """The login user's uid: the owner of the directory the server starts in (its home)."""
    return int(sftp.stat(sftp.normalize(".")).st_uid or 0)


def _trusted(attrs: paramiko.SFTPAttributes, uid: int) -> bool:
    return attrs.st_uid in (0, uid)


def _judge_dirs(sftp: paramiko.SFTPClient, path: str, uid: int) -> tuple[str, paramiko.SFTPAttributes]:
    """The parent directory (as spelled) and its attributes, every component judged."""
    if not path.startswith("/"):
        raise _Refused("a relative path is resolved by the SSH server from its own start")
    parts = [p for p in path.strip("/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise _Refused("a path holding '..'")
    current, attrs = "/", sftp.stat("/")
    _check_dir(current, attrs, uid)
    for part in parts[:-1]:
        current = posixpath.join(current, part)
        attrs = sftp.lstat(current)
        if stat.S_ISLNK(attrs.st_mode or 0):
            if not _trusted(attrs, uid):
                raise _Refused(f"{current} is a symlink owned by uid {attrs.st_uid}")
            attrs = sftp.stat(current)  # a link root or the login user made: where it leads is judged
        if not stat.S_ISDIR(attrs.st_mode or 0):
            raise OSError(errno.ENOTDIR, f"{current} is not a directory")
        _check_dir(current, attrs, uid)
    return current, attrs


def _check_dir(where: str, attrs: paramiko.SFTPAttributes, uid: int) -> None:
    mode = attrs.st_mode or 0
    if not _trusted(attrs, uid):
        raise _Refused(
            f"{where} belongs to uid {attrs.st_uid}, who could swap its entries while the server resolves them"
        )
    if mode & 0o022 and not mode & stat.S_ISVTX:
        raise _Refused(f"others may write in {where} (mode {stat.S_IMODE(mode):04o})")


def _link_count(sftp: paramiko.SFTPClient, directory: str, name: str) -> int:
    """From the listing's long name (``-rw-r--r--  2 root root ...``): SFTP v3 attributes
    have no link count. Unknown counts as more than one."""
    for entry in sftp.listdir_attr(directory):
        if entry.filename == name:
            fields = (entry.longname or "").split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 2
    return 2


def _check_hard_link(
    sftp: paramiko.SFTPClient,
    directory: str,
    dir_attrs: paramiko.SFTPAttributes,
    name: str,
    attrs: paramiko.SFTPAttributes,
) -> None:
    if attrs.st_uid == dir_attrs.st_uid:
        return
    links = _link_count(sftp, directory, name)
    if links > 1:
        raise _Refused(
            f"{posixpath.join(directory, name)} has {links} hard links and belongs to uid {attrs.st_uid}, "
            f"not to the directory's owner uid {dir_attrs.st_uid} (another owner's hard link)"
        )


def sftp_read(sftp: paramiko.SFTPClient, path: str, host: str, max_bytes: int = MAX_READ_BYTES) -> bytes | None:
    try:
        return _read(sftp, path, max_bytes)
    except _Refused as exc:
        raise TaskFailed(f"refusing to read {path} on {host} over SFTP: {exc}; {NO_PYTHON}") from None
    except TimeoutError:
        raise SFTPTimedOut(f"cannot read {path} on {host}: no SFTP answer within {SFTP_TIMEOUT_S:g}s") from None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise TaskFailed(f"cannot read {path} on {host}: {_why(exc)}") from None


def _read(sftp: paramiko.SFTPClient, path: str, max_bytes: int) -> bytes | None:
    uid = login_uid(sftp)
    directory, dir_attrs = _judge_dirs(sftp, path, uid)
    name = posixpath.basename(path.rstrip("/"))
    attrs = sftp.lstat(path)
    if stat.S_ISLNK(attrs.st_mode or 0):
        if not _trusted(attrs, uid):
            raise _Refused(f"it is a symlink owned by uid {attrs.st_uid}")
        attrs = sftp.stat(path)
    if not stat.S_ISREG(attrs.st_mode or 0):  # before any open: a FIFO would block it
        raise _Refused(f"it is {kind_of(attrs.st_mode or 0)}, not a regular file")
    if (attrs.st_size or 0) > max_bytes:
        raise _Refused(f"it is {attrs.st_size} bytes, over the limit of {max_bytes}")
    _check_hard_link(sftp, directory, dir_attrs, name, attrs)
    with sftp.open(path, "rb") as handle:
        opened = handle.stat()
        if not stat.S_ISREG(opened.st_mode or 0):
            raise _Refused(f"it is {kind_of(opened.st_mode or 0)}, not a regular file")
        handle.prefetch(min(opened.st_size or 0, max_bytes + 1))
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _Refused(f"it holds more than the limit of {max_bytes} bytes")
    return bytes(data)


def sftp_write(sftp: paramiko.SFTPClient, path: str, data: bytes, mode: int | None, host: str) -> None:
    try:
        uid = login_uid(sftp)
        directory, dir_attrs = _judge_dirs(sftp, path, uid)
    except _Refused as exc:
        raise TaskFailed(f"refusing to write {path} on {host} over SFTP: {exc}; {NO_PYTHON}") from None
    except TimeoutError:
        raise SFTPTimedOut(f"cannot write {path} on {host}: no SFTP answer within {SFTP_TIMEOUT_S:g}s") from None
    except OSError as exc:
        raise TaskFailed(f"cannot write {path} on {host}: {_why(exc)}") from None
    name = posixpath.basename(path.rstrip("/"))
    target = posixpath.join(directory, name)  # the judged spelling, never the caller's
    temp = posixpath.join(directory, temp_name(name))
    try:
        current = _existing(sftp, target)
        if current is not None:
            _check_hard_link(sftp, directory, dir_attrs, name, current)
        with sftp.open(temp, "wbx") as handle:
            handle.set_pipelined(True)
            handle.write(data)
            handle.flush()
            _fsync(sftp, handle)
        mine = sftp.lstat(temp).st_uid
        _remove_stale_temps(sftp, temp, name, {mine, current.st_uid if current else mine})
        if current is not None:
            _keep_owner(sftp, temp, current)
            mode = stat.S_IMODE(current.st_mode or 0) if mode is None else mode
        if mode is not None:
            sftp.chmod(temp, mode)
        sftp.posix_rename(temp, target)
    except _Refused as exc:
        raise TaskFailed(f"refusing to write {path} on {host} over SFTP: {exc}; {NO_PYTHON}") from None
    except TimeoutError:
        raise SFTPTimedOut(f"cannot write {path} on {host}: no SFTP answer within {SFTP_TIMEOUT_S:g}s") from None
    except OSError as exc:
        _remove_quietly(sftp, temp)
        raise TaskFailed(f"cannot write {path} on {host}: {_why(exc)}") from None
    except BaseException:
        _remove_quietly(sftp, temp)
        raise


def _existing(sftp: paramiko.SFTPClient, path: str) -> paramiko.SFTPAttributes | None:
    """The regular file to replace (its owner and mode are kept); a symlink or a special
    file at the name is replaced by the file, as fileio does, a directory refused."""
    try:
        attrs = sftp.lstat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise
    if stat.S_ISDIR(attrs.st_mode or 0):
        raise OSError(errno.EISDIR, f"{path} is a directory")
    return attrs if stat.S_ISREG(attrs.st_mode or 0) else None


def _keep_owner(sftp: paramiko.SFTPClient, temp: str, current: paramiko.SFTPAttributes) -> None:
    made = sftp.lstat(temp)
    if (made.st_uid, made.st_gid) == (current.st_uid, current.st_gid):
        return
    try:
        sftp.chown(temp, current.st_uid or 0, current.st_gid or 0)
    except PermissionError:
        raise PermissionError(
            errno.EPERM, f"cannot keep the owner {current.st_uid}:{current.st_gid} (become: true writes it as root)"
        ) from None


def _remove_stale_temps(sftp: paramiko.SFTPClient, temp: str, name: str, owners: set[int | None]) -> None:
    """As the fileio probe does: this file's temps, owned by the login user or the file's
    owner, except ``temp`` (this write's own)."""
    directory, own = posixpath.split(temp)
    for entry in sftp.listdir_attr(directory):
        stale = is_temp_of(name, entry.filename) and entry.filename != own
        if stale and stat.S_ISREG(entry.st_mode or 0) and entry.st_uid in owners:
            _remove_quietly(sftp, posixpath.join(directory, entry.filename))


def _fsync(sftp: paramiko.SFTPClient, handle: paramiko.SFTPFile) -> None:
    try:
        # paramiko has no public call for this OpenSSH extension
        sftp._request(CMD_EXTENDED, "fsync@openssh.com", handle.handle)  # type: ignore[attr-defined]
    except (OSError, paramiko.SSHException):
        return  # server without the extension: the rename is still atomic


def _remove_quietly(sftp: paramiko.SFTPClient, path: str) -> None:
    with contextlib.suppress(OSError, paramiko.SSHException, EOFError):
        sftp.remove(path)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)
