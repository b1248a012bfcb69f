"""What runs of a Ray cluster rigger started, node by node, and what differs.

A node is this cluster's when its state file (written when rigger started it) names this
cluster and GCS address and the spec it was started with, the recorded ``ray start
--block`` process and raylet still run (pid and start time), and the head's GCS lists the
recorded node id alive. Ray reports a node under the address it chose (it maps 127.0.0.1
to the host's routable address), so nodes are matched by the node id their raylet was
started with, never by address. Any other raylet or GCS server on a node's address is
foreign: rigger refuses to start next to it and never stops it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engine.module_api import ScopedConnection, TaskContext, TaskFailed
from modules.serving.ray_nodes import ClusterSpec, NodeSpec
from modules.serving.session import describe_process

NODE_DAEMONS = ("raylet", "gcs_server")
VIEW_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 60.0
MAX_PARALLEL_READS = 16


@dataclass(frozen=True)
class NodeStatus:
    """One node's state file and what still runs of it (the ``ray_node_state`` answer)."""

    spec: NodeSpec
    answer: Mapping[str, Any]

    @property
    def record(self) -> Mapping[str, Any] | None:
        record: Mapping[str, Any] | None = self.answer.get("record")
        return record

    @property
    def session(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self.answer.get("session") or ())

    @property
    def running(self) -> bool:
        return bool(self.session)

    def raylet_alive(self) -> bool:
        recorded = (self.record or {}).get("raylet") or {}
        return any(
            p["pid"] == recorded.get("pid") and p["start_time"] == recorded.get("start_time") for p in self.session
        )

    def node_id(self) -> str | None:
        node_id = (self.record or {}).get("node_id")
        return str(node_id) if node_id else None


@dataclass(frozen=True)
class ClusterView:
    """The head's GCS answer: node id -> node."""

    reachable: bool
    error: str | None
    nodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def alive(self, node_id: str | None) -> Mapping[str, Any] | None:
        node = self.nodes.get(node_id or "")
        return node if node and node.get("alive") else None

    def total(self, resource: str) -> float:
        return sum(float(n["resources"].get(resource, 0)) for n in self.nodes.values() if n.get("alive"))


NO_VIEW = ClusterView(False, "the head is not running")


def connections(ctx: TaskContext, cluster: ClusterSpec) -> dict[str, ScopedConnection]:
    """Each node's connection: the task's own for its host, a peer's for the others."""
    return {node.name: ctx.conn if node.name == ctx.host_name else ctx.peer(node.name) for node in cluster.nodes}


def read_node(conn: ScopedConnection, python: str, node: NodeSpec, port: int) -> NodeStatus:
    answer = conn.run_probe_under(
        python,
        "ray_node_state",
        {"state_path": node.state_path, "port": port if node.is_head else None},
        timeout_s=PROBE_TIMEOUT_S,
    )
    if answer.get("state_error"):
        raise TaskFailed(
            f"ray_cluster: cannot read {node.name}'s state file {node.state_path}: {answer['state_error']} "
            "(remove it if the Ray node it described is gone)"
        )
    return NodeStatus(node, answer)


def read_nodes(
    conns: Mapping[str, ScopedConnection], python: str, cluster: ClusterSpec, port: int
) -> tuple[NodeStatus, ...]:
    """Every node at once (each read starts Ray's python on its host: about a second)."""
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_READS, len(cluster.nodes))) as pool:
        return tuple(pool.map(lambda node: read_node(conns[node.name], python, node, port), cluster.nodes))


def read_view(conn: ScopedConnection, python: str, cluster: ClusterSpec) -> ClusterView:
    answer = conn.run_probe_under(
        python,
        "ray_cluster_view",
        {"gcs_address": cluster.gcs_address, "timeout_s": VIEW_TIMEOUT_S, "auth_token_path": cluster.auth_token_path},
        timeout_s=PROBE_TIMEOUT_S,
    )
    nodes = {str(n["node_id"]): n for n in answer["nodes"]}
    return ClusterView(bool(answer["reachable"]), answer.get("failure"), nodes)


