"""File reads and atomic writes over one SFTP session.

A write goes to a temp file beside the target (created exclusively), is fsynced when the
server supports ``fsync@openssh.com``, gets its mode, and is renamed over the target with
``posix-rename@openssh.com`` (atomic replace). A failed write removes the temp file.
"""

from __future__ import annotations

import contextlib
import errno
import posixpath
import secrets
import stat

import paramiko
from paramiko.sftp import CMD_EXTENDED

from engine.errors import TaskFailed

DEFAULT_MODE = 0o644


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
    directory = posixpath.dirname(path) or "."
    temp = posixpath.join(directory, f".rigger-{secrets.token_hex(6)}")
    try:
        if mode is None:
            mode = _existing_mode(sftp, path)
        with sftp.open(temp, "wbx") as handle:
            handle.set_pipelined(True)
            handle.write(data)
            handle.flush()
            _fsync(sftp, handle)
        sftp.chmod(temp, mode)
        sftp.posix_rename(temp, path)
    except OSError as exc:
        _remove_quietly(sftp, temp)
        raise TaskFailed(f"cannot write {path} on {host}: {_why(exc)}") from None
    except BaseException:
        _remove_quietly(sftp, temp)
        raise


def _existing_mode(sftp: paramiko.SFTPClient, path: str) -> int:
    try:
        attrs = sftp.stat(path)
    except OSError:
        return DEFAULT_MODE
    return stat.S_IMODE(attrs.st_mode or DEFAULT_MODE)


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
