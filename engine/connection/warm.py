"""Connections kept open across runs (``rigger watch``): one per host, reused by every run
while the host's connection settings are the same, closed and opened afresh when they
change or when a run found the host unreachable.

A run borrows them and never closes them; the owner closes them all at the end. Host keys
are checked as on any connection: an SSH connection opened afresh checks known_hosts again.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from engine.connection.base import Connection
from engine.connection.factory import open_connection
from engine.errors import TemplateError


def _settings_key(host_vars: Mapping[str, Any]) -> str:
    """What decides how a host is reached: its ``ansible_*`` variables (address, user, port,
    key, become, interpreter) and rigger's own connection settings."""
    wanted = {k: _value(host_vars, k) for k in host_vars if k.startswith(("ansible_", "rigger_ssh"))}
    return json.dumps(wanted, sort_keys=True, default=str)


def _value(host_vars: Mapping[str, Any], key: str) -> Any:
    """A setting's value; one whose template does not render (the run's variables are
    rendered when read, and one no connection reads may never render) counts as itself."""
    try:
        return host_vars[key]
    except TemplateError:
        return "<does not render>"


class WarmConnections:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, tuple[str, Connection]] = {}

    def get(self, host: str, host_vars: Mapping[str, Any]) -> Connection:
        key = _settings_key(host_vars)
        with self._lock:
            held = self._open.get(host)
            if held is not None and held[0] == key:
                return held[1]
            stale = held[1] if held is not None else None
            conn = open_connection(host, host_vars)
            self._open[host] = (key, conn)
        if stale is not None:
            _quietly_close(stale)
        return conn

    def discard(self, host: str) -> None:
        """Forget a host's connection (it broke): the next run opens a new one."""
        with self._lock:
            held = self._open.pop(host, None)
        if held is not None:
            _quietly_close(held[1])

    def hosts(self) -> list[str]:
        with self._lock:
            return sorted(self._open)

    def close_all(self) -> None:
        with self._lock:
            held, self._open = list(self._open.values()), {}
        for _, conn in held:
            _quietly_close(conn)


def _quietly_close(conn: Connection) -> None:
    try:
        conn.close()
    except Exception:  # a broken connection's close may fail too; it is being dropped
        return
