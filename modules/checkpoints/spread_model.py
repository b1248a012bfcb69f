"""Bring one pinned model snapshot to every host of a group, fetching each file from the hub once.

Run it once for the group (`run_once: true`); it reaches the other hosts as `ctx.peer`
does (their own inventory variables and run locks). Each file is fetched from the hub by
ONE host (or one per site in `sites`), with that host's huggingface_hub as `ensure_model`
fetches; every other host gets it from a host that already holds a verified copy,
spreading as a tree (modules/checkpoints/spread.py): in each round a host sends at most
one file and receives at most one, so the holders of a file double each round and no
host serves everyone. The bytes of a peer copy are read through the source host's
connection and written through the target's (the controller relays them: no daemon, no
new port, no host-to-host credentials) into a part file beside the final name; the
target hashes the part against the hub's sha256 (git blob id for small files) and only
then renames it into place. A copy that does not match is emptied, its source is no
longer trusted for that file (it gets a good copy itself), and the file comes from
another holder or the hub.

Every host's existing files are hashed (sha256) before the plan counts them as holders,
so a corrupt copy is never a source. An interrupted spread resumes: verified files are
not copied again, and a part file resumes from its length (a resumed part that does
not match is fetched again whole). A host that cannot reach the hub gets the model from
its peers; when no host reaches it, hosts that hold the files (their manifests name the
commit) are enough. The plan and check mode say, per host, where each file would come
from and in which round. Each host gets the `ensure_model` manifest at the end, so a
later `ensure_model` pinned to the commit verifies offline.
"""

from __future__ import annotations

import concurrent.futures
import posixpath
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    Fills,
    ProbeError,
    Result,
    ScopedConnection,
    TaskContext,
    TaskFailed,
    Unchanged,
)
from modules.checkpoints import ensure_model
from modules.checkpoints.manifest import HubFile, Listing, Manifest, human_bytes, is_commit
from modules.checkpoints.spread import Copy, Fleet, Relayed, SourceFailed, peer_round, relay, schedule

MIB = 2**20
MAX_TRIES = 3
_SHARED = {k: v for k, v in ensure_model.SCHEMA["properties"].items() if k != "verify"}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["repo_id", "local_dir"],
    "properties": {
        **_SHARED,
        "local_dir": {"type": "string", "description": "The directory to fill on every host (see host_local_dir)."},
        "hosts": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "default": None,
            "description": "The inventory hosts to fill; default the play's hosts.",
        },
        "host_local_dir": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
            "description": "Per host, a local_dir other than local_dir.",
        },
        "sites": {
            "type": "object",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
            "default": {},
            "description": "Site name -> its hosts: each file is fetched from the hub once per site and "
            "copied within the site. Hosts not named form one more site. Default: one site.",
        },
        "chunk_mib": {
            "type": "integer",
            "minimum": 1,
            # a chunk's answer travels base64 in JSON, and a probe run as a command has its
            # output capped at 8 MiB (engine/connection/capture.py): 4 MiB is 5.4 MiB there
            "maximum": 4,
            "default": 4,
            "description": "Bytes per round trip of a peer copy (MiB, at most 4).",
        },
        "parallel": {
            "type": "integer",
            "minimum": 1,
            "default": 8,
            "description": "Peer copies relayed at the same time.",
        },
    },
}


@dataclass
class Host:
    """One host of the spread: its connection, its arguments (local_dir its own), a context."""

    name: str
    ctx: TaskContext
    args: Mapping[str, Any]

    @property
    def conn(self) -> ScopedConnection:
        return self.ctx.conn

    def path(self, name: str) -> str:
        return posixpath.join(self.args["local_dir"], name)


@dataclass
class State:
    listing: Listing
    notes: list[str] = field(default_factory=list)
    seeds: dict[str, str | None] = field(default_factory=dict)
    holders: dict[str, set[str]] = field(default_factory=dict)
    reports: dict[str, Mapping[str, Any]] = field(default_factory=dict)


def _host_names(ctx: TaskContext, args: Mapping[str, Any]) -> list[str]:
    names = [str(n) for n in args["hosts"] or ctx.vars.get("ansible_play_hosts_all") or [ctx.host_name]]
    if len(set(names)) != len(names):
        raise TaskFailed(f"spread_model: hosts lists a host twice: {names}")
    extra = sorted(set(args["host_local_dir"]) - set(names))
    if extra:
        raise TaskFailed(f"spread_model: host_local_dir names {', '.join(extra)}, not among the hosts {names}")
    hostvars = ctx.vars.get("hostvars")
    unknown = [n for n in names if hostvars is not None and n not in hostvars]
    if unknown:
        raise TaskFailed(f"spread_model: {', '.join(unknown)} not in the inventory")
    return names


