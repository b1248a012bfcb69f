"""What runs of a serving group, node by node, read through probes (locally or over SSH).

A rank is healthy only when its recorded process is alive (pid and start time), it runs
the group's spec hash, its node has every vLLM worker process it should, and, for the
head, ``/health`` answers 200 and ``/v1/models`` lists the served name. The head alone
is not trusted: vLLM's API answers 200 for minutes after a worker rank died (vLLM #16259).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import ScopedConnection, TaskContext
from modules.serving import session as sessions
from modules.serving.group import Layout, Node, connection, ray_address, worker_pids
from modules.serving.packages import launcher_python

ANY_ADDRESS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class Paths:
    state: str
    log: str


def paths(args: Mapping[str, Any], node: Node) -> Paths:
    """``STATE_DIR/NAME@NODE.json`` and ``.log``: the node's name keeps two ranks apart when
    the state directory is shared (a home directory on NFS, or two "nodes" on one machine)."""
    base = posixpath.join(args["state_dir"], f"{args['name']}@{node.name}")
    return Paths(base + ".json", base + ".log")


def base_url(args: Mapping[str, Any]) -> str:
    host = str(args["host"])
    host = "127.0.0.1" if host in ANY_ADDRESS else host
    return f"http://{f'[{host}]' if ':' in host else host}:{args['port']}"


@dataclass(frozen=True)
class RankState:
    node: Node
    server: sessions.ServerStatus
    workers: tuple[int, ...]
    models_problem: str | None = None

    @property
    def record(self) -> Mapping[str, Any]:
        return self.server.record or {}

    def problem(self, wanted_hash: str | None, expected_workers: int) -> str | None:
        """Why this rank is not serving the wanted group, or None."""
        server = self.server
        if server.record is None:
            return "not running (nothing recorded)"
        pid = self.record.get("pid")
        if not server.leader_alive:
            return server.describe()
        if wanted_hash is not None and self.record.get("group_hash") != wanted_hash:
            return f"pid {pid} runs another group spec ({str(self.record.get('group_hash'))[:12]})"
        if len(self.workers) < expected_workers:
            return f"pid {pid} is alive but only {len(self.workers)} of {expected_workers} vLLM worker processes are"
        if self.node.rank == 0 and not server.healthy:
            return server.describe()
        return self.models_problem

    def describe(self) -> str:
        return f"{self.node.label}: " + (self.problem(None, 0) or f"pid {self.record.get('pid')} running")


def _models_problem(conn: ScopedConnection, url: str, served: str, api_key: str | None) -> str | None:
    answer = conn.run_probe("vllm_http", {"url": url + "/v1/models", "api_key": api_key, "timeout_s": 10})
    if answer["status"] != 200:
        return f"/v1/models answered {answer['status'] or answer['error']}"
    try:
        ids = [entry.get("id") for entry in json.loads(answer["body"]).get("data", [])]
    except (ValueError, AttributeError):
        ids = []
    return None if served in ids else f"/v1/models lists {ids}, not {served!r}"


def read_rank(
    conn: ScopedConnection, node: Node, args: Mapping[str, Any], served: str, api_key: str | None
) -> RankState:
    url = base_url(args)
    health = url + "/health" if node.rank == 0 else ""
    server = sessions.read_status(conn, paths(args, node).state, health)
    models = _models_problem(conn, url, served, api_key) if node.rank == 0 and server.healthy else None
    return RankState(node, server, tuple(worker_pids(server.session)), models)


def read_group(
    ctx: TaskContext, layout: Layout, args: Mapping[str, Any], served: str, api_key: str | None
) -> tuple[RankState, ...]:
    """Every node's rank, head first (with ray, only the head runs a process of ours)."""
    return tuple(read_rank(connection(ctx, node), node, args, served, api_key) for node in layout.launching)


def problems(states: Sequence[RankState], wanted_hash: str | None, layout: Layout) -> list[tuple[Node, str]]:
    found = []
    for state in states:
        problem = state.problem(wanted_hash, layout.workers_per_node)
        if problem:
            found.append((state.node, problem))
    return found


def ray_nodes(conn: ScopedConnection, launcher: str, address: str) -> tuple[int | None, str]:
    """Alive nodes of the Ray cluster at ``address`` (``ray status``), or None and why not."""
    python = launcher_python(launcher)
    ray = posixpath.join(posixpath.dirname(python), "ray") if python else "ray"
    done = conn.run([ray, "status", "--address", address], read_only=True, check=False, timeout_s=60)
    if done.rc != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return None, said[-1] if said else f"ray status exited {done.rc}"
    active, count = False, 0
    for line in done.stdout.splitlines():
        if line.strip().startswith("Active:"):
            active = True
        elif line.strip().startswith(("Pending:", "Recent failures:")):
            active = False
        elif active and "node_" in line:
            count += 1
    return count, "ray status"


def api_key(args: Mapping[str, Any]) -> str | None:
    """The API key from rigger's environment (``api_key_env``); never shown."""
    name = args["api_key_env"]
    return os.environ.get(name) if name else None


def ray_problem(ctx: TaskContext, args: Mapping[str, Any], layout: Layout) -> str | None:
    if layout.backend != "ray":
        return None
    address = ray_address(args, layout)
    count, why = ray_nodes(connection(ctx, layout.head), str(args["launcher"]), address)
    if count is None:
        return f"no Ray cluster answers at {address} ({why}); start it first (the ray_cluster module)"
    if count < len(layout.nodes):
        return f"the Ray cluster at {address} has {count} alive node(s), the group needs {len(layout.nodes)}"
    return None
