"""Open one authenticated paramiko Transport to a host (directly or through a jump host).

Every wait is bounded by ``connect_timeout_s``: TCP connect, banner, key exchange, auth.
The socket gets TCP_NODELAY (without it each small request stalls ~44 ms on Nagle plus
delayed ACK) and TCP_USER_TIMEOUT (3 keepalive periods: a host that silently vanishes
mid-task is dropped, not waited on forever). Weak algorithms are disabled. Every failure is a ``HostUnreachable`` with a
one-line message that never contains a secret.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import paramiko

from engine.connection.ssh.hostkeys import HostKeyError, check_host_key, known_types
from engine.connection.ssh.options import Endpoint, SSHOptions
from engine.errors import HostUnreachable

# paramiko's transport thread logs every failed handshake with its traceback at ERROR; with
# no handler of its own that reaches the terminal (logging's last resort) beside rigger's
# one-line "unreachable". Each failure is reported here, once, in words.
_PARAMIKO_LOG = logging.getLogger("paramiko")
_PARAMIKO_LOG.addHandler(logging.NullHandler())
_PARAMIKO_LOG.propagate = False

DISABLED_ALGORITHMS = {
    "ciphers": [
        "aes128-cbc",
        "aes192-cbc",
        "aes256-cbc",
        "3des-cbc",
        "blowfish-cbc",
        "cast128-cbc",
        "arcfour",
        "arcfour128",
        "arcfour256",
    ],
    "macs": ["hmac-sha1", "hmac-sha1-96", "hmac-md5", "hmac-md5-96"],
    "kex": [
        "diffie-hellman-group1-sha1",
        "diffie-hellman-group14-sha1",
        "diffie-hellman-group-exchange-sha1",
    ],
    "keys": ["ssh-dss"],
    "pubkeys": ["ssh-dss"],
}
MIN_DEAD_PEER_S = 30.0
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")


@dataclass
class OpenedTransport:
    transport: paramiko.Transport
    jump: paramiko.Transport | None
    warnings: list[str]

    def close(self) -> None:
        for transport in (self.transport, self.jump):
            if transport is not None:
                transport.close()


def open_transport(options: SSHOptions) -> OpenedTransport:
    warnings: list[str] = []
    jump_transport = None
    if options.jump is not None:
        jump_user = options.jump.user or options.user
        jump_sock = _tcp(options, options.jump, "jump host ")
        jump_transport = _handshake(options, options.jump, jump_sock, jump_user, warnings)
        sock: Any = _tunnel(options, jump_transport)
    else:
        sock = _tcp(options, options.target, "")
    try:
        transport = _handshake(options, options.target, sock, options.user, warnings)
    except BaseException:
        if jump_transport is not None:
            jump_transport.close()
        raise
    return OpenedTransport(transport, jump_transport, warnings)


def _unreachable(options: SSHOptions, what: str) -> HostUnreachable:
    return HostUnreachable(f"{options.host_name}: {what}")


def _tcp(options: SSHOptions, endpoint: Endpoint, role: str) -> socket.socket:
    timeout = options.connect_timeout_s
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
    except ConnectionRefusedError:
        raise _unreachable(options, f"{role}{endpoint.host}:{endpoint.port}: connection refused") from None
    except TimeoutError:
        raise _unreachable(
            options, f"{role}{endpoint.host}:{endpoint.port}: connect timed out after {timeout:g}s"
        ) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise _unreachable(options, f"{role}{endpoint.host}:{endpoint.port}: {reason}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if options.keepalive_s and hasattr(socket, "TCP_USER_TIMEOUT"):
        # with keepalives flowing, a host that vanished without a FIN/RST shows up as
        # unacknowledged data: the kernel then drops the connection instead of waiting
        # ~15 minutes of retransmissions
        user_timeout_ms = int(max(3 * options.keepalive_s, MIN_DEAD_PEER_S) * 1000)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, user_timeout_ms)
    return sock


def _tunnel(options: SSHOptions, jump: paramiko.Transport) -> paramiko.Channel:
    target = options.target
    try:
        return jump.open_channel(
            "direct-tcpip",
            (target.host, target.port),
            ("127.0.0.1", 0),
            timeout=options.connect_timeout_s,
        )
    except (paramiko.SSHException, OSError, EOFError) as exc:
        jump.close()
        raise _unreachable(
            options, f"jump host {options.jump} could not reach {target.host}:{target.port}: {exc}"
        ) from None


def _handshake(
    options: SSHOptions, endpoint: Endpoint, sock: Any, user: str, warnings: list[str]
) -> paramiko.Transport:
    where = f"{endpoint.host}:{endpoint.port}"
    transport = paramiko.Transport(sock, disabled_algorithms=DISABLED_ALGORITHMS)
    transport.banner_timeout = options.connect_timeout_s
    transport.handshake_timeout = options.connect_timeout_s
    transport.auth_timeout = options.connect_timeout_s
    try:
        _prefer_known_key_types(transport, options, endpoint)
        try:
            transport.start_client(timeout=options.connect_timeout_s)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise _unreachable(options, f"{where}: SSH handshake failed: {_handshake_reason(exc)}") from None
        if not transport.is_active() or not transport.host_key:
            # start_client returns quietly when its timeout passes
            raise _unreachable(
                options,
                f"{where}: SSH handshake failed: no answer within {options.connect_timeout_s:g}s",
            )
        verdict = check_host_key(
            options.host_name,
            endpoint,
            transport.get_remote_server_key(),
            policy=options.host_key_checking,
            files=options.known_hosts_files,
            record_file=options.record_known_hosts_file,
        )
        if verdict.warning:
            warnings.append(verdict.warning)
        _authenticate(options, transport, user, where)
        if options.keepalive_s:
            transport.set_keepalive(max(1, int(options.keepalive_s)))
        return transport
    except BaseException:
        transport.close()
        raise


def _prefer_known_key_types(transport: paramiko.Transport, options: SSHOptions, endpoint: Endpoint) -> None:
    recorded = known_types(options.known_hosts_files, endpoint, options.host_name)
    if not recorded:
        return
    security = transport.get_security_options()
    offered = list(security.key_types)
    security.key_types = [t for t in offered if t in recorded] + [t for t in offered if t not in recorded]


def _handshake_reason(exc: BaseException) -> str:
    if "protocol banner" in str(exc):  # something answered on the port, but not an SSH server
        return (
            "the port did not answer as SSH (no SSH protocol banner): is ansible_port the host's SSH port, "
            "and is sshd (not another service) listening there?"
        )
    return _reason(exc)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _authenticate(options: SSHOptions, transport: paramiko.Transport, user: str, where: str) -> None:
    tried: list[str] = []
    for label, load_key in _candidate_keys(options):
        try:
            key = load_key()
        except UnprotectedKey as exc:
            tried.append(f"{label} ({exc})")
            continue
        except paramiko.PasswordRequiredException:
            tried.append(f"{label} (protected by a passphrase and none was given: load it into ssh-agent)")
            continue
        except (paramiko.SSHException, OSError, ValueError) as exc:
            tried.append(f"{label} (unreadable: {_reason(exc)})")
            continue
        try:
            transport.auth_publickey(user, key)
        except paramiko.AuthenticationException as exc:
            if _timed_out(exc):
                raise _auth_timeout(options, where, label) from None
            tried.append(label)
            continue
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise _unreachable(options, f"{where}: authentication aborted: {_reason(exc)}") from None
        if transport.is_authenticated():
            return
    if options.password is not None and _password_login(options, transport, user, where):
        return
    if options.password is not None:
        tried.append("the password (ansible_password)")
    attempts = ", ".join(tried) or "no keys: set ansible_ssh_private_key_file or start ssh-agent"
    raise HostUnreachable(f"{options.host_name}: authentication failed for {user}@{where} (tried: {attempts})")


def _timed_out(exc: paramiko.AuthenticationException) -> bool:
    """paramiko raises the same exception for a refused key and for no answer within
    ``auth_timeout``; only its message tells them apart."""
    return str(exc).strip().rstrip(".").lower() == "authentication timeout"


def _auth_timeout(options: SSHOptions, where: str, label: str) -> HostUnreachable:
    # A busy host (sshd starved of CPU, a slow AuthorizedKeysCommand or LDAP) is not a wrong
    # key: "authentication failed" would send the operator to check a key that is fine.
    return _unreachable(
        options,
        f"{where}: no answer to authentication with {label} within {options.connect_timeout_s:g}s "
        "(the host is slow to authenticate; nothing was refused: ssh_connect_timeout_s raises the limit)",
    )


def _password_login(options: SSHOptions, transport: paramiko.Transport, user: str, where: str) -> bool:
    """``ansible_password`` / ``ansible_ssh_pass``: tried after the keys, as OpenSSH does."""
    try:
        transport.auth_password(user, options.password or "")
    except paramiko.AuthenticationException as exc:
        if _timed_out(exc):
            raise _auth_timeout(options, where, "the password (ansible_password)") from None
        return False
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise _unreachable(options, f"{where}: authentication aborted: {_reason(exc)}") from None
    return bool(transport.is_authenticated())


class UnprotectedKey(Exception):
    """A private key file others may read: OpenSSH ignores it, and so does rigger."""


def load_private_key(path: str) -> paramiko.PKey:
    """The key in ``path``, refused as OpenSSH refuses it when group or others may read it
    (sshkey_perm_ok: owned by us and mode & 077). A passphrase-protected key raises
    PasswordRequiredException whichever format it is in."""
    info = os.stat(path)
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        raise UnprotectedKey(
            f"UNPROTECTED PRIVATE KEY FILE: permissions {stat.S_IMODE(info.st_mode):04o} are too open, "
            f"others may read it; it is ignored, as OpenSSH ignores it: chmod 600 {path}"
        )
    try:
        return paramiko.PKey.from_path(path)
    except TypeError as exc:  # cryptography's word for an encrypted key loaded without a password
        if "password" in str(exc).lower():
            raise paramiko.PasswordRequiredException(str(exc)) from None
        raise ValueError(str(exc)) from None


def _candidate_keys(options: SSHOptions) -> list[tuple[str, Callable[[], paramiko.PKey]]]:
    if options.key_file:
        path = options.key_file
        return [(f"key file {path}", functools.partial(load_private_key, path))]
    candidates: list[tuple[str, Callable[[], paramiko.PKey]]] = []
    if os.environ.get("SSH_AUTH_SOCK"):
        try:
            agent_keys = paramiko.Agent().get_keys()
        except paramiko.SSHException:
            agent_keys = ()
        for index, agent_key in enumerate(agent_keys):
            candidates.append((f"ssh-agent key {index + 1}", functools.partial(_same, agent_key)))
    for raw in DEFAULT_IDENTITIES:
        path = os.path.expanduser(raw)
        if os.path.isfile(path):
            candidates.append((path, functools.partial(load_private_key, path)))
    return candidates


def _same(key: paramiko.PKey) -> paramiko.PKey:
    return key


__all__ = ["DISABLED_ALGORITHMS", "HostKeyError", "OpenedTransport", "open_transport"]