def _site_of(args: Mapping[str, Any], names: list[str]) -> dict[str, str]:
    site_of: dict[str, str] = {}
    for site, members in args["sites"].items():
        for member in members:
            if member not in names:
                raise TaskFailed(f"spread_model: site {site!r} names {member!r}, not among the hosts {names}")
            if member in site_of:
                raise TaskFailed(f"spread_model: {member!r} is in two sites, {site_of[member]!r} and {site!r}")
            site_of[member] = str(site)
    return {n: site_of.get(n, "") for n in names}


def _hosts(ctx: TaskContext, args: Mapping[str, Any], names: list[str]) -> dict[str, Host]:
    planning = ctx.conn.scope.planning
    hosts = {}
    for name in names:
        conn = ctx.conn if name == ctx.host_name else ctx.peer(name).planning(planning)
        own = {**args, "local_dir": args["host_local_dir"].get(name, args["local_dir"]), "verify": "sha256"}
        hosts[name] = Host(name, replace(ctx, host_name=name, conn=conn), own)
    return hosts


def _hub_answer(host: Host) -> Listing | str:
    """The hub's listing as this host sees it, or why the hub was not reached from it."""
    try:
        return ensure_model.hub_listing(host.ctx, host.args)
    except ProbeError as exc:
        if not ensure_model._UNREACHABLE.search(str(exc)):
            reason = ensure_model.redact(str(exc)) + ensure_model._install_hint(str(exc), host.args)
            raise TaskFailed(
                f"{host.name}: cannot list {host.args['repo_id']}@{host.args['revision']}: {reason}"
            ) from exc
        return ensure_model.redact(str(exc)).splitlines()[0][:200]


def _listing(hosts: dict[str, Host], site_of: Mapping[str, str], args: Mapping[str, Any]) -> State:
    """The file list: a pinned commit's from any host's manifest, else from the hub (the
    first host that reaches it becomes its site's seed)."""
    if is_commit(args["revision"]):
        for host in hosts.values():
            manifest = ensure_model.read_manifest(host.ctx, host.args)
            if manifest is not None and manifest.covers(host.args) and manifest.commit == args["revision"]:
                return State(manifest.listing, [f"file list from the manifest on {host.name}"])
    unreached: list[str] = []
    for host in hosts.values():
        answer = _hub_answer(host)
        if isinstance(answer, Listing):
            notes = [f"{line}: it gets its files from peers" for line in unreached]
            return State(answer, [*notes, f"file list from the hub via {host.name}"], {site_of[host.name]: host.name})
        unreached.append(f"{host.name} cannot reach the hub ({answer})")
    reason = "; ".join(unreached)
    if hosts[next(iter(hosts))].ctx.vars.get("ansible_check_mode"):
        raise ensure_model.HubUnreachable(reason)
    raise TaskFailed(
        f"no host holds a manifest of {args['repo_id']}@{args['revision']} and none reached the hub: {reason}"
    )


def _verify_all(hosts: dict[str, Host], state: State) -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
        futures = {
            name: pool.submit(ensure_model.verify_local, host.ctx, host.args, state.listing, "sha256")
            for name, host in hosts.items()
        }
        state.reports = {name: future.result() for name, future in futures.items()}
    for name, report in state.reports.items():
        if report["index_problems"]:
            raise TaskFailed(f"{name}: the snapshot cannot be complete: " + "; ".join(report["index_problems"]))
    state.holders = {
        f.name: {n for n, report in state.reports.items() if report["files"][f.name]["status"] == "ok"}
        for f in state.listing.files
    }


def _find_seeds(hosts: dict[str, Host], site_of: Mapping[str, str], state: State) -> None:
    """A seed for every site that lacks some file: its first host that reaches the hub."""
    for site in dict.fromkeys(site_of.values()):
        members = [n for n in hosts if site_of[n] == site]
        lacking = any(not holders & set(members) for holders in state.holders.values())
        if site in state.seeds or not lacking:
            state.seeds.setdefault(site, None)
            continue
        state.seeds[site] = None
        for name in members:
            answer = _hub_answer(hosts[name])
            if isinstance(answer, Listing) and answer.commit != state.listing.commit:
                raise TaskFailed(
                    f"{name}: the hub says commit {answer.commit}, not {state.listing.commit}; pin revision"
                )
            if isinstance(answer, Listing):
                state.seeds[site] = name
                break
            state.notes.append(f"{name} cannot reach the hub ({answer}): it gets its files from peers")


