"""The engine's compile and autotune caches as fleet artifacts: captured on a host that
started, seeded to the hosts that have not, only where the cache is valid.

vLLM writes its caches under ``VLLM_CACHE_ROOT`` (``cache_root``: give serve_vllm the same
path in ``env``, on every host: vLLM keys some caches on the path). On the CPU build
0.32 that is ``torch_compile_cache/torch_aot_compile/<hash>/`` (the AOT-compiled model
``rank_0_0/model`` and its inductor kernels); a GPU build adds Triton, FlashInfer
autotune and DeepGEMM caches under the same root. The module copies the tree as it is,
whatever the installed vLLM wrote (listed from the tree, not assumed).

``state: captured`` (on the host that ran, after its start passed readiness): the tree
walked without following links, each regular file's size and sha256 recorded with the
host's KEY (modules/caches/cachekey.py) in ``.rigger-engine-cache.json`` at the root.

``state: seeded`` (once for the group, ``run_once: true``): from ``source``'s captured
cache to every other host whose OWN key (computed there, from its facts) equals the
manifest's; a key that differs is never seeded, and the result says which part differs.
Each file travels as spread_model's do (modules/checkpoints/spread.py ``relay``: read
through the source's connection, written through the target's into a part file, hashed
there and renamed into place only when the sha256 matches), so a corrupt copy is never
used. One writer per host: each host is reached with its own run lock (``ctx.peer``), and
a host where a serve_vllm server of rigger's is running is not seeded. A host whose
tree already matches the manifest is "already warm". The target's manifest is written
last, only when every file verified.

Whether the next start used the cache: modules/serving/loglines.py ``cache_proof``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, Result, TaskContext, TaskFailed, Unchanged
from modules.caches import cachekey, cachetree, seeding
from modules.caches.cachetree import CacheManifest
from modules.serving.serve_vllm import SCHEMA as SERVE_SCHEMA

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["state", "cache_root", "serve"],
    "properties": {
        "state": {
            "type": "string",
            "enum": ["captured", "seeded"],
            "description": "captured: record this host's cache; seeded: copy source's to the hosts.",
        },
        "cache_root": {
            "type": "string",
            "description": "VLLM_CACHE_ROOT, the same absolute path on every host (serve_vllm's env sets it).",
        },
        "serve": {
            "type": "object",
            "required": ["model"],
            "additionalProperties": False,
            "properties": SERVE_SCHEMA["properties"],
            "description": "serve_vllm's arguments as the serving task has them: the spec hash and the "
            "interpreter whose vLLM, torch, Triton and FlashInfer versions enter the key.",
        },
        "host_serve": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": SERVE_SCHEMA["properties"],
            },
            "default": {},
            "description": "seeded: per host, serve_vllm arguments over serve (a rollout's host_server): "
            "each host's key is computed with its own spec.",
        },
        "source": {
            "type": ["string", "null"],
            "default": None,
            "description": "seeded: the host whose captured cache is copied; default the task's host.",
        },
        "hosts": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "default": None,
            "description": "seeded: the hosts to seed; default the play's hosts.",
        },
        "host_cache_root": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
            "description": "Per host, another cache root (loopback test hosts on one machine only: "
            "a real fleet uses one path, which vLLM's keys may contain).",
        },
        "parallel": {"type": "integer", "minimum": 1, "default": 4, "description": "Hosts seeded at once."},
        "chunk_mib": {
            "type": "integer",
            "minimum": 1,
            "maximum": 4,  # a probe's answer is capped (spread_model's chunk_mib says why)
            "default": 4,
            "description": "Bytes per round trip of a copy (MiB, at most 4).",
        },
    },
}


def plan_capture(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    root = cachetree.root_of(args, ctx.host_name)
    cachetree.refuse_unsafe_root(ctx, root)
    key = cachekey.key_or_fail(ctx, args["serve"])
    found = cachetree.scan(ctx.conn, root)
    notes = tuple(found.notes(ctx.host_name, root))
    if not found.files:
        raise TaskFailed(
            f"engine_cache: nothing to capture under {root} on {ctx.host_name}: start vLLM with "
            f"VLLM_CACHE_ROOT={root} (serve_vllm env) and capture after it is ready"
        )
    made = CacheManifest.from_scan(key, found, ctx.host_name)
    old = cachetree.read_manifest(ctx.conn, root)
    data = {"root": root, "files": len(made.files), "bytes": made.total_bytes, "key": key}
    if old is not None and old.to_json() == made.to_json():
        return Unchanged(f"cache under {root} captured: {made.describe()}, key unchanged", data, notes)
    before = (
        "" if old is None else f"{old.describe()}\n" + "".join(f"{d}\n" for d in cachekey.differences(old.key, key))
    )
    return Change(
        summary=f"capture {made.describe()} under {root} with this host's key",
        diffs=(Diff(f"{ctx.host_name}:{cachetree.manifest_path(root)}", before, f"{made.describe()}\n"),),
        payload={"manifest": made, "root": root, "data": data, "notes": notes},
        fingerprint={"manifest": made.to_json()},
    )


def apply_capture(ctx: TaskContext, change: Change) -> Result:
    made: CacheManifest = change.payload["manifest"]
    ctx.conn.write_file(cachetree.manifest_path(change.payload["root"]), made.to_json().encode(), mode=0o644)
    return Result(
        changed=True,
        msg=change.summary,
        diffs=change.diffs,
        data=change.payload["data"],
        warnings=change.payload["notes"],
    )


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    if args["state"] == "captured":
        return plan_capture(ctx, args)
    return seeding.plan_seed(ctx, args)


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    if args["state"] == "captured":
        return apply_capture(ctx, change)
    return seeding.apply_seed(ctx, args, change)
