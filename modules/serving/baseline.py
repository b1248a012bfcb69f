"""A measurement's baseline key, read from the host and the server serve_vllm registered,
and its recording in the controller's store (`rigger baselines` lists them)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from engine.module_api import BaselineKey, BaselineStore, Measurement, ProbeError, ScopedConnection, TaskContext
from modules.serving.packages import vllm_info

# Flags whose value differs from host to host without changing what is served.
PLACE_FLAGS = ("--host", "--port")
# what a key says for a part that was not read
UNKNOWN = BaselineKey.of({}).vllm


def flags_hash(argv: Sequence[str] | None) -> str | None:
    """sha256 of the server's argv without the launcher and the address flags: two hosts
    serving the same flags on different ports hash the same."""
    if not argv:
        return None
    kept: list[str] = []
    skip = False
    for item in list(argv)[1:]:
        if skip:
            skip = False
            continue
        if item in PLACE_FLAGS:
            skip = True
            continue
        if item.split("=", 1)[0] in PLACE_FLAGS:
            continue
        kept.append(item)
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()


def gpu_type(facts: Mapping[str, Any]) -> str:
    gpus = facts.get("gpus") or []
    names = sorted({str(g.get("name")) for g in gpus if isinstance(g, Mapping) and g.get("name")})
    return f"{len(gpus)}x {'+'.join(names)}" if names else "cpu"


def _versions(conn: ScopedConnection, argv: Sequence[str] | None) -> tuple[str | None, str | None]:
    if not argv:
        return None, None
    try:
        answer = vllm_info(conn, str(argv[0]))
    except ProbeError:
        return None, None
    if not answer:
        return None, None
    name = answer.get("distribution") or "vllm"
    version = answer.get("version")
    return (f"{name} {version}" if version else None), answer.get("torch_version")


def server_argv(conn: ScopedConnection, server: Mapping[str, Any] | None) -> Sequence[str] | None:
    """The argv the server was launched with: what serve_vllm registered (`argv`), else the
    record in its state file (`state_path`, registered too: a result that carries no argv,
    such as a `stopped` or check-mode one, still names where the server is recorded)."""
    server = server or {}
    argv = server.get("argv")
    if argv:
        return [str(item) for item in argv]
    state_path = server.get("state_path")
    if not state_path:
        return None
    answer = conn.run_probe("vllm_state", {"state_path": str(state_path), "health_url": ""})
    recorded = (answer.get("record") or {}).get("argv")
    return [str(item) for item in recorded] if recorded else None


def unknown_parts(key: BaselineKey) -> list[str]:
    """The parts of a measurement's key that say ``unknown`` and that the server decides."""
    return [name for name in ("vllm", "torch", "flags_hash") if getattr(key, name) == UNKNOWN]


def baseline_key(
    ctx: TaskContext, model: str, server: Mapping[str, Any] | None, revision: str | None = None
) -> BaselineKey:
    argv = server_argv(ctx.conn, server)
    vllm, torch = _versions(ctx.conn, argv)
    return BaselineKey.of(
        {
            "host": ctx.host_name,
            "model": model,
            "revision": revision,
            "vllm": vllm,
            "torch": torch,
            "flags_hash": flags_hash(argv),
            "gpu": gpu_type(ctx.facts),
        }
    )


def record(key: BaselineKey, data: Mapping[str, Any], source: str, rollout_id: str | None = None) -> None:
    BaselineStore().record(
        Measurement(
            key=key,
            tokens_per_s=float(data["tokens_per_s"]),
            ttft_p50_s=data.get("ttft_p50_s"),
            ttft_p95_s=data.get("ttft_p95_s"),
            requests=int(data["requests"]),
            errors=int(data["errors"]),
            source=source,
            rollout_id=rollout_id,
        )
    )