def _fleet(hosts: dict[str, Host], site_of: Mapping[str, str], state: State) -> Fleet:
    return Fleet(tuple(hosts), site_of, state.seeds)


def _check_disks(hosts: dict[str, Host], state: State, rounds: list[list[Copy]]) -> None:
    sizes = state.listing.by_name()
    for name, host in hosts.items():
        need = sum(sizes[c.name].size for batch in rounds for c in batch if c.target == name)
        if need:
            try:
                ensure_model._check_disk(host.args, need, state.reports[name]["free_bytes"])
            except TaskFailed as exc:
                raise TaskFailed(f"{name}: {exc}", exc.data) from None


def _diffs(hosts: dict[str, Host], state: State, rounds: list[list[Copy]]) -> tuple[Diff, ...]:
    diffs = []
    for name, host in hosts.items():
        mine = sorted((c for batch in rounds for c in batch if c.target == name), key=lambda c: c.name)
        if not mine:
            continue
        files = state.reports[name]["files"]
        before = "".join(ensure_model._describe(c.name, files[c.name]) + "\n" for c in mine)
        diffs.append(Diff(f"{name}:{host.args['local_dir']}", before, "".join(c.describe() + "\n" for c in mine)))
    return tuple(diffs)


def _unrecorded(hosts: dict[str, Host], state: State) -> list[str]:
    out = []
    for name, host in hosts.items():
        manifest = ensure_model.read_manifest(host.ctx, host.args)
        if manifest is None or not manifest.records(host.args, state.listing):
            out.append(name)
    return out


def _summary(args: Mapping[str, Any], state: State, rounds: list[list[Copy]], hosts: dict[str, Host]) -> str:
    where = f"{args['repo_id']}@{state.listing.commit[:12]}"
    sizes = state.listing.by_name()
    hub = list(rounds[0])
    peers = [c for batch in rounds[1:] for c in batch]
    hub_bytes = sum(sizes[c.name].size for c in hub)
    peer_bytes = sum(sizes[c.name].size for c in peers)
    return (
        f"spread {len(state.listing.files)} files ({human_bytes(state.listing.total_bytes)}) of {where} to "
        f"{len(hosts)} hosts: {len(hub)} from the hub ({human_bytes(hub_bytes)}), {len(peers)} peer copies "
        f"({human_bytes(peer_bytes)}) in {len(rounds) - 1} rounds"
    )


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    names = _host_names(ctx, args)
    site_of = _site_of(args, names)  # the arguments judged before any host is reached
    hosts = _hosts(ctx, args, names)
    for host in hosts.values():
        ensure_model.refuse_unsafe_local_dir(host.ctx, host.args)
    try:
        state = _listing(hosts, site_of, args)
    except ensure_model.HubUnreachable as exc:  # check mode: named on the step, never "ok"
        return ensure_model._unverified(args, str(exc))
    _verify_all(hosts, state)
    _find_seeds(hosts, site_of, state)
    rounds = schedule(_fleet(hosts, site_of, state), state.holders)
    notes = (*state.notes, *ensure_model._branch_warning(args, state.listing.commit))
    unrecorded = _unrecorded(hosts, state)
    if not any(rounds) and not unrecorded:
        msg = (
            f"{len(state.listing.files)} files ({human_bytes(state.listing.total_bytes)}) of "
            f"{args['repo_id']}@{state.listing.commit[:12]} verified (sha256) on {len(hosts)} hosts"
        )
        return Unchanged("; ".join((msg, *notes)), _data(args, state, {}, []), tuple(notes))
    _check_disks(hosts, state, rounds)
    fingerprint = {"commit": state.listing.commit}
    for batch in rounds:
        for c in batch:
            status = ensure_model._describe(c.name, state.reports[c.target]["files"][c.name])
            where = "file:" if c.target == ctx.host_name else f"peer:{c.target}:"
            fingerprint[where + hosts[c.target].path(c.name)] = status
    summary = _summary(args, state, rounds, hosts) if any(rounds) else f"record the manifest on {', '.join(unrecorded)}"
    return Change(
        summary=summary,
        diffs=_diffs(hosts, state, rounds),
        payload={"state": state, "rounds": rounds, "site_of": site_of, "notes": notes},
        fingerprint=fingerprint,
        effects=tuple(Fills(hosts[n].args["local_dir"], "spread model files") for n in hosts if n == ctx.host_name),
    )


# -- apply -------------------------------------------------------------------------------------


