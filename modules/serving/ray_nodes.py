"""Who the nodes of a Ray cluster are and what each one is started with.

A node is an inventory host: its address is ``addresses[name]``, else its
``rigger_node_ip``, else its ``ansible_host``; it must be an IP address (Ray registers the
node under it, and vLLM's ``VLLM_HOST_IP`` must be the same one). Its network interface
(``interfaces[name]``, else ``rigger_node_interface``) becomes ``GLOO_SOCKET_IFNAME`` and
``NCCL_SOCKET_IFNAME``; ``VLLM_HOST_IP`` is always set. Every node runs ``ray start
--block`` (one process that owns the node's daemons: they share its session, and Ray
stops them when it dies); its argv and environment hash to the node's spec.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import TaskContext, TaskFailed

RAY_CLI_MODULE = "ray.scripts.scripts"


@dataclass(frozen=True)
class NodeSpec:
    """One node: where it is, how it is started, where rigger keeps its record."""

    name: str
    ip: str
    is_head: bool
    argv: tuple[str, ...]
    env: Mapping[str, str]
    state_path: str
    log_path: str

    def spec_hash(self) -> str:
        blob = json.dumps({"argv": list(self.argv), "env": dict(sorted(self.env.items()))}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    head: NodeSpec
    workers: tuple[NodeSpec, ...]
    gcs_address: str
    temp_dir: str
    auth_token_path: str | None = None

    @property
    def nodes(self) -> tuple[NodeSpec, ...]:
        return (self.head, *self.workers)


def node_names(ctx: TaskContext, args: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """(head, every node with the head first)."""
    head = str(args["head"] or ctx.host_name)
    listed = args["nodes"] if args["nodes"] is not None else ctx.vars.get("ansible_play_hosts") or [ctx.host_name]
    names = [str(name) for name in listed]
    if len(set(names)) != len(names):
        raise TaskFailed(f"ray_cluster: nodes lists a host twice: {names}")
    if head not in names:
        raise TaskFailed(f"ray_cluster: the head {head!r} is not one of the nodes {names}")
    return head, (head, *(name for name in names if name != head))


def _host_vars(ctx: TaskContext, name: str) -> Mapping[str, Any]:
    hostvars = ctx.vars.get("hostvars")
    if name == ctx.host_name or hostvars is None:
        return ctx.vars if name == ctx.host_name else {}
    try:
        found: Mapping[str, Any] = hostvars[name]
    except KeyError:
        raise TaskFailed(f"ray_cluster: node {name!r} is not an inventory host") from None
    return found


def node_ip(ctx: TaskContext, args: Mapping[str, Any], name: str) -> str:
    variables = _host_vars(ctx, name)
    value = args["addresses"].get(name) or variables.get("rigger_node_ip") or variables.get("ansible_host") or name
    try:
        return str(ipaddress.ip_address(str(value)))
    except ValueError:
        raise TaskFailed(
            f"ray_cluster: node {name}'s address {value!r} is not an IP address: set rigger_node_ip "
            "for it (or addresses in the task), the address the other nodes reach it on"
        ) from None


def node_interface(ctx: TaskContext, args: Mapping[str, Any], name: str) -> str | None:
    value = args["interfaces"].get(name) or _host_vars(ctx, name).get("rigger_node_interface")
    return str(value) if value else None


def ray_command(python: str) -> tuple[str, ...]:
    return (python, "-m", RAY_CLI_MODULE)


def _resource_flags(args: Mapping[str, Any]) -> list[str]:
    flags = []
    for key, flag in (
        ("num_cpus", "--num-cpus"),
        ("num_gpus", "--num-gpus"),
        ("object_store_memory", "--object-store-memory"),
    ):
        if args[key] is not None:
            flags += [flag, str(args[key])]
    return flags


def start_argv(args: Mapping[str, Any], ip: str, head_address: str | None, temp_dir: str) -> tuple[str, ...]:
    """``ray start --block`` for the head (``head_address`` None) or a worker joining it."""
    argv = [*ray_command(args["python"]), "start", "--block", "--node-ip-address", ip]
    if head_address is None:
        argv += ["--head", "--port", str(args["port"]), "--temp-dir", temp_dir]
        argv += ["--include-dashboard", "true" if args["include_dashboard"] else "false"]
    else:
        argv += ["--address", head_address]
    argv += [*_resource_flags(args), "--disable-usage-stats"]
    return tuple(argv + [str(item) for item in args["extra_args"]])


def auth_env(token_path: str | None) -> dict[str, str]:
    """Ray's token authentication, the same on every node. Explicit either way: since Ray
    2.5x a ``ray start`` finding ``~/.ray/auth_token`` (left by any local ``ray.init``)
    switches it on for that node alone, and nodes that disagree cannot talk."""
    if token_path is None:
        return {"RAY_AUTH_MODE": "disabled"}
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path}


def node_env(ctx: TaskContext, args: Mapping[str, Any], name: str, ip: str) -> dict[str, str]:
    env = {"VLLM_HOST_IP": ip, **auth_env(args["auth_token_path"])}
    interface = node_interface(ctx, args, name)
    if interface:
        env.update({"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface})
    env.update({str(k): str(v) for k, v in args["env"].items()})
    env.update({str(k): str(v) for k, v in (args["node_env"].get(name) or {}).items()})
    return env


def _node(ctx: TaskContext, args: Mapping[str, Any], name: str, head_address: str | None, temp_dir: str) -> NodeSpec:
    ip = node_ip(ctx, args, name)
    stem = posixpath.join(args["state_dir"], f"{args['name']}-{name}")
    return NodeSpec(
        name=name,
        ip=ip,
        is_head=head_address is None,
        argv=start_argv(args, ip, head_address, temp_dir),
        env=node_env(ctx, args, name, ip),
        state_path=stem + ".json",
        log_path=stem + ".log",
    )


def _host_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def cluster_spec(ctx: TaskContext, args: Mapping[str, Any]) -> ClusterSpec:
    head_name, names = node_names(ctx, args)
    _check_overrides(args, names)
    temp_dir = str(args["temp_dir"] or f"/tmp/rigger-ray/{args['name']}")
    head = _node(ctx, args, head_name, None, temp_dir)
    gcs_address = _host_port(head.ip, int(args["port"]))
    workers = tuple(_node(ctx, args, name, gcs_address, temp_dir) for name in names[1:])
    _check_distinct_addresses((head, *workers))
    return ClusterSpec(args["name"], head, workers, gcs_address, temp_dir, args["auth_token_path"])


def _check_overrides(args: Mapping[str, Any], names: Sequence[str]) -> None:
    for key in ("addresses", "interfaces", "node_env"):
        unknown = sorted(set(args[key]) - set(names))
        if unknown:
            raise TaskFailed(f"ray_cluster: {key} names hosts that are not nodes of the cluster: {unknown}")


def _check_distinct_addresses(nodes: Sequence[NodeSpec]) -> None:
    seen: dict[str, str] = {}
    for node in nodes:
        if node.ip in seen:
            raise TaskFailed(
                f"ray_cluster: nodes {seen[node.ip]} and {node.name} have the same address {node.ip}; "
                "each node needs its own (set rigger_node_ip)"
            )
        seen[node.ip] = node.name
