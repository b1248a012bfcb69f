"""File reads and atomic writes over one SFTP session.

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
from engine.probes.fileio import is_temp_of, temp_name


def sftp_read(sftp: paramiko.SFTPClient, path: str, host: str) -> bytes | None:
    try:
        with sftp.open(path, "rb") as handle:
            handle.prefetch()
            return handle.read()
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise TaskFailed(f"cannot read {path} on {host}: {_why(exc)}") from None


def sftp_write(sftp: paramiko.SFTPClient, path: str, data: bytes, mode: int | None, host: str) -> None:
    directory, name = posixpath.split(path)
    directory = directory or "."
    temp = posixpath.join(directory, temp_name(name))
    try:
        current = _existing(sftp, path)
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
        sftp.posix_rename(temp, path)
    except OSError as exc:
        _remove_quietly(sftp, temp)
        raise TaskFailed(f"cannot write {path} on {host}: {_why(exc)}") from None
    except BaseException:
        _remove_quietly(sftp, temp)
        raise


def _existing(sftp: paramiko.SFTPClient, path: str) -> paramiko.SFTPAttributes | None:
    try:
        return sftp.stat(path)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise


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
