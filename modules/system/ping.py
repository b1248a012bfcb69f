"""Check that rigger can reach the host and run its Python there; answers `pong`.

Ansible's `ping`: not ICMP. One probe round trip runs on the host (over SSH, or locally)
and sends `data` back, so a reachable host whose Python is missing or broken fails here.
`data: crash` fails the task on purpose, as Ansible's module raises then. It changes
nothing, so it runs the same in check mode. The result's `ping` is `data`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, Unchanged

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "data": {
            "type": "string",
            "default": "pong",
            "description": "What the host sends back as `ping`; `crash` makes the task fail.",
        },
    },
}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    if args["data"] == "crash":
        raise TaskFailed("boom: ping was asked to crash (data: crash)")
    answer = ctx.conn.run_probe("ping", {"data": args["data"]})
    return Unchanged(str(answer["ping"]), {"ping": answer["ping"]})
