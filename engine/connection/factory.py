"""Pick the transport for a host from its (Ansible-compatible) variables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.connection.base import Connection
from engine.connection.local import LocalConnection
from engine.errors import ValidationError
from engine.model import CONNECTION_TYPES, unknown_connection

LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def connection_kind(host_name: str, host_vars: Mapping[str, Any]) -> str:
    explicit = host_vars.get("ansible_connection") or host_vars.get("connection")
    if explicit:
        problem = unknown_connection(explicit)  # a template that rendered to a typo
        if problem:
            raise ValidationError(f"host {host_name}: {problem}")
        return CONNECTION_TYPES.get(str(explicit), "ssh")
    named = "ansible_host" in host_vars or "ansible_ssh_host" in host_vars  # the old name is an alias
    return "local" if host_name in LOCAL_NAMES and not named else "ssh"


def open_connection(host_name: str, host_vars: Mapping[str, Any]) -> Connection:
    """A lazily-connecting transport for one host (SSH connects on first use)."""
    if connection_kind(host_name, host_vars) == "local":
        python = host_vars.get("ansible_python_interpreter")
        return LocalConnection(host_name, python) if python else LocalConnection(host_name)
    from engine.connection.ssh.connection import SSHConnection

    return SSHConnection.from_host_vars(host_name, host_vars)
