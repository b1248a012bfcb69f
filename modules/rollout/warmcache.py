"""A rollout's engine cache: after the canary is upgraded, its compile and autotune cache
is captured there and seeded to the hosts of the later batches before their turn
(engine_cache ``state: captured`` then ``state: seeded``, their own plan and apply).

Each host is seeded only where its own key (its vLLM, torch, Triton, FlashInfer, GPU
architecture, its spec from ``host_server``, its VLLM_* environment) equals the canary's;
the others start cold, as they would without it. A host still serving the old release
may be seeded: the old spec's server writes under its own hash directories. Nothing here
stops the rollout: a cache that could not be captured or seeded costs start-up time, not
correctness, so it is recorded in the rollout's record and the batches go on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from engine.module_api import Change, TaskContext, TaskFailed
from modules.caches import engine_cache
from modules.rollout.fleet import FleetHost

SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "default": None,
    "additionalProperties": False,
    "required": ["cache_root"],
    "properties": {
        "cache_root": {"type": "string", "description": "VLLM_CACHE_ROOT of the new spec (one path on every host)."},
        "host_cache_root": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "description": "After the canary is upgraded: capture its vLLM compile/autotune cache and seed it to the "
    "later batches' hosts whose own cache key matches (engine_cache); recorded, never a reason to stop.",
}


def _run(ctx: TaskContext, args: Mapping[str, Any]) -> str:
    """engine_cache's plan (read-only), then its apply, as the executor runs a task."""
    planned = engine_cache.plan(replace(ctx, conn=ctx.conn.planning(True)), args)
    if not isinstance(planned, Change):
        return planned.msg
    return engine_cache.apply(replace(ctx, conn=ctx.conn.planning(False)), args, planned).msg


def _args(given: Mapping[str, Any], canary: FleetHost, hosts: Sequence[FleetHost], state: str) -> dict[str, Any]:
    defaults = {k: v["default"] for k, v in engine_cache.SCHEMA["properties"].items() if "default" in v}
    return {
        **defaults,
        "state": state,
        "cache_root": given["cache_root"],
        "host_cache_root": dict(given.get("host_cache_root") or {}),
        "serve": dict(canary.server_args),
        "host_serve": {h.name: dict(h.server_args) for h in hosts},
        "source": canary.name,
        "hosts": [h.name for h in hosts],
    }


def warm(ctx: TaskContext, given: Mapping[str, Any], canary: FleetHost, later: Sequence[FleetHost]) -> dict[str, Any]:
    """Capture on the canary, seed the later hosts; what happened, for the rollout's record."""
    record: dict[str, Any] = {"source": canary.name, "captured": None, "seeded": None}
    try:
        record["captured"] = _run(canary.context(ctx, False), _args(given, canary, [canary], "captured"))
        record["seeded"] = _run(ctx, _args(given, canary, [canary, *later], "seeded"))
    except TaskFailed as exc:
        record["error"] = exc.msg
    return record