def foreign_daemons(status: NodeStatus, ours: set[int]) -> list[Mapping[str, Any]]:
    """Raylets and GCS servers on this node's address that no node of ours runs; one whose
    address cannot be read counts as on this node."""
    addresses = {status.spec.ip, str((status.record or {}).get("registered_address") or status.spec.ip)}
    return [
        p
        for p in status.answer.get("ray_processes") or ()
        if p["name"] in NODE_DAEMONS
        and p["pid"] not in ours
        and (p.get("node_ip") in addresses or not p.get("node_ip"))
    ]


def port_holders(status: NodeStatus, ours: set[int]) -> list[Mapping[str, Any]] | None:
    """Who else listens on the head's GCS port (None: nobody else)."""
    port = status.answer.get("port") or {}
    if not port.get("listening"):
        return None
    others = [p for p in port.get("owners") or () if p["pid"] not in ours]
    return others if others or not port.get("owners") else None


def refuse_foreign(statuses: Sequence[NodeStatus], port: int) -> None:
    """Fail, naming them, when another Ray runs on a node's address or holds the port."""
    ours = {int(p["pid"]) for status in statuses for p in status.session}
    problems = []
    for status in statuses:
        for proc in foreign_daemons(status, ours):
            problems.append(f"{status.spec.name} ({status.spec.ip}): {describe_process(proc)}")
        holders = port_holders(status, ours) if status.spec.is_head else None
        if holders is not None:
            who = "; ".join(describe_process(p) for p in holders) or "a process rigger cannot see"
            problems.append(f"{status.spec.name}: port {port} is held by {who}")
    if problems:
        raise TaskFailed(
            "ray_cluster: another Ray runs where this cluster's nodes go, and rigger did not start it "
            "(it is left alone; stop it yourself, or choose other addresses or another port):\n  "
            + "\n  ".join(problems)
        )


def node_problem(status: NodeStatus, cluster: ClusterSpec, view: ClusterView, args: Mapping[str, Any]) -> str | None:
    """Why this node is not the declared one (None: it is)."""
    record = status.record
    if record is None:
        return "no Ray node recorded" + (f" ({len(status.session)} processes left)" if status.session else "")
    if record.get("cluster") != cluster.name or record.get("gcs_address") != cluster.gcs_address:
        return f"recorded for cluster {record.get('cluster')!r} at {record.get('gcs_address')}"
    if not status.answer.get("leader_alive"):
        return f"ray start (pid {record.get('pid')}) is not running"
    if not status.raylet_alive():
        return f"its raylet (pid {(record.get('raylet') or {}).get('pid')}) is not running"
    if record.get("spec_hash") != status.spec.spec_hash():
        return "it was started with another spec"
    node = view.alive(status.node_id())
    if node is None:
        return f"node {str(status.node_id())[:12]} is not alive in the head's cluster view"
    return resources_problem(node, args)


def resources_problem(node: Mapping[str, Any], args: Mapping[str, Any]) -> str | None:
    for key, resource in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
        wanted = args[key]
        found = float(node["resources"].get(resource, 0))
        if wanted is not None and found != float(wanted):
            return f"it has {found:g} {resource}, not {wanted}"
    return None


def totals_problem(view: ClusterView, args: Mapping[str, Any]) -> str | None:
    for key, resource in (("min_cpus", "CPU"), ("min_gpus", "GPU")):
        if args[key] is not None and view.total(resource) < float(args[key]):
            return f"the cluster has {view.total(resource):g} {resource}, fewer than {args[key]}"
    return None


def describe_node(status: NodeStatus, view: ClusterView) -> str:
    """A node as a diff shows it."""
    record = status.record or {}
    if not status.running:
        return "not running\n"
    node = view.alive(status.node_id())
    where = f"registered as {node['address']}, {_resources(node)}" if node else "not in the head's view"
    return f"ray start pid {record.get('pid')}, {len(status.session)} processes, {where}\n"


def wanted_node(node: NodeSpec) -> str:
    env = " ".join(f"{k}={v}" for k, v in sorted(node.env.items()))
    return f"{'head' if node.is_head else 'worker'} on {node.ip}: {env} {' '.join(node.argv)}\n"


def _resources(node: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in node["resources"].items() if k in ("CPU", "GPU")}
    return ", ".join(f"{v:g} {k}" for k, v in sorted(shown.items())) or "no CPU/GPU"
