"""A multi-node vLLM serving group: which host runs which rank, what each rank runs, and
the one spec hash of the whole group.

Rank 0 is the head: it runs the API server (and, with the ``mp`` backend, the torch
distributed master). With ``mp`` every node runs vLLM's launcher with ``--nnodes``,
``--node-rank`` and the head's address; the others add ``--headless``. With ``ray`` only
the head runs vLLM (``--distributed-executor-backend ray``); its workers are actors of a
Ray cluster that must already be up.

Each node's address, interface and extra environment come from its inventory variables
(``rigger_node_ip``, default ``ansible_host`` or its name; ``rigger_node_interface``;
``rigger_node_env``), overridden by the task's ``addresses`` / ``interfaces`` / ``node_env``.
Setting ``VLLM_HOST_IP`` and the Gloo/NCCL interface on every node is what keeps a host
with several addresses from advertising the wrong one (vLLM #7815, #13121).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.module_api import ScopedConnection, TaskContext, TaskFailed
from modules.serving.spec import LaunchSpec, build_argv, config_digests, public_env, secret_env, serve_prefix

WORKER_TITLE = "VLLM::Worker"
DEFAULT_RAY_PORT = 6379


@dataclass(frozen=True)
class Node:
    name: str
    rank: int
    address: str
    interface: str | None
    env: Mapping[str, Any] = field(default_factory=dict)  # the node's rigger_node_env

    @property
    def label(self) -> str:
        return f"rank {self.rank} on {self.name}"


@dataclass(frozen=True)
class Layout:
    nodes: tuple[Node, ...]
    backend: str
    master_port: int
    tensor_parallel_size: int
    pipeline_parallel_size: int

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def launching(self) -> tuple[Node, ...]:
        """The nodes rigger starts vLLM on: all of them with mp, the head with ray."""
        return self.nodes if self.backend == "mp" else (self.head,)

    @property
    def workers_per_node(self) -> int:
        """vLLM worker processes each launching node must have (mp); ray's are Ray actors."""
        if self.backend != "mp":
            return 0
        return self.tensor_parallel_size * self.pipeline_parallel_size // len(self.nodes)

    def rank_map(self) -> dict[str, str]:
        return {str(n.rank): f"{n.name} {n.address}" for n in self.nodes}


def _node_names(ctx: TaskContext, args: Mapping[str, Any]) -> tuple[str, list[str]]:
    head = str(args["head"] or ctx.host_name)
    names = [str(n) for n in args["nodes"] or ctx.vars.get("ansible_play_hosts_all") or [head]]
    if head not in names:
        raise TaskFailed(f"serve_vllm_group: head {head!r} is not one of the nodes {names}")
    if len(set(names)) != len(names):
        raise TaskFailed(f"serve_vllm_group: nodes lists a host twice: {names}")
    return head, [head, *(n for n in names if n != head)]


def _host_vars(ctx: TaskContext, name: str) -> Mapping[str, Any]:
    hostvars = ctx.vars.get("hostvars")
    if hostvars is None:
        return {}
    try:
        found: Mapping[str, Any] = hostvars[name]
    except KeyError:
        raise TaskFailed(f"serve_vllm_group: node {name!r} is not an inventory host") from None
    return found


def _pick(explicit: Mapping[str, Any], name: str, host_vars: Mapping[str, Any], var: str, default: Any) -> Any:
    if explicit.get(name):
        return explicit[name]
    value = host_vars.get(var)
    return value if value not in (None, "") else default


def resolve_layout(ctx: TaskContext, args: Mapping[str, Any]) -> Layout:
    _, ordered = _node_names(ctx, args)
    nodes = []
    for rank, name in enumerate(ordered):
        host_vars = _host_vars(ctx, name)
        fallback = host_vars.get("ansible_host") or name
        address = _pick(args["addresses"], name, host_vars, "rigger_node_ip", fallback)
        interface = _pick(args["interfaces"], name, host_vars, "rigger_node_interface", args["interface"])
        env = host_vars.get("rigger_node_env") or {}
        nodes.append(Node(name, rank, str(address), str(interface) if interface else None, dict(env)))
    layout = Layout(
        tuple(nodes),
        str(args["backend"]),
        int(args["master_port"]),
        int(args["tensor_parallel_size"]),
        int(args["pipeline_parallel_size"]),
    )
    _check_layout(layout)
    return layout


