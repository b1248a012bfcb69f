"""Host key checking: known_hosts files, accept-new recording under a lock, loud refusals.

Policy (``host_key_checking``):
- ``strict`` (default): the key must already be in ``~/.ssh/known_hosts`` or the
  inventory's ``known_hosts_file``; an unknown host is refused, naming the fingerprint.
- ``accept-new``: an unknown host's key is recorded (under a file lock) and accepted.
- ``off``: an unknown host is accepted without recording, with a loud warning.
In every mode a key that differs from the recorded one is refused, with both fingerprints.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from dataclasses import dataclass

import paramiko

from engine.connection.ssh.options import Endpoint
from engine.errors import HostUnreachable


class HostKeyError(HostUnreachable):
    """The host's key is unknown or does not match the recorded one."""


@dataclass(frozen=True)
class HostKeyVerdict:
    """Accepted; ``warning`` says what was done when it was not a plain match."""

    warning: str | None = None


def describe(key: paramiko.PKey) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def load_known(files: Sequence[str]) -> paramiko.HostKeys:
    keys = paramiko.HostKeys()
    for path in files:
        if os.path.isfile(path):
            keys.load(path)
    return keys


def known_types(files: Sequence[str], endpoint: Endpoint) -> list[str]:
    """Key types recorded for ``endpoint``, so negotiation prefers them (as OpenSSH does)."""
    entry = load_known(files).lookup(endpoint.known_hosts_name)
    return list(entry.keys()) if entry else []


def check_host_key(
    host_name: str,
    endpoint: Endpoint,
    key: paramiko.PKey,
    *,
    policy: str,
    files: Sequence[str],
    record_file: str,
) -> HostKeyVerdict:
    recorded = _recorded(files, endpoint)
    if recorded:
        _require_match(host_name, endpoint, key, recorded, files)
        return HostKeyVerdict()
    if policy == "accept-new":
        _record(host_name, endpoint, key, record_file)
        return HostKeyVerdict(
            f"{host_name}: new host key for {endpoint.known_hosts_name} recorded in {record_file}: {describe(key)}"
        )
    if policy == "off":
        return HostKeyVerdict(
            f"WARNING {host_name}: host key checking is OFF; accepted unverified key "
            f"{describe(key)} for {endpoint.known_hosts_name} (anyone on the path could "
            "impersonate this host)"
        )
    raise HostKeyError(
        f"{host_name}: unknown host key for {endpoint.known_hosts_name}: {describe(key)}; "
        f"not in {', '.join(files) or 'any known_hosts file'}. Verify the fingerprint, then add "
        f"it (ssh-keyscan -p {endpoint.port} {endpoint.host} >> FILE) or set "
        "host_key_checking: accept-new"
    )


def _recorded(files: Sequence[str], endpoint: Endpoint) -> list[paramiko.PKey]:
    entry = load_known(files).lookup(endpoint.known_hosts_name)
    return list(entry.values()) if entry else []


def _require_match(
    host_name: str,
    endpoint: Endpoint,
    key: paramiko.PKey,
    recorded: list[paramiko.PKey],
    files: Sequence[str],
) -> None:
    if any(known.get_name() == key.get_name() and known == key for known in recorded):
        return
    known_text = ", ".join(describe(known) for known in recorded)
    raise HostKeyError(
        f"{host_name}: HOST KEY CHANGED for {endpoint.known_hosts_name}: recorded {known_text} "
        f"(in {', '.join(files)}), presented {describe(key)}. Refusing to connect: this could "
        "be a man-in-the-middle. If the change is expected, remove the old key "
        f"(ssh-keygen -R '{endpoint.known_hosts_name}' -f FILE) and connect again"
    )


def _record(host_name: str, endpoint: Endpoint, key: paramiko.PKey, record_file: str) -> None:
    """Append the key under an exclusive lock; a concurrent different record still loses."""
    directory = os.path.dirname(os.path.abspath(record_file))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    with open(record_file, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            recorded = _recorded([record_file], endpoint)
            if recorded:
                _require_match(host_name, endpoint, key, recorded, [record_file])
                return
            handle.seek(0, os.SEEK_END)
            if handle.tell() > 0 and not _ends_with_newline(record_file):
                handle.write("\n")
            handle.write(f"{endpoint.known_hosts_name} {key.get_name()} {key.get_base64()}\n")
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"
