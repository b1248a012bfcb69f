"""Host key checking: known_hosts files, accept-new recording under a lock, loud refusals.

Policy (``host_key_checking``):
- ``strict`` (default): the key must already be in ``~/.ssh/known_hosts`` or the
  inventory's ``known_hosts_file``; an unknown host is refused, naming the fingerprint.
- ``accept-new``: an unknown host's key is recorded (under a file lock) and accepted.
- ``off``: an unknown host is accepted without recording, with a loud warning.
In every mode a key that differs from the recorded one is refused, with both fingerprints,
and a key on an ``@revoked`` line is refused. A known_hosts line that cannot be read (bad
base64, a truncated key, too few fields) fails closed: the host is unreachable with the
file and line named, never skipped quietly and never a crash.
"""

from __future__ import annotations

import base64
import fcntl
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import paramiko
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

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


REVOKED = "@revoked"


class KnownHosts(paramiko.HostKeys):
    """Recorded keys, plus the keys of ``@revoked`` lines."""

    def __init__(self) -> None:
        super().__init__()
        self.revoked: list[paramiko.PKey] = []


def load_known(files: Sequence[str], host_name: str = "") -> KnownHosts:
    keys = KnownHosts()
    for path in files:
        parsed = _parsed(path)
        if parsed is None:
            continue
        if parsed.error is not None:
            raise HostKeyError(f"{host_name}: {parsed.error}" if host_name else parsed.error)
        keys._entries.extend(parsed.entries)  # type: ignore[attr-defined]  # as HostKeys.load does
        keys.revoked.extend(parsed.revoked)
    return keys


@dataclass(frozen=True)
class _ParsedFile:
    """One known_hosts file's content, parsed once: a fleet of N hosts connects N times to the
    same file of N lines, and parsing (a key object per line) made that N x N. The file is
    still read on every use; only identical content reuses the parse."""

    content: bytes
    entries: tuple[HostKeyEntry, ...] = ()
    revoked: tuple[paramiko.PKey, ...] = ()
    error: str | None = None  # the first bad line: every host using the file fails closed


_PARSED: dict[str, _ParsedFile] = {}
_PARSED_LOCK = threading.Lock()


def _parsed(path: str) -> _ParsedFile | None:
    """``path`` parsed (None when it is not a file)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except OSError as exc:
        return _ParsedFile(b"", error=f"{path}: cannot read this known_hosts file: {exc}")
    with _PARSED_LOCK:
        cached = _PARSED.get(path)
        if cached is None or cached.content != content:
            cached = _PARSED[path] = _parse(path, content)
    return cached


def _parse(path: str, content: bytes) -> _ParsedFile:
    try:
        lines = content.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        return _ParsedFile(content, error=f"{path}: cannot read this known_hosts file: {exc}")
    entries: list[HostKeyEntry] = []
    revoked: list[paramiko.PKey] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#") or line.startswith("@cert-authority"):
            continue  # host certificates are not used by rigger
        marker, _, rest = line.partition(" ") if line.startswith("@") else ("", "", line)
        if marker not in ("", REVOKED):
            error = f"{path}:{number}: unknown known_hosts marker {marker!r}; refusing to connect"
            return _ParsedFile(content, error=error)
        try:
            entry = _entry(rest.strip(), f"{path}:{number}")
        except HostKeyError as exc:
            return _ParsedFile(content, error=str(exc))
        if entry is None or entry.key is None:
            continue
        if marker == REVOKED:
            revoked.append(entry.key)
        else:
            entries.append(entry)
    return _ParsedFile(content, tuple(entries), tuple(revoked))


def _entry(line: str, where: str) -> HostKeyEntry | None:
    """One parsed line; None for a key type paramiko does not know (skipped, as before)."""
    if len(line.split()) < 3:
        raise HostKeyError(
            f"{where}: corrupt known_hosts line (expected 'HOSTS KEYTYPE BASE64KEY'); refusing to connect "
            "until it is fixed or removed"
        )
    try:
        entry = HostKeyEntry.from_line(line)
        if entry is not None and entry.key is not None and entry.key.asbytes() != base64.b64decode(line.split()[2]):
            raise ValueError(f"the key data is not one whole {entry.key.get_name()} key")
    except Exception as exc:  # InvalidHostKey, SSHException, ValueError: all mean a bad line
        reason = exc.args[-1] if isinstance(exc, InvalidHostKey) else exc
        raise HostKeyError(
            f"{where}: corrupt known_hosts line ({reason}); refusing to connect until it is fixed or removed"
        ) from None
    return entry


def known_types(files: Sequence[str], endpoint: Endpoint, host_name: str = "") -> list[str]:
    """Key types recorded for ``endpoint``, so negotiation prefers them (as OpenSSH does)."""
    entry = load_known(files, host_name).lookup(endpoint.known_hosts_name)
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
    known = load_known(files, host_name)
    if any(revoked.get_name() == key.get_name() and revoked == key for revoked in known.revoked):
        raise HostKeyError(
            f"{host_name}: host key {describe(key)} for {endpoint.known_hosts_name} is marked @revoked "
            f"in {', '.join(files)}; refusing to connect"
        )
    recorded = _recorded(files, endpoint, host_name)
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


def _recorded(files: Sequence[str], endpoint: Endpoint, host_name: str = "") -> list[paramiko.PKey]:
    entry = load_known(files, host_name).lookup(endpoint.known_hosts_name)
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
            recorded = _recorded([record_file], endpoint, host_name)
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
