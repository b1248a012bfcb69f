"""Put HAProxy backend servers in service, drain them, or hold them in maintenance.

Talks to a running HAProxy through its runtime API (`stats socket ... level admin` in its
configuration) on the task's host, the load balancer: `set server BACKEND/SERVER state
ready|drain|maint`. A server already in the declared state is `ok`. `drain` and `maint`
take the server out of routing: HAProxy sends it no new requests, and the task waits until
the requests it holds have finished (its current sessions reach zero, within
`drain_timeout_s`). Taking servers out is refused when no other server of the backend
would still be serving (UP by HAProxy's health check and ready) - unless `allow_empty`.

The runtime change is not written to haproxy.cfg: a reload of HAProxy returns every
server to its configured state (keep `server-state-file` for that, or run this again).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, Result, TaskContext, Unchanged
from modules.routing import haproxy

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["socket", "backend", "servers"],
    "properties": {
        "socket": {
            "type": "string",
            "minLength": 1,
            "description": "HAProxy's admin stats socket on the host: a unix socket path, or "
            "`ipv4@HOST:PORT` for a TCP one.",
        },
        "backend": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9_.:-]+$",
            "description": "The backend whose servers this sets.",
        },
        "servers": {
            "type": "object",
            "minProperties": 1,
            "propertyNames": {"pattern": r"^[A-Za-z0-9_.:-]+$"},
            "additionalProperties": {"enum": list(haproxy.ADMIN_STATES)},
            "description": "Server name -> `ready` (in routing), `drain` (no new requests, "
            "wait for the ones in flight) or `maint` (out, after the same wait).",
        },
        "drain_timeout_s": {
            "type": "number",
            "minimum": 0,
            "default": 120,
            "description": "Seconds to wait for a drained server's requests in flight to finish.",
        },
        "allow_empty": {
            "type": "boolean",
            "default": False,
            "description": "Allow taking out the last server that is serving.",
        },
        "timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 5,
            "description": "Seconds one runtime API command may take.",
        },
    },
}


def _backend(args: Mapping[str, Any]) -> haproxy.Backend:
    return haproxy.Backend(str(args["socket"]), str(args["backend"]), float(args["timeout_s"]))


def _view(found: Mapping[str, haproxy.Server], names: list[str]) -> str:
    return "".join(f"{n}: {found[n].admin_state}\n" for n in names)


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    backend = _backend(args)
    found = haproxy.servers(ctx.conn, backend)
    wanted: dict[str, str] = dict(args["servers"])
    haproxy.known(found, list(wanted), backend)
    moving = sorted(n for n, state in wanted.items() if found[n].admin_state != state)
    if not moving:
        return Unchanged(f"{backend.name}: " + ", ".join(f"{n} {s}" for n, s in sorted(wanted.items())))
    leaving = [n for n, state in wanted.items() if state != "ready"]
    if leaving and not args["allow_empty"]:
        haproxy.refuse_last_serving(found, leaving, backend)
    return Change(
        summary=f"{backend.name}: " + ", ".join(f"{n} {found[n].admin_state} -> {wanted[n]}" for n in moving),
        diffs=(
            Diff(
                f"HAProxy backend {backend.name}", _view(found, moving), "".join(f"{n}: {wanted[n]}\n" for n in moving)
            ),
        ),
        payload={"moving": moving},
        fingerprint={f"haproxy:{backend.name}/{n}": found[n].admin_state for n in moving},
    )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    backend = _backend(args)
    wanted: dict[str, str] = dict(args["servers"])
    drained = {}
    for name in change.payload["moving"]:
        haproxy.set_state(ctx.conn, backend, name, wanted[name])
    for name in change.payload["moving"]:
        if wanted[name] != "ready":
            drained[name] = haproxy.wait_drained(ctx.conn, backend, name, float(args["drain_timeout_s"]), ctx.progress)
    found = haproxy.servers(ctx.conn, backend)
    return Result(
        changed=True,
        msg=change.summary,
        diffs=change.diffs,
        data={"servers": {n: s.as_data() for n, s in found.items()}, "drained": drained},
    )