@dataclass
class Progress:
    """What the spread did, for the result and for the next round's choices."""

    hub: dict[str, list[str]] = field(default_factory=dict)  # host -> files it fetched from the hub
    copies: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> file -> source
    relayed_bytes: int = 0
    resumed_bytes: int = 0
    rejected: list[dict[str, str]] = field(default_factory=list)
    tries: Counter[tuple[str, str]] = field(default_factory=Counter)
    failed: dict[str, str] = field(default_factory=dict)  # "host file" or "host" -> why
    target_fails: Counter[str] = field(default_factory=Counter)  # failures in a row, per target
    notes: list[str] = field(default_factory=list)


def _fetch_from_hub(hosts: dict[str, Host], state: State, seed: str, names: list[str], done: Progress) -> None:
    host, sizes = hosts[seed], state.listing.by_name()
    bad = ensure_model.problems(state.reports[seed]) if seed in state.reports else {}
    change = Change(
        summary="",
        payload={
            "listing": state.listing,
            "fetch": names,
            "force": [n for n in names if n in bad and bad[n]["status"] != "missing"],
            "need_bytes": sum(sizes[n].size for n in names),
        },
    )
    ensure_model.download(host.ctx, host.args, change)
    subset = Listing(state.listing.commit, tuple(sizes[n] for n in names))
    report = ensure_model.verify_local(host.ctx, host.args, subset, "sha256")
    wrong = ensure_model.problems(report)
    if wrong:
        lines = "; ".join(ensure_model._describe(n, r) for n, r in sorted(wrong.items()))
        raise TaskFailed(f"{seed}: files from the hub do not verify: {lines}")
    for name in names:
        state.holders[name].add(seed)
    done.hub.setdefault(seed, []).extend(names)


def _hub_round(hosts: dict[str, Host], state: State, batch: list[Copy], done: Progress) -> None:
    by_seed: dict[str, list[str]] = {}
    for copy in batch:
        by_seed.setdefault(copy.target, []).append(copy.name)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(by_seed))) as pool:
        for future in [pool.submit(_fetch_from_hub, hosts, state, s, n, done) for s, n in by_seed.items()]:
            future.result()


@dataclass(frozen=True)
class Failed:
    """A copy that raised: on the source's side (reading) or the target's (writing)."""

    side: str
    why: str


def _copy(hosts: dict[str, Host], file: HubFile, copy: Copy, chunk: int) -> Relayed | Failed:
    source, target = hosts[copy.source], hosts[copy.target]
    try:
        return relay(source.conn, target.conn, (source.path(file.name), target.path(file.name)), file, chunk)
    except SourceFailed as exc:
        return Failed("source", ensure_model.redact(str(exc)).splitlines()[0][:300])
    except Exception as exc:  # recorded and retried; the task fails at the end naming it
        return Failed("target", f"{type(exc).__name__}: {ensure_model.redact(str(exc))}".splitlines()[0][:300])


def _settle(state: State, copy: Copy, outcome: Relayed | Failed, done: Progress, wanted: set[tuple[str, str]]) -> None:
    key = (copy.name, copy.target)
    if isinstance(outcome, Relayed):
        done.relayed_bytes += outcome.sent
        done.resumed_bytes += outcome.resumed
    if isinstance(outcome, Relayed) and outcome.status == "ok":
        state.holders[copy.name].add(copy.target)
        done.copies.setdefault(copy.target, {})[copy.name] = copy.source
        done.target_fails[copy.target] = 0
        wanted.discard(key)
        return
    if isinstance(outcome, Failed) and outcome.side == "source":
        # a source that cannot be read (gone, or the file with it) serves this file no more
        state.holders[copy.name].discard(copy.source)
        done.notes.append(f"{copy.source} could not serve {copy.name}: {outcome.why}")
        return
    done.tries[key] += 1
    why = outcome.why if isinstance(outcome, Failed) else f"{outcome.status}: {outcome.detail}"
    if isinstance(outcome, Relayed) and not outcome.resumed:
        # the source's copy itself is wrong (it changed since it was verified): never a source
        # of this file again in this run, and it gets a good copy like any other host
        state.holders[copy.name].discard(copy.source)
        if copy.source not in done.failed:
            wanted.add((copy.name, copy.source))
        done.rejected.append({"file": copy.name, "source": copy.source, "target": copy.target, "detail": why})
    if isinstance(outcome, Failed):
        done.target_fails[copy.target] += 1
    if done.target_fails[copy.target] >= MAX_TRIES:  # the host itself fails (gone): give it up
        wanted.difference_update({pair for pair in wanted if pair[1] == copy.target})
        done.failed[copy.target] = why
    elif done.tries[key] >= MAX_TRIES:
        wanted.discard(key)
        done.failed[f"{copy.target} {copy.name}"] = why