def _check_layout(layout: Layout) -> None:
    world = layout.tensor_parallel_size * layout.pipeline_parallel_size
    if layout.backend == "mp" and world % len(layout.nodes):
        raise TaskFailed(
            f"serve_vllm_group: tensor_parallel_size x pipeline_parallel_size = {world} ranks do not "
            f"split evenly over {len(layout.nodes)} nodes (vLLM's mp backend runs the same number on each)"
        )


def connection(ctx: TaskContext, node: Node) -> ScopedConnection:
    """The task's own connection for the task host, else the peer's."""
    return ctx.conn if node.name == ctx.host_name else ctx.peer(node.name)


def group_flags(layout: Layout, node: Node) -> list[str]:
    if layout.backend == "ray":
        return ["--distributed-executor-backend", "ray"]
    flags = ["--distributed-executor-backend", "mp", "--nnodes", str(len(layout.nodes)), "--node-rank", str(node.rank)]
    flags += ["--master-addr", layout.head.address, "--master-port", str(layout.master_port)]
    return flags + (["--headless"] if node.rank else [])


def node_env(args: Mapping[str, Any], node: Node) -> dict[str, str]:
    env = {**public_env(args["env"]), **public_env(node.env), **public_env(args["node_env"].get(node.name))}
    env["VLLM_HOST_IP"] = node.address
    if node.interface:
        env["GLOO_SOCKET_IFNAME"] = node.interface
        env["NCCL_SOCKET_IFNAME"] = node.interface
    return env


def ray_address(args: Mapping[str, Any], layout: Layout) -> str:
    """The Ray cluster's GCS address: the task's ``ray_address``, else the head's port 6379."""
    return str(args["ray_address"] or f"{layout.head.address}:{DEFAULT_RAY_PORT}")


def rank_spec(args: Mapping[str, Any], layout: Layout, node: Node, files: Mapping[str, bytes | None]) -> LaunchSpec:
    """What ``node`` runs: the head serves the API; the other ranks bind nothing."""
    rank_args = args if node.rank == 0 else {**args, "host": None, "port": None}
    prefix = serve_prefix(str(args["launcher"]), str(args["model"]))
    argv = build_argv(rank_args, prefix) + tuple(group_flags(layout, node))
    env = node_env(args, node)
    if layout.backend == "ray":  # else ray.init() in vLLM may start a private local cluster
        env["RAY_ADDRESS"] = ray_address(args, layout)
    return LaunchSpec(
        argv=argv,
        env=env,
        secret_env=secret_env(args["api_key_env"], os.environ) if node.rank == 0 else {},
        config_digests=config_digests(files),
    )


@dataclass(frozen=True)
class GroupSpec:
    layout: Layout
    ranks: Mapping[str, LaunchSpec]  # node name -> its launch
    versions: Mapping[str, str]  # "vllm on NODE" / "ray on NODE" -> version

    def group_hash(self) -> str:
        material = {
            "backend": self.layout.backend,
            "ranks": self.layout.rank_map(),
            "launches": {name: spec.spec_hash() for name, spec in sorted(self.ranks.items())},
            "versions": dict(sorted(self.versions.items())),
        }
        blob = json.dumps(material, sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


def versions_of(layout: Layout, infos: Mapping[str, Mapping[str, Any] | None]) -> dict[str, str]:
    """The vLLM (and, for ray, Ray) version on each node, from ``model_vllm_info``."""
    found: dict[str, str] = {}
    for node in layout.nodes:
        info = infos.get(node.name)
        if info is None:
            continue
        found[f"vllm on {node.name}"] = f"{info.get('distribution')} {info.get('version')}"
        if layout.backend == "ray":
            found[f"ray on {node.name}"] = str(info.get("ray_version"))
    return found


def worker_pids(session: Sequence[Mapping[str, Any]]) -> list[int]:
    return [int(p["pid"]) for p in session if WORKER_TITLE in f"{p.get('name')} {p.get('cmdline')}"]
