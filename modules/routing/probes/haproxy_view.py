"""Read-only: the servers of HAProxy backends as the runtime API reports them (``show stat``).

Args: ``socket``, ``backend`` (None: every backend), ``timeout_s``.
Answer: ``servers`` [{"backend", "server", "status" (UP, DOWN, DRAIN, MAINT, "UP 1/2", "no
check"...), "current_sessions" (scur), "total_sessions" (stot), "address"}], ``error``.
"""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("haproxy_common",)

FRONT_AND_BACK = ("FRONTEND", "BACKEND")


def parse_stat(text: str, backend: str | None) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise ValueError(f"not a 'show stat' answer: {text[:200]!r}")
    rows = csv.DictReader([lines[0][2:], *lines[1:]])
    found = []
    for row in rows:
        if row.get("svname") in FRONT_AND_BACK or (backend and row.get("pxname") != backend):
            continue
        found.append(
            {
                "backend": row.get("pxname"),
                "server": row.get("svname"),
                "status": row.get("status"),
                "current_sessions": int(row.get("scur") or 0),
                "total_sessions": int(row.get("stot") or 0),
                "address": row.get("addr"),
            }
        )
    return found


def main(args: dict[str, Any]) -> dict[str, Any]:
    answer = call("haproxy_common", {**args, "command": "show stat"})
    if answer["error"]:
        return {"servers": [], "error": answer["error"]}
    try:
        return {"servers": parse_stat(answer["answer"], args.get("backend")), "error": None}
    except ValueError as exc:
        return {"servers": [], "error": str(exc)}