def _refetch_orphans(hosts: dict[str, Host], state: State, wanted: set[tuple[str, str]], done: Progress) -> None:
    """A file no host holds any more (its only sources proved corrupt): from the hub again."""
    orphans = sorted({name for name, _ in wanted if not state.holders[name]})
    if not orphans:
        return
    seed = next((s for s in state.seeds.values() if s is not None), None)
    if seed is None:
        raise TaskFailed(f"no verified copy of {', '.join(orphans)} is left and no host reached the hub")
    _fetch_from_hub(hosts, state, seed, orphans, done)
    wanted.difference_update({(name, seed) for name in orphans})


def _peer_rounds(ctx: TaskContext, hosts: dict[str, Host], fleet: Fleet, state: State, done: Progress) -> None:
    args = next(iter(hosts.values())).args
    files = state.listing.by_name()
    wanted = {(f, h) for f, holders in state.holders.items() for h in hosts if h not in holders}
    served: Counter[str] = Counter()
    number = 0
    while wanted:
        _refetch_orphans(hosts, state, wanted, done)
        number += 1
        batch = peer_round(fleet, state.holders, wanted, number, served)[: args["parallel"]]
        if not batch:
            raise TaskFailed(f"the spread cannot go on: {len(wanted)} copies wanted, no source for any")
        ctx.progress(f"round {number}: {len(batch)} copies, {len(wanted)} wanted")
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(batch)) as pool:
            outcomes = list(pool.map(lambda c: _copy(hosts, files[c.name], c, args["chunk_mib"] * MIB), batch))
        for copy, outcome in zip(batch, outcomes, strict=True):
            _settle(state, copy, outcome, done, wanted)


def _finish_host(host: Host, state: State) -> str | None:
    """The host's whole snapshot checked once more (sizes, headers, index), then its manifest."""
    report = ensure_model.verify_local(host.ctx, host.args, state.listing, "size")
    bad = ensure_model.problems(report)
    if bad or report["index_problems"]:
        return "; ".join([ensure_model._describe(n, r) for n, r in sorted(bad.items())] + report["index_problems"])
    manifest = Manifest.build(host.args, state.listing, "sha256")
    host.conn.write_file(ensure_model._manifest_path(host.args), manifest.to_json().encode())
    return None


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    hosts = _hosts(ctx, args, _host_names(ctx, args))
    state: State = change.payload["state"]
    rounds: list[list[Copy]] = change.payload["rounds"]
    fleet = _fleet(hosts, change.payload["site_of"], state)
    done = Progress()
    if rounds and rounds[0]:
        _hub_round(hosts, state, rounds[0], done)
    _peer_rounds(ctx, hosts, fleet, state, done)
    problems = {n: why for n, why in done.failed.items()}
    for name, host in hosts.items():
        if not any(key == name or key.startswith(name + " ") for key in problems):
            trouble = _finish_host(host, state)
            if trouble:
                problems[name] = trouble
    data = _data(args, state, done.copies, done.rejected, done)
    if problems:
        lines = "; ".join(f"{k}: {v}" for k, v in sorted(problems.items()))
        raise TaskFailed(f"the spread did not complete: {lines}", data)
    warnings = (
        *change.payload["notes"],
        *(f"rejected {r['file']} from {r['source']}: {r['detail']}" for r in done.rejected),
    )
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=data, warnings=warnings)


def _data(
    args: Mapping[str, Any],
    state: State,
    copies: Mapping[str, Mapping[str, str]],
    rejected: list[dict[str, str]],
    done: Progress | None = None,
) -> dict[str, Any]:
    sizes = state.listing.by_name()
    hub = done.hub if done else {}
    return {
        "repo_id": args["repo_id"],
        "commit": state.listing.commit,
        "files": len(state.listing.files),
        "bytes": state.listing.total_bytes,
        "hub_files": {h: sorted(names) for h, names in hub.items()},
        "hub_bytes": sum(sizes[n].size for names in hub.values() for n in names),
        "peer_copies": {h: dict(sorted(c.items())) for h, c in copies.items()},
        "relayed_bytes": done.relayed_bytes if done else 0,
        "resumed_bytes": done.resumed_bytes if done else 0,
        "rejected": rejected,
        "notes": [*state.notes, *(done.notes if done else [])],
    }
