"""Read-only: the Ray cluster as its GCS sees it, asked from the head under Ray's python.

Uses Ray's GCS client directly (what ``ray status`` uses): no driver joins the cluster and
no dashboard is needed. Args: ``gcs_address`` (HOST:PORT), ``timeout_s``,
``auth_token_path`` (the cluster's token file when it uses Ray's token authentication).
Answer: ``reachable`` (something accepts connections on the address), ``failure`` (why
there is no answer) and ``nodes`` [{"node_id", "address", "name", "alive", "is_head", "resources"}].
"""

from __future__ import annotations

import importlib
import os
import socket
from typing import Any


def _reachable(address: str, timeout_s: float) -> str | None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{address}: {exc}"


def _node(info: Any, alive_state: int) -> dict[str, Any]:
    return {
        "node_id": info.node_id.hex(),
        "address": info.node_manager_address,
        "name": info.node_name,
        "alive": info.state == alive_state,
        "is_head": bool(info.is_head_node),
        "resources": {str(key): float(value) for key, value in info.resources_total.items()},
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    timeout_s = float(args.get("timeout_s", 10))
    unreachable = _reachable(args["gcs_address"], min(timeout_s, 3.0))
    if unreachable:
        return {"reachable": False, "failure": unreachable, "nodes": []}
    # before Ray is imported: it reads its authentication settings once
    if args.get("auth_token_path"):
        os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(args["auth_token_path"])})
    else:
        os.environ["RAY_AUTH_MODE"] = "disabled"
    raylet = importlib.import_module("ray._raylet")
    gcs_pb2 = importlib.import_module("ray.core.generated.gcs_pb2")
    client = raylet.GcsClient(address=args["gcs_address"])
    try:
        infos = client.get_all_node_info(timeout=timeout_s)
    except Exception as exc:  # the GCS answered the connect but not the call
        return {"reachable": True, "failure": f"{type(exc).__name__}: {exc}", "nodes": []}
    alive = gcs_pb2.GcsNodeInfo.GcsNodeState.Value("ALIVE")
    return {"reachable": True, "failure": None, "nodes": [_node(info, alive) for info in infos.values()]}
