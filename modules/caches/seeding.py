"""engine_cache ``state: seeded``: a captured cache copied to the hosts whose key matches.

Per host the plan says one of: seed N files from SOURCE / skip (key differs: ...) /
skip (a vLLM server of rigger's runs here) / already warm. The copy is spread_model's
(``relay``: part file, sha256 on the target, rename only on a match); nothing else moves
bytes between hosts.
"""

from __future__ import annotations

import concurrent.futures
import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.module_api import Change, Diff, ProbeError, Result, TaskContext, TaskFailed, Unchanged
from modules.caches import cachekey, cachetree
from modules.caches.cachetree import CacheManifest
from modules.checkpoints.manifest import HubFile, human_bytes
from modules.checkpoints.spread import SourceFailed, relay
from modules.serving.spec import build_spec, read_config_files

MIB = 2**20
SEED, WARM, SKIP = "seed", "already warm", "skip"


@dataclass
class Target:
    """One host to seed: what the plan found there."""

    name: str
    ctx: TaskContext
    root: str
    verdict: str = SKIP
    why: str = ""
    wanted: tuple[HubFile, ...] = ()
    key: Mapping[str, Any] = field(default_factory=dict)

    def line(self, source: str) -> str:
        if self.verdict == SEED:
            size = human_bytes(sum(f.size for f in self.wanted))
            return f"{self.name}: seed {len(self.wanted)} files ({size}) from {source}"
        return f"{self.name}: {self.verdict}" + (f" ({self.why})" if self.why else "")


def _names(ctx: TaskContext, args: Mapping[str, Any]) -> tuple[str, list[str]]:
    names = [str(n) for n in args["hosts"] or ctx.vars.get("ansible_play_hosts_all") or [ctx.host_name]]
    source = str(args["source"] or ctx.host_name)
    hostvars = ctx.vars.get("hostvars")
    unknown = [n for n in {source, *names} if hostvars is not None and n not in hostvars]
    if unknown:
        raise TaskFailed(f"engine_cache: {', '.join(sorted(unknown))} not in the inventory")
    for per_host in ("host_cache_root", "host_serve"):
        extra = sorted(set(args[per_host]) - {source, *names})
        if extra:
            raise TaskFailed(f"engine_cache: {per_host} names {', '.join(extra)}, not among the hosts")
    return source, [n for n in dict.fromkeys(names) if n != source]


def host_context(ctx: TaskContext, name: str) -> TaskContext:
    """Another host reached as spread_model reaches it: its own variables and run lock."""
    if name == ctx.host_name:
        return ctx
    return replace(ctx, host_name=name, conn=ctx.peer(name).planning(ctx.conn.scope.planning))


def running_servers(target: TaskContext, spec_hash: str) -> list[str]:
    """The serve_vllm servers of rigger's running this spec on the host (its default state
    directory): the one writer of this cache's files. A server of another spec may run
    while the host is seeded (a rollout seeds a host still serving the old release): vLLM
    keeps each spec's compiled code under its own hash directory, and each seeded file
    appears by rename, whole."""
    try:
        servers = target.conn.run_probe("vllm_servers")["vllm_servers"]
    except ProbeError as exc:
        return [f"state unreadable: {str(exc).splitlines()[0][:200]}"]
    same = [s for s in servers if s.get("running") and s.get("spec_hash") == spec_hash]
    return [f"{s['name']} (pid {s.get('pid')})" for s in same]


def served_spec_hash(target: TaskContext, serve: Mapping[str, Any]) -> str:
    """The spec hash serve_vllm records for this spec on the host (port and address included)."""
    args = cachekey.serve_args(serve)
    return build_spec(args, read_config_files(target.conn, str(args["model"])), os.environ).spec_hash()


def judge(target: Target, made: CacheManifest, serve: Mapping[str, Any]) -> Target:
    """What the host needs: nothing (warm), some files (seed), or nothing it may take (skip)."""
    try:
        target.key = cachekey.host_key(target.ctx.conn, serve)
    except cachekey.KeyUnknown as exc:
        return replace(target, why=f"key unreadable: {exc}")
    differs = cachekey.differences(made.key, target.key)
    if differs:
        return replace(target, why="key differs: " + "; ".join(differs))
    busy = running_servers(target.ctx, served_spec_hash(target.ctx, serve))
    if busy:
        return replace(
            target, why=f"a vLLM server of rigger's runs this spec here: {', '.join(busy)}; seed before it starts"
        )
    found = cachetree.scan(target.ctx.conn, target.root)
    wanted = tuple(f for f in made.files if not found.matches(f))
    own = cachetree.read_manifest(target.ctx.conn, target.root)
    if not wanted and own is not None and own.to_json() == _theirs(made, target).to_json():
        return replace(target, verdict=WARM)
    return replace(target, verdict=SEED, wanted=wanted)


