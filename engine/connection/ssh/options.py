"""SSH settings for one host, read once from its (Ansible-compatible) variables.

Recognised variables: ``ansible_host``, ``ansible_port``, ``ansible_user``, ``ansible_password``
(each also under its old ``ansible_ssh_*`` name: ``ansible_ssh_host``, ``_port``, ``_user``,
``_pass``; the new name wins), ``ansible_ssh_private_key_file``, ``ansible_python_interpreter`` (default ``python3``),
``ansible_ssh_common_args`` (``-J user@host[:port]`` and ``-o ProxyJump=...``), ``ssh_jump``,
``host_key_checking`` (``strict`` | ``accept-new`` | ``off``), ``known_hosts_file``,
``ansible_become_password`` / ``become_password``, ``ssh_connect_timeout_s``,
``ssh_keepalive_s``, ``ssh_remote_python`` (default true: commands and probes go through
one persistent remote python per host; false: one exec channel per command).
Secrets (the become password) are kept out of ``repr``.
"""

from __future__ import annotations

import getpass
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.connection.interpreter import interpreter_argv
from engine.errors import ValidationError

HOST_KEY_POLICIES = ("strict", "accept-new", "off")
DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_KEEPALIVE_S = 15.0


@dataclass(frozen=True)
class Endpoint:
    """Where to open a TCP connection and as whom to log in."""

    host: str
    port: int = 22
    user: str | None = None

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH uses for this endpoint in known_hosts."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def __str__(self) -> str:
        user = f"{self.user}@" if self.user else ""
        return f"{user}{self.host}:{self.port}"


@dataclass(frozen=True)
class SSHOptions:
    host_name: str
    target: Endpoint
    key_file: str | None = None
    python: str = "python3"
    jump: Endpoint | None = None
    host_key_checking: str = "strict"
    known_hosts_files: tuple[str, ...] = ()
    record_known_hosts_file: str = ""
    become_password: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    keepalive_s: float = DEFAULT_KEEPALIVE_S
    remote_python: bool = True

    @property
    def user(self) -> str:
        return self.target.user or getpass.getuser()


def parse_endpoint(text: str, default_user: str | None = None) -> Endpoint:
    """``user@host:port``, ``host:port``, ``[v6]:port``, or ``ssh://user@host:port``."""
    spec = text.strip().removeprefix("ssh://")
    if not spec:
        raise ValidationError("empty jump host")
    user, _, hostport = spec.rpartition("@")
    host, port = hostport, 22
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        if rest.startswith(":"):
            port = _port(rest[1:], text)
    elif hostport.count(":") == 1:
        host, _, port_text = hostport.partition(":")
        port = _port(port_text, text)
    return Endpoint(host=host, port=port, user=user or default_user)


def _port(text: str, where: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ValidationError(f"invalid port {text!r} in {where!r}") from None
    if not 0 < port < 65536:
        raise ValidationError(f"port {port} out of range in {where!r}")
    return port


def jump_from_common_args(common_args: str) -> str | None:
    """The ProxyJump target in ``ansible_ssh_common_args`` (``-J x`` or ``-o ProxyJump=x``)."""
    words = shlex.split(common_args)
    for index, word in enumerate(words):
        value = _option_value(words, index, word)
        if value:
            return value
    return None


def _option_value(words: list[str], index: int, word: str) -> str | None:
    following = words[index + 1] if index + 1 < len(words) else ""
    if word == "-J":
        return following or None
    if word.startswith("-J") and len(word) > 2:
        return word[2:]
    option = following if word == "-o" else word[2:] if word.startswith("-o") else ""
    key, sep, value = option.replace(" ", "=", 1).partition("=")
    if sep and key.lower() == "proxyjump" and value.lower() != "none":
        return value
    return None


def options_from_host_vars(host_name: str, host_vars: Mapping[str, Any]) -> SSHOptions:
    user = _text(host_vars.get("ansible_user") or host_vars.get("ansible_ssh_user"))
    port = _port(str(host_vars.get("ansible_port") or host_vars.get("ansible_ssh_port") or 22), host_name)
    target = Endpoint(str(host_vars.get("ansible_host") or host_vars.get("ansible_ssh_host") or host_name), port, user)
    jump_text = _text(host_vars.get("ssh_jump")) or jump_from_common_args(
        str(host_vars.get("ansible_ssh_common_args") or "")
    )
    if jump_text and "," in jump_text:
        raise ValidationError(f"{host_name}: chained jump hosts ({jump_text}) are not supported")
    policy = str(host_vars.get("host_key_checking", "strict"))
    policy = {"true": "strict", "false": "off", "yes": "strict", "no": "off"}.get(policy.lower(), policy)
    if policy not in HOST_KEY_POLICIES:
        raise ValidationError(
            f"{host_name}: host_key_checking must be one of {', '.join(HOST_KEY_POLICIES)}, not {policy!r}"
        )
    inventory_known = _text(host_vars.get("known_hosts_file"))
    user_known = os.path.expanduser("~/.ssh/known_hosts")
    files = tuple(dict.fromkeys(p for p in (user_known, inventory_known and _expand(inventory_known)) if p))
    key_file = _text(host_vars.get("ansible_ssh_private_key_file") or host_vars.get("ansible_private_key_file"))
    return SSHOptions(
        host_name=host_name,
        target=target,
        key_file=_expand(key_file) if key_file else None,
        python=shlex.join(interpreter_argv(host_vars.get("ansible_python_interpreter") or "python3", host_name)),
        jump=parse_endpoint(jump_text, default_user=user) if jump_text else None,
        host_key_checking=policy,
        known_hosts_files=files,
        record_known_hosts_file=_expand(inventory_known) if inventory_known else user_known,
        become_password=_text(host_vars.get("ansible_become_password") or host_vars.get("become_password")),
        password=_text(host_vars.get("ansible_password") or host_vars.get("ansible_ssh_pass")),
        connect_timeout_s=_seconds(host_vars, "ssh_connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S),
        keepalive_s=_seconds(host_vars, "ssh_keepalive_s", DEFAULT_KEEPALIVE_S),
        remote_python=_flag(host_vars.get("ssh_remote_python", host_vars.get("ssh_remote_agent", True))),
    )


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "off", "0", "")
    return bool(value)


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _expand(path: str) -> str:
    return os.path.expanduser(os.path.expandvars(path))


def _seconds(host_vars: Mapping[str, Any], name: str, default: float) -> float:
    value = host_vars.get(name, default)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValidationError(f"{name} must be a number of seconds, not {value!r}") from None
    if seconds < 0:
        raise ValidationError(f"{name} must not be negative, not {value!r}")
    return seconds
