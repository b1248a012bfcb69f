"""Set one HAProxy server's administrative state through the runtime API.

Args: ``socket``, ``backend``, ``server``, ``state`` (ready, drain or maint), ``timeout_s``.
Answer: ``answer`` (HAProxy's reply: empty on success), ``error``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("haproxy_common",)
MUTATES = True

STATES = ("ready", "drain", "maint")
NAME = re.compile(r"^[A-Za-z0-9_.:-]+\Z")


def main(args: dict[str, Any]) -> dict[str, Any]:
    backend, server, state = str(args["backend"]), str(args["server"]), str(args["state"])
    if state not in STATES or not NAME.match(backend) or not NAME.match(server):
        return {"answer": "", "error": f"refused: backend {backend!r}, server {server!r}, state {state!r}"}
    answer = call("haproxy_common", {**args, "command": f"set server {backend}/{server} state {state}"})
    if not answer["error"] and answer["answer"].strip():
        return {"answer": answer["answer"].strip(), "error": answer["answer"].strip()}
    return dict(answer)
