"""The hosts of a rollout: each one's connection, variables, serve_vllm arguments (the
new spec), the release's checkpoint patch (patch_quant_config's arguments) and its server
in the load balancer; the batches they go in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.module_api import ScopedConnection, TaskContext, TaskFailed, batch_size, batches
from modules.checkpoints import patch_quant_config
from modules.routing import haproxy
from modules.serving import serve_vllm
from modules.serving.spec import served_name

SERVE_DEFAULTS = {k: v["default"] for k, v in serve_vllm.SCHEMA["properties"].items() if "default" in v}
PATCH_ARGS = {k: v for k, v in patch_quant_config.SCHEMA["properties"].items() if k != "state"}
PATCH_DEFAULTS = {k: v["default"] for k, v in PATCH_ARGS.items() if "default" in v}
PER_HOST = ("host_server", "host_checkpoint_patch")


@dataclass(frozen=True)
class FleetHost:
    name: str
    server_args: Mapping[str, Any]  # serve_vllm's arguments, defaults filled: the new spec
    lb_server: str
    checkpoint_patch: Mapping[str, Any] | None = None  # patch_quant_config's arguments, defaults filled

    @property
    def port(self) -> int:
        return int(self.server_args["port"])

    @property
    def served_name(self) -> str:
        return served_name(self.server_args)

    def context(self, ctx: TaskContext, planning: bool) -> TaskContext:
        """The task context of this host, as a task of its own on it would get."""
        conn = ctx.conn if self.name == ctx.host_name else ctx.peer(self.name)
        hostvars = ctx.vars.get("hostvars") or {}
        host_vars = hostvars.get(self.name, {})
        return replace(ctx, host_name=self.name, conn=conn.planning(planning), vars=host_vars,
                       facts=host_vars.get("ansible_facts") or {})  # fmt: skip


def host_names(ctx: TaskContext, args: Mapping[str, Any]) -> list[str]:
    names = [str(n) for n in args["hosts"] or ctx.vars.get("ansible_play_hosts_all") or [ctx.host_name]]
    if len(set(names)) != len(names):
        raise TaskFailed(f"rollout: hosts lists a host twice: {names}")
    hostvars = ctx.vars.get("hostvars")
    if hostvars is not None:
        unknown = [n for n in names if n not in hostvars]
        if unknown:
            raise TaskFailed(f"rollout: {', '.join(unknown)} not in the inventory")
    return names


def fleet(ctx: TaskContext, args: Mapping[str, Any]) -> list[FleetHost]:
    names = host_names(ctx, args)
    for key in PER_HOST:
        extra = sorted(set(args[key]) - set(names))
        if extra:
            raise TaskFailed(f"rollout: {key} names {', '.join(extra)}, not among the rollout's hosts {names}")
    lb_names = dict(args["router"].get("servers") or {})
    found = []
    for name in names:
        server = {**SERVE_DEFAULTS, **dict(args["server"]), **dict(args["host_server"].get(name) or {})}
        server["state"] = "started"
        found.append(FleetHost(name, server, str(lb_names.get(name, name)), _patch_args(args, name)))
    return found


def _patch_args(args: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The host's checkpoint patch: ``checkpoint_patch`` with its ``host_checkpoint_patch``
    entry over it; None when the release patches nothing there."""
    common, own = args["checkpoint_patch"], args["host_checkpoint_patch"].get(name)
    if common is None and own is None:
        return None
    patch = {**PATCH_DEFAULTS, **dict(common or {}), **dict(own or {}), "state": "patched"}
    if "path" not in patch:
        raise TaskFailed(f"rollout: the checkpoint patch of {name} names no path (the model directory)")
    return patch


def schedule(hosts: Sequence[str], canary: int | str, serial: Sequence[int | str]) -> list[list[str]]:
    """Canary batch first, then Ansible's `serial` over the rest (counts or percentages of
    ALL the rollout's hosts, the last size repeating)."""
    names = list(hosts)
    first = min(batch_size(canary, len(names)), len(names))
    rest = names[first:]
    sizes = tuple(batch_size(s, len(names)) for s in serial) or (1,)
    return [names[:first], *batches(rest, sizes)] if rest else [names[:first]]


def refuse_empty_batches(plan: Sequence[Sequence[str]], hosts: Sequence[FleetHost], found: Mapping[str, haproxy.Server],
                         backend: haproxy.Backend) -> None:  # fmt: skip
    """A batch that would take every serving server out cannot run: refuse it before anything."""
    lb_of = {h.name: h.lb_server for h in hosts}
    for index, batch in enumerate(plan):
        leaving = [lb_of[n] for n in batch]
        if not haproxy.others_serving(found, leaving):
            raise TaskFailed(
                f"rollout: batch {index + 1} ({', '.join(batch)}) would take every serving server of "
                f"HAProxy backend {backend.name!r} out of routing; make the batches smaller (serial) "
                "or put more servers in service first"
            )


def lb_connection(ctx: TaskContext, args: Mapping[str, Any]) -> ScopedConnection:
    host = args["router"].get("host")
    return ctx.conn if not host or host == ctx.host_name else ctx.peer(str(host))
