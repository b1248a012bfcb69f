"""HAProxy's view of a backend and the changes rigger makes to it, over the runtime API.

Drain is HAProxy's own: a server in ``drain`` takes no new requests while the ones it
holds finish; rigger then waits for its current sessions (``scur``) to reach zero. A
server counts as serving when HAProxy's health check says UP and it is not drained or in
maintenance: the rollout never takes the last one of those out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import ScopedConnection, TaskFailed

POLL_S = 0.5
ADMIN_STATES = ("ready", "drain", "maint")


@dataclass(frozen=True)
class Backend:
    socket: str
    name: str
    timeout_s: float = 5.0

    def probe_args(self) -> dict[str, Any]:
        return {"socket": self.socket, "backend": self.name, "timeout_s": self.timeout_s}


@dataclass(frozen=True)
class Server:
    name: str
    status: str
    current_sessions: int
    total_sessions: int

    @property
    def admin_state(self) -> str:
        """ready, drain or maint, as ``set server ... state`` names them."""
        if self.status.startswith("MAINT"):
            return "maint"
        if self.status.startswith("DRAIN") or "DRAIN" in self.status:
            return "drain"
        return "ready"

    @property
    def serving(self) -> bool:
        return self.admin_state == "ready" and self.status.startswith(("UP", "no check"))

    def as_data(self) -> dict[str, Any]:
        return {"server": self.name, "status": self.status, "current_sessions": self.current_sessions,
                "total_sessions": self.total_sessions}  # fmt: skip


def servers(conn: ScopedConnection, backend: Backend) -> dict[str, Server]:
    answer = conn.run_probe("haproxy_view", backend.probe_args())
    if answer["error"]:
        raise TaskFailed(f"HAProxy runtime API at {backend.socket}: {answer['error']}")
    found = {
        str(s["server"]): Server(
            str(s["server"]), str(s["status"]), int(s["current_sessions"]), int(s["total_sessions"])
        )
        for s in answer["servers"]
    }
    if not found:
        raise TaskFailed(f"HAProxy at {backend.socket} has no backend {backend.name!r} with servers")
    return found


def known(found: Mapping[str, Server], names: Sequence[str], backend: Backend) -> None:
    missing = [n for n in names if n not in found]
    if missing:
        raise TaskFailed(
            f"HAProxy backend {backend.name!r} has no server {', '.join(map(repr, missing))} "
            f"(it has {', '.join(sorted(found))})"
        )


def others_serving(found: Mapping[str, Server], leaving: Sequence[str]) -> list[str]:
    return sorted(name for name, s in found.items() if s.serving and name not in leaving)


def refuse_last_serving(found: Mapping[str, Server], leaving: Sequence[str], backend: Backend) -> None:
    """Taking ``leaving`` out must leave at least one server that serves healthily."""
    if not others_serving(found, leaving):
        states = ", ".join(f"{n} {s.status}" for n, s in sorted(found.items()))
        raise TaskFailed(
            f"refusing to take {', '.join(leaving)} out of HAProxy backend {backend.name!r}: no other "
            f"server would be serving ({states})"
        )


def set_state(conn: ScopedConnection, backend: Backend, server: str, state: str) -> None:
    answer = conn.run_probe("haproxy_set", {**backend.probe_args(), "server": server, "state": state})
    if answer["error"]:
        raise TaskFailed(f"HAProxy: set server {backend.name}/{server} state {state}: {answer['error']}")


def wait_drained(
    conn: ScopedConnection,
    backend: Backend,
    server: str,
    timeout_s: float,
    progress: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Wait until HAProxy counts no session on ``server``; the evidence as data."""
    started = clock()
    last = servers(conn, backend)[server]
    while last.current_sessions > 0:
        waited = clock() - started
        if waited >= timeout_s:
            raise TaskFailed(
                f"HAProxy {backend.name}/{server} still has {last.current_sessions} requests in flight "
                f"after {timeout_s:g}s of drain"
            )
        progress(f"{backend.name}/{server}: {last.current_sessions} requests in flight")
        time.sleep(POLL_S)
        last = servers(conn, backend)[server]
    return {"drained_in_s": round(clock() - started, 2), **last.as_data()}
