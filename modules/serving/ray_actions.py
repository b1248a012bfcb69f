"""Start and stop the Ray nodes of a cluster, and wait for the head's view to show them.

A node is started with the ``vllm_launch`` probe (any command, detached in its own
session, output to a log, a state file written): ``ray start --block`` stays up as the
node's owner, so the session holds exactly that node's daemons. Once its raylet runs, the
state file gains the raylet's pid and start time and the node id, the identity later
runs check.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from engine.module_api import ScopedConnection, TaskFailed
from modules.serving import ray_status
from modules.serving.ray_nodes import ClusterSpec, NodeSpec, ray_command
from modules.serving.ray_status import ClusterView, NodeStatus
from modules.serving.session import describe_process

POLL_S = 1.0
LOG_LINES = 15


def _log_tail(conn: ScopedConnection, path: str) -> str:
    data = conn.read_file(path) or b""
    lines = data.decode("utf-8", "replace").splitlines()[-LOG_LINES:]
    return "\n".join(f"  | {line}" for line in lines)


def launch_node(conn: ScopedConnection, node: NodeSpec, cluster: ClusterSpec) -> dict[str, Any]:
    record = {
        "cluster": cluster.name,
        "node": node.name,
        "node_ip": node.ip,
        "gcs_address": cluster.gcs_address,
        "temp_dir": cluster.temp_dir,
        "spec_hash": node.spec_hash(),
        "env": dict(node.env),
    }
    answer = conn.run_probe(
        "vllm_launch",
        {
            "argv": list(node.argv),
            "env": dict(node.env),
            "log_path": node.log_path,
            "state_path": node.state_path,
            "record": record,
        },
    )
    if answer.get("error"):
        raise TaskFailed(f"ray_cluster: {node.name}: {answer['error']}", {"argv": list(node.argv)})
    return answer


def _raylet(status: NodeStatus) -> Mapping[str, Any] | None:
    return next((p for p in status.session if p["name"] == "raylet" and p.get("node_id")), None)


def wait_raylet(
    conn: ScopedConnection, python: str, node: NodeSpec, port: int, deadline: float
) -> tuple[NodeStatus, Mapping[str, Any]]:
    """The node's own raylet, once ``ray start`` has started it; fail if ray start exits."""
    while True:
        status = ray_status.read_node(conn, python, node, port)
        raylet = _raylet(status)
        if raylet is not None:
            return status, raylet
        if not status.answer.get("leader_alive"):
            raise TaskFailed(
                f"ray_cluster: ray start on {node.name} exited before its raylet ran; "
                f"last lines of {node.log_path}:\n{_log_tail(conn, node.log_path)}"
            )
        if time.monotonic() >= deadline:
            tail = _log_tail(conn, node.log_path)
            raise TaskFailed(f"ray_cluster: no raylet on {node.name} in time; last lines of {node.log_path}:\n{tail}")
        time.sleep(POLL_S)


def wait_view(
    conn: ScopedConnection,
    python: str,
    cluster: ClusterSpec,
    ready: Callable[[ClusterView], str | None],
    deadline: float,
) -> ClusterView:
    """Poll the head's view until ``ready`` finds nothing missing; at the deadline fail
    with what is missing."""
    while True:
        view = ray_status.read_view(conn, python, cluster)
        missing = (
            ready(view)
            if view.reachable and not view.error
            else f"the GCS at {cluster.gcs_address} does not answer ({view.error})"
        )
        if missing is None:
            return view
        if time.monotonic() >= deadline:
            raise TaskFailed(f"ray_cluster: the cluster did not come up in time: {missing}")
        time.sleep(POLL_S)


def record_identity(
    conn: ScopedConnection, status: NodeStatus, raylet: Mapping[str, Any], node_view: Mapping[str, Any]
) -> dict[str, Any]:
    """Add the raylet's identity and the node as Ray registered it to the state file."""
    record = {
        **dict(status.record or {}),
        "raylet": {"pid": raylet["pid"], "start_time": raylet["start_time"]},
        "node_id": raylet["node_id"],
        "registered_address": node_view["address"],
        "sockets": _socket_paths(raylet["cmdline"]),
        # by identity, so Ray's daemons are still known as this node's once `ray start` is gone
        "members": [{"pid": int(p["pid"]), "start_time": int(p["start_time"])} for p in status.session],
    }
    conn.write_file(status.spec.state_path, json.dumps(record, indent=2, sort_keys=True).encode(), mode=0o600)
    return record


