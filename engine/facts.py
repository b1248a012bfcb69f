"""Host facts, gathered in one probe round trip."""

from __future__ import annotations

from typing import Any

from engine.connection.base import Connection


def gather(conn: Connection) -> dict[str, Any]:
    return conn.run_probe("host", {})
