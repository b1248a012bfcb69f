"""Where each host gets each file of a model: the plan of a spread, and one peer copy.

The plan is a tree per file. Hosts that already hold a verified copy are its first
sources; a file that no host of a site holds is fetched from the hub once in that site,
by the site's seed (its first host that reached the hub); every other host gets it from
a host that holds it. In each round a host sends at most one file and receives at most
one, so a file's holders double each round and no single host serves everyone; among
free holders the one of the target's own site that has served least is chosen. A site
without a seed copies from another site's holder.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from engine.module_api import ScopedConnection, TaskFailed
from modules.checkpoints.manifest import HubFile

HUB = "hub"


@dataclass(frozen=True)
class Copy:
    """One file to one host: ``source`` is a host's name, or HUB (fetched by ``target``)."""

    name: str
    source: str
    target: str
    round: int

    def describe(self) -> str:
        where = "the hub" if self.source == HUB else self.source
        return f"{self.name}: from {where} (round {self.round})"


@dataclass(frozen=True)
class Fleet:
    hosts: tuple[str, ...]
    site_of: Mapping[str, str]
    seeds: Mapping[str, str | None]  # site -> the host that fetches from the hub, or None

    def site_hosts(self, site: str) -> list[str]:
        return [h for h in self.hosts if self.site_of[h] == site]


def hub_round(fleet: Fleet, holders: Mapping[str, set[str]]) -> list[Copy]:
    """Round 0: each file that no host of a site holds, fetched by that site's seed."""
    copies = []
    for name in sorted(holders):
        for site, seed in fleet.seeds.items():
            if seed is not None and not holders[name] & set(fleet.site_hosts(site)):
                copies.append(Copy(name, HUB, seed, 0))
    return copies


def _pick(
    name: str, target: str, fleet: Fleet, holders: set[str], sending: set[str], served: Counter[str]
) -> str | None:
    free = [h for h in holders if h not in sending]
    own = [h for h in free if fleet.site_of[h] == fleet.site_of[target]]
    if not own and fleet.seeds[fleet.site_of[target]] is not None:
        return None  # the site's seed brings it from the hub; no copy across sites
    candidates = own or free
    return min(candidates, key=lambda h: (served[h], fleet.hosts.index(h))) if candidates else None


def peer_round(
    fleet: Fleet, holders: Mapping[str, set[str]], wanted: Iterable[tuple[str, str]], number: int, served: Counter[str]
) -> list[Copy]:
    """One round of peer copies for the (file, host) pairs still wanted."""
    sending: set[str] = set()
    receiving: set[str] = set()
    copies = []
    for name, target in sorted(wanted, key=lambda pair: (fleet.hosts.index(pair[1]), pair[0])):
        if target in receiving:
            continue
        source = _pick(name, target, fleet, holders[name], sending, served)
        if source is None:
            continue
        copies.append(Copy(name, source, target, number))
        sending.add(source)
        receiving.add(target)
        served[source] += 1
    return copies


def schedule(fleet: Fleet, holders: Mapping[str, set[str]]) -> list[list[Copy]]:
    """Every round until each host holds each file: [hub round, peer round 1, ...].
    Raises TaskFailed naming what no host holds and no host can fetch."""
    have = {name: set(hosts) for name, hosts in holders.items()}
    first = hub_round(fleet, have)
    for copy in first:
        have[copy.name].add(copy.target)
    orphans = sorted(name for name, hosts in have.items() if not hosts)
    if orphans:
        raise TaskFailed(
            f"no host holds {', '.join(orphans[:5])}{' …' if len(orphans) > 5 else ''} and no host reached the hub"
        )
    rounds, served = [first], Counter[str]()
    wanted = {(name, h) for name, hosts in have.items() for h in fleet.hosts if h not in hosts}
    while wanted:
        copies = peer_round(fleet, have, wanted, len(rounds), served)
        if not copies:
            raise TaskFailed(f"the spread cannot go on: {len(wanted)} copies wanted, none possible")
        for copy in copies:
            have[copy.name].add(copy.target)
            wanted.discard((copy.name, copy.target))
        rounds.append(copies)
    return rounds


class SourceFailed(Exception):
    """Reading from the source host failed (not the target's fault): the message says why."""


@dataclass(frozen=True)
class Relayed:
    """What a peer copy did: ``status`` ok (verified, in place) or why not; ``resumed``:
    bytes a part left by an interrupted copy already held; ``sent``: bytes relayed now."""

    status: str
    detail: str = ""
    resumed: int = 0
    sent: int = 0


def relay(
    source: ScopedConnection, target: ScopedConnection, paths: tuple[str, str], file: HubFile, chunk: int
) -> Relayed:
    """Copy one file from ``source`` to ``target`` through the controller, chunk by
    chunk; the target keeps it only when its hash matches the listing's. A failure to
    read from the source raises SourceFailed; the target's failures raise as they are."""
    source_path, target_path = paths
    offset = int(
        target.run_probe("model_peer_write", {"op": "begin", "path": target_path, "size": file.size})["offset"]
    )
    resumed, identity = offset, None
    while offset < file.size:
        want = min(chunk, file.size - offset)
        read = {"path": source_path, "offset": offset, "length": want, "identity": identity}
        try:
            answer = source.run_probe("model_peer_read", read)
        except Exception as exc:  # whatever the source's transport raises, it is the source's
            raise SourceFailed(f"{type(exc).__name__}: {exc}") from exc
        if answer["length"] == 0:
            return Relayed(
                "size", f"{source.host_name} has only {offset} bytes of {file.size}", resumed, offset - resumed
            )
        identity = answer["identity"]
        write = {"op": "append", "path": target_path, "offset": offset, "data": answer["data"]}
        target.run_probe("model_peer_write", write)
        offset += int(answer["length"])
    done = target.run_probe("model_peer_write", {"op": "finish", "path": target_path, "expected": file.expected()})
    return Relayed(done["status"], done.get("detail", ""), resumed, file.size - resumed)