def _theirs(made: CacheManifest, target: Target) -> CacheManifest:
    """The manifest a seeded host keeps: the files, under its own key (equal to the cache's)."""
    return CacheManifest(target.key, made.files, made.captured_on)


def serve_of(args: Mapping[str, Any], host: str) -> dict[str, Any]:
    """The host's serve_vllm arguments: ``serve`` with its ``host_serve`` entry over it."""
    return {**args["serve"], **(args["host_serve"].get(host) or {})}


def _targets(ctx: TaskContext, args: Mapping[str, Any], names: list[str], made: CacheManifest) -> list[Target]:
    targets = []
    for name in names:
        here = host_context(ctx, name)
        root = cachetree.root_of(args, name)
        cachetree.refuse_unsafe_root(here, root)
        targets.append(Target(name, here, root))
    workers = max(1, min(args["parallel"], len(targets)))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda t: judge(t, made, serve_of(args, t.name)), targets))


def _source(ctx: TaskContext, args: Mapping[str, Any], source: str) -> tuple[TaskContext, str, CacheManifest]:
    there = host_context(ctx, source)
    root = cachetree.root_of(args, source)
    made = cachetree.read_manifest(there.conn, root)
    if made is None:
        raise TaskFailed(
            f"engine_cache: {source} has no captured cache under {root}: run engine_cache state=captured there "
            "after its first start"
        )
    return there, root, made


def _data(source: str, made: CacheManifest, targets: list[Target], done: Mapping[str, str]) -> dict[str, Any]:
    hosts = {
        t.name: {
            "plan": t.verdict,
            "why": t.why,
            "files": len(t.wanted),
            "bytes": sum(f.size for f in t.wanted),
            **({"outcome": done[t.name]} if t.name in done else {}),
        }
        for t in targets
    }
    return {"source": source, "cache": made.describe(), "key": dict(made.key), "hosts": hosts}


def plan_seed(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    source, names = _names(ctx, args)
    _, _, made = _source(ctx, args, source)
    targets = _targets(ctx, args, names, made)
    lines = [t.line(source) for t in targets]
    skips = tuple(line for t, line in zip(targets, lines, strict=True) if t.verdict == SKIP)
    seeding = [t for t in targets if t.verdict == SEED]
    data = _data(source, made, targets, {})
    if not seeding:
        return Unchanged("; ".join(lines) or "no host to seed", data, skips)
    diffs = tuple(
        Diff(f"{t.name}:{t.root}", "", "".join(f"{f.name} ({human_bytes(f.size)})\n" for f in t.wanted))
        for t in seeding
    )
    return Change(
        summary=f"seed the engine cache of {source} ({made.describe()}): " + "; ".join(lines),
        diffs=diffs,
        payload={"made": made, "targets": targets, "skips": skips, "source": source},
        fingerprint={t.name: ",".join(f"{f.name}:{f.sha256}" for f in t.wanted) for t in seeding},
    )


def _seed_one(
    source: TaskContext, source_root: str, made: CacheManifest, target: Target, serve: Mapping[str, Any], chunk: int
) -> str:
    """Copy the wanted files; the manifest last, only when every file verified. Returns
    "seeded" or why not (the files that did not verify never replaced anything)."""
    busy = running_servers(target.ctx, served_spec_hash(target.ctx, serve))
    if busy:
        return f"not seeded: a vLLM server of rigger's started here meanwhile: {', '.join(busy)}"
    for file in target.wanted:
        paths = (posixpath.join(source_root, file.name), posixpath.join(target.root, file.name))
        try:
            done = relay(source.conn, target.ctx.conn, paths, file, chunk)
        except SourceFailed as exc:
            return f"not seeded: {source.host_name} could not send {file.name}: {str(exc)[:200]}"
        if done.status != "ok":
            return f"not seeded: the copy of {file.name} did not verify ({done.status}: {done.detail}); not used"
    target.ctx.conn.write_file(
        cachetree.manifest_path(target.root), _theirs(made, target).to_json().encode(), mode=0o644
    )
    return "seeded"


def apply_seed(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    made: CacheManifest = change.payload["made"]
    source_ctx, source_root, _ = _source(ctx, args, change.payload["source"])
    targets: list[Target] = [replace(t, ctx=host_context(ctx, t.name)) for t in change.payload["targets"]]
    seeding = [t for t in targets if t.verdict == SEED]
    chunk = args["chunk_mib"] * MIB
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(args["parallel"], len(seeding))) as pool:
        outcomes = list(
            pool.map(lambda t: _seed_one(source_ctx, source_root, made, t, serve_of(args, t.name), chunk), seeding)
        )
    done = {t.name: outcome for t, outcome in zip(seeding, outcomes, strict=True)}
    data = _data(change.payload["source"], made, targets, done)
    failed = {name: why for name, why in done.items() if why != "seeded"}
    if failed:
        raise TaskFailed("engine_cache: " + "; ".join(f"{n}: {w}" for n, w in sorted(failed.items())), data)
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=data, warnings=change.payload["skips"])
