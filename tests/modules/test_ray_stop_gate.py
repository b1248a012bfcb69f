"""When ray_cluster may run `ray stop --force` (it stops every Ray process on the host).

Real: ray_actions.stop_node, NodeStatus, the scoped connection. Not real: the host, a
RecordedHost answering the node-state and signal probes as a real host did (pids and
command lines taken from a two-node cluster on this machine).
"""

from __future__ import annotations

from typing import Any

from recorded_host import RecordedHost

from engine.connection.base import ScopedConnection
from modules.serving.ray_actions import stop_node
from modules.serving.ray_nodes import NodeSpec
from modules.serving.ray_status import NodeStatus

PY = "/opt/venv-vllm/bin/python"
NODE = NodeSpec("node-b", "127.0.0.3", False, (PY, "-m", "ray.scripts.scripts", "start"), {}, "/s/c-b.json", "/s/c.log")
STOP = f"{PY} -m ray.scripts.scripts stop --force"
SIGNALLED = {"terminated": [5230], "killed": [], "gone": [], "skipped": [], "alive": []}


def proc(pid: int, name: str, in_session: bool) -> dict[str, Any]:
    return {"pid": pid, "name": name, "start_time": 880000, "cmdline": name, "in_session": in_session}


def stop(ray_processes: list[dict[str, Any]]) -> tuple[str, RecordedHost]:
    session = [p for p in ray_processes if p["in_session"]]
    status = NodeStatus(NODE, {"record": {"pid": 5200}, "session": session, "ray_processes": ray_processes})
    host = RecordedHost(probes={"signal_procs": SIGNALLED}, commands={STOP: {"rc": 0}})
    return stop_node(ScopedConnection(host), PY, status, 5.0), host


def test_every_ray_process_is_this_nodes_so_ray_stop_force_runs() -> None:
    msg, host = stop([proc(5200, "ray", True), proc(5230, "raylet", True)])
    assert ("run", STOP) in host.calls
    assert "ray stop --force" in msg


def test_another_clusters_raylet_on_the_host_means_only_our_pids_are_signalled() -> None:
    msg, host = stop([proc(5200, "ray", True), proc(5230, "raylet", True), proc(4130, "raylet", False)])
    assert ("run", STOP) not in host.calls
    signalled = [args["targets"] for name, args in host.probe_args if name == "signal_procs"]
    assert [t["pid"] for targets in signalled for t in targets] == [5230, 5200]  # raylet first
    assert "other Ray processes run on the host" in msg