def _socket_paths(cmdline: str) -> list[str]:
    prefixes = ("--raylet_socket_name=", "--store_socket_name=")
    return [item.split("=", 1)[1] for item in cmdline.split() if item.startswith(prefixes)]


def settle_node(
    conn: ScopedConnection,
    head_conn: ScopedConnection,
    python: str,
    node: NodeSpec,
    cluster: ClusterSpec,
    port: int,
    deadline: float,
) -> dict[str, Any]:
    """Wait for a launched node's raylet and for the head's view to list it; record both."""
    status, raylet = wait_raylet(conn, python, node, port, deadline)
    node_id = str(raylet["node_id"])
    view = wait_view(
        head_conn, python, cluster, lambda v: None if v.alive(node_id) else f"{node.name} is not in the view", deadline
    )
    return record_identity(conn, status, raylet, view.nodes[node_id])


def _signal(conn: ScopedConnection, procs: Sequence[Mapping[str, Any]], term_s: float) -> dict[str, Any]:
    targets = [{"pid": int(p["pid"]), "start_time": int(p["start_time"])} for p in procs]
    if not targets:
        return {"terminated": [], "killed": [], "gone": [], "skipped": [], "alive": []}
    return conn.run_probe("signal_procs", {"targets": targets, "term_timeout_s": term_s, "kill_after_term": True})


def _all_ray_is_ours(status: NodeStatus) -> bool:
    """``ray stop`` kills every Ray process on the host: only when all of them are this node's."""
    return bool(status.session) and all(p["in_session"] for p in status.answer.get("ray_processes") or ())


def stop_node(conn: ScopedConnection, python: str, status: NodeStatus, term_s: float) -> str:
    """Stop what runs of this node's session: ``ray stop --force`` when every Ray process on
    the host is this node's, else its recorded processes only (raylet first, as Ray does)."""
    if not status.running:
        return f"{status.spec.name}: nothing running"
    how = "signalled its processes (other Ray processes run on the host)"
    if _all_ray_is_ours(status):
        conn.run([*ray_command(python), "stop", "--force"], env=dict(status.spec.env), check=False)
        how = "ray stop --force"
    raylets = [p for p in status.session if p["name"] == "raylet"]
    answers = [
        _signal(conn, raylets, term_s),
        _signal(conn, [p for p in status.session if p not in raylets], min(term_s, 5.0)),
    ]
    left = [
        item
        for answer in answers
        for item in (*answer["alive"], *answer["skipped"])
        if not str(item.get("reason")).startswith("pid reused")  # it exited; the pid is another's now
    ]
    if left:
        detail = "; ".join(f"pid {p['pid']}: {p.get('reason')}" for p in left)
        raise TaskFailed(f"ray_cluster: could not stop the Ray node on {status.spec.name}: {detail}")
    return f"{status.spec.name}: {len(status.session)} processes stopped ({how})"


def verify_stopped(conn: ScopedConnection, python: str, status: NodeStatus, port: int, deadline: float) -> list[str]:
    """Wait until nothing of the node is left (processes, the GCS port on the head); remove
    its recorded socket files; what still remains at the deadline, as warnings."""
    while True:
        now = ray_status.read_node(conn, python, status.spec, port)
        held = now.spec.is_head and (now.answer.get("port") or {}).get("listening")
        if not now.running and not held:
            return remove_sockets(conn, status)
        if time.monotonic() >= deadline:
            left = [describe_process(p) for p in now.session]
            return [
                f"{status.spec.name}: still running: {'; '.join(left)}"
                if left
                else f"{status.spec.name}: port {port} is still held"
            ]
        time.sleep(POLL_S)


def remove_sockets(conn: ScopedConnection, status: NodeStatus) -> list[str]:
    """Ray leaves its unix socket files behind; remove the ones this node's raylet used."""
    remaining = []
    for path in (status.record or {}).get("sockets") or ():
        judged = conn.run_probe("path_judge", {"path": path})
        if not judged.get("exists"):
            continue
        if judged.get("type") != "other" or judged.get("refusal"):
            remaining.append(f"{status.spec.name}: {path} left ({judged.get('refusal') or judged.get('type')})")
            continue
        conn.run_probe("remove_path", {"path": path, "dev": judged["dev"], "ino": judged["ino"]})
    return remaining
