"""spread_model: one verified copy of a model spread to the other hosts of a group.

Real: the module's plan and apply, the model_verify, model_peer_read, model_peer_write and
fileio probes, each "host" an inventory name reached by the local connection with its own
directory on this machine (as tests/integration/local runs several hosts), real files
hashed with sha256. Not real: no hub here (a fake hub is not a stand-in for the hub
client; tests/integration/hub runs the hub side of ensure_model against a real mirror):
the first host holds the files and the manifest ensure_model writes, and every hub
endpoint is one where nothing listens, so no host reaches the hub. The interruption is an
exception raised on the controller inside a chunk write (as a Ctrl-C there would).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import struct
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, TaskContext, TaskFailed, Unchanged
from modules.checkpoints import spread_model as mod
from modules.checkpoints.manifest import HubFile, Listing, Manifest
from modules.checkpoints.spread import HUB, Fleet, schedule

COMMIT = "2c06be8556499af9ac04bf57a2f9e9bbd5519f7d"
UNREACHABLE = "http://127.0.0.1:9"  # nothing listens on port 9


def shard(payload: bytes) -> bytes:
    header = json.dumps({"w": {"dtype": "U8", "shape": [len(payload)], "data_offsets": [0, len(payload)]}}).encode()
    return struct.pack("<Q", len(header)) + header + payload


FILES = {
    "config.json": b'{"model_type": "tiny"}\n',
    "model-00001-of-00002.safetensors": shard(bytes(range(256)) * 10_000),  # 2.4 MiB: three 1 MiB chunks
    "sub/model-00002-of-00002.safetensors": shard(b"y" * 5000),
}
FILES["model.safetensors.index.json"] = json.dumps(
    {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "sub/model-00002-of-00002.safetensors"}}
).encode()


def listing() -> Listing:
    def entry(name: str, data: bytes) -> HubFile:
        if name.endswith(".safetensors"):
            return HubFile(name, len(data), hashlib.sha256(data).hexdigest())
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        return HubFile(name, len(data), None, blob)

    return Listing(COMMIT, tuple(entry(n, d) for n, d in sorted(FILES.items())))


def args_for(tmp_path: Path, hosts: list[str], **extra: Any) -> dict[str, Any]:
    defaults = {k: v["default"] for k, v in mod.SCHEMA["properties"].items() if "default" in v}
    return {
        **defaults,
        "repo_id": "o/r",
        "revision": COMMIT,
        "local_dir": str(tmp_path / "unused"),
        "host_local_dir": {h: str(tmp_path / h / "model") for h in hosts},
        "hosts": hosts,
        "python": sys.executable,
        "endpoint": UNREACHABLE,
        "reserve_free_mib": 0,
        "chunk_mib": 1,
        **extra,
    }


def seed(tmp_path: Path, host: str, args: dict[str, Any]) -> Path:
    """A host that holds the snapshot as ensure_model leaves it: files and manifest."""
    root = tmp_path / host / "model"
    for name, data in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    manifest = Manifest.build({**args, "local_dir": str(root)}, listing(), "sha256")
    (root / ".rigger-manifest.json").write_text(manifest.to_json())
    return root


def context(hosts: list[str], planning: bool, conns: dict[str, LocalConnection] | None = None) -> TaskContext:
    conns = conns or {}

    def connect(name: str) -> LocalConnection:
        return conns.get(name) or LocalConnection(name)

    conn = ScopedConnection(connect(hosts[0])).planning(planning)
    return TaskContext(hosts[0], conn, {}, {"ansible_check_mode": planning}, connect=connect)


def run(tmp_path: Path, hosts: list[str], conns: dict[str, LocalConnection] | None = None, **extra: Any) -> Any:
    args = args_for(tmp_path, hosts, **extra)
    change = mod.plan(context(hosts, True), args)
    if isinstance(change, Unchanged):
        return change
    return mod.apply(context(hosts, False, conns), args, change)


def snapshot(tmp_path: Path, host: str) -> dict[str, bytes]:
    root = tmp_path / host / "model"
    return {n: (root / n).read_bytes() for n in FILES if (root / n).exists()}


# -- the plan of a spread: a tree ----------------------------------------------------------


def _fleet(hosts: int, sites: dict[str, list[str]] | None = None, seeds: dict[str, str | None] | None = None) -> Fleet:
    names = tuple(f"h{i}" for i in range(1, hosts + 1))
    site_of = {n: s for s, members in (sites or {}).items() for n in members}
    return Fleet(names, {n: site_of.get(n, "") for n in names}, seeds or {"": None})


@pytest.mark.parametrize("hosts", [2, 3, 8, 16])
def test_one_holder_doubles_each_round_and_no_host_serves_everyone(hosts: int) -> None:
    rounds = schedule(_fleet(hosts), {"w": {"h1"}})
    assert rounds[0] == [], "a held file is not fetched from the hub"
    assert len(rounds) - 1 == math.ceil(math.log2(hosts))
    served = Counter(c.source for batch in rounds for c in batch)
    assert max(served.values()) <= len(rounds) - 1, "a host sends one file per round"
    assert hosts < 4 or max(served.values()) < hosts - 1, f"one host serves everyone: {served}"
    for number, batch in enumerate(rounds[1:], 1):
        holders = 2 ** (number - 1)
        assert len(batch) == min(holders, hosts - holders)
        assert len({c.source for c in batch}) == len(batch), "a host sends one file per round"


def test_a_site_is_seeded_from_the_hub_once_and_copies_within_itself() -> None:
    sites = {"east": ["h1", "h2", "h3"], "west": ["h4", "h5", "h6"]}
    rounds = schedule(_fleet(6, sites, {"east": "h1", "west": "h4"}), {"a": set(), "b": set()})
    assert sorted((c.name, c.target) for c in rounds[0]) == [("a", "h1"), ("a", "h4"), ("b", "h1"), ("b", "h4")]
    assert all(c.source == HUB for c in rounds[0])
    east, west = set(sites["east"]), set(sites["west"])
    for copy in (c for batch in rounds[1:] for c in batch):
        assert {copy.source, copy.target} <= east or {copy.source, copy.target} <= west, copy


def test_a_site_without_hub_access_copies_from_another_site_and_nothing_held_nowhere_fails() -> None:
    sites = {"east": ["h1", "h2"], "dark": ["h3", "h4"]}
    rounds = schedule(_fleet(4, sites, {"east": "h1", "dark": None}), {"a": set()})
    assert [(c.source, c.target) for c in rounds[0]] == [(HUB, "h1")]
    targets = {c.target: c.source for batch in rounds[1:] for c in batch}
    assert set(targets) == {"h2", "h3", "h4"}
    with pytest.raises(TaskFailed, match="no host holds a and no host reached the hub"):
        schedule(_fleet(3), {"a": set()})


# -- the module on several local "hosts" ----------------------------------------------------


HOSTS = ["h1", "h2", "h3", "h4"]


def test_check_mode_says_per_host_where_each_file_comes_from_and_touches_nothing(tmp_path: Path, digest: Any) -> None:
    args = args_for(tmp_path, HOSTS)
    seed(tmp_path, "h1", args)
    before = digest(tmp_path)
    change = mod.plan(context(HOSTS, True), args)
    assert isinstance(change, Change)
    assert digest(tmp_path) == before, "check mode wrote something"
    assert "0 from the hub (0 B), 12 peer copies" in change.summary
    rounds = int(re.search(r"in (\d+) rounds", change.summary).group(1))  # type: ignore[union-attr]
    assert 4 <= rounds < 12, "h2..h4 take one file per round; h1 alone would need 12"
    by_host = {d.label.split(":")[0]: d.after for d in change.diffs}
    assert sorted(by_host) == ["h2", "h3", "h4"]
    assert "config.json: from h1 (round 1)" in by_host["h2"]
    sources = {line.split(": from ")[1] for text in by_host.values() for line in text.splitlines()}
    assert any(s.startswith(("h2", "h3")) for s in sources), f"only h1 serves: {sources}"
    assert "config.json: missing" in change.diffs[0].before


def test_spread_from_one_verified_copy_fills_every_host_with_the_same_bytes_and_manifest(tmp_path: Path) -> None:
    seed(tmp_path, "h1", args_for(tmp_path, HOSTS))
    result = run(tmp_path, HOSTS)
    for host in HOSTS:
        assert snapshot(tmp_path, host) == FILES, host
        manifest = Manifest.parse((tmp_path / host / "model" / ".rigger-manifest.json").read_bytes())
        assert manifest is not None and manifest.commit == COMMIT and manifest.verified == "sha256"
        assert not list((tmp_path / host / "model").rglob("*.rigger-spread")), "a part file was left"
    total = sum(len(d) for d in FILES.values())
    assert result.data["hub_bytes"] == 0 and result.data["relayed_bytes"] == 3 * total
    assert sorted(result.data["peer_copies"]) == ["h2", "h3", "h4"]
    again = mod.plan(context(HOSTS, True), args_for(tmp_path, HOSTS))
    assert isinstance(again, Unchanged) and "verified (sha256) on 4 hosts" in again.msg


@pytest.mark.parametrize(
    ("holders", "allowed"),
    [
        (["h1", "h4"], {"h3": {"h1"}, "h2": {"h4"}}),  # each site has a copy: copies stay in the site
        # site b has no copy and no host reaches the hub: it copies from site a
        (["h1"], {h: set(HOSTS) - {h} for h in HOSTS}),
    ],
)
def test_sites_copy_within_themselves_unless_they_have_no_copy_and_no_hub(
    tmp_path: Path, holders: list[str], allowed: dict[str, set[str]]
) -> None:
    sites = {"a": ["h1", "h3"], "b": ["h2", "h4"]}
    for host in holders:
        seed(tmp_path, host, args_for(tmp_path, HOSTS))
    result = run(tmp_path, HOSTS, sites=sites)
    for host in HOSTS:
        assert snapshot(tmp_path, host) == FILES, host
    for host, copies in result.data["peer_copies"].items():
        assert set(copies.values()) <= allowed[host], (host, copies)


def test_a_peer_copy_with_a_flipped_byte_is_never_a_source_and_is_replaced(tmp_path: Path) -> None:
    args = args_for(tmp_path, HOSTS)
    seed(tmp_path, "h1", args)
    bad = seed(tmp_path, "h2", args) / "model-00001-of-00002.safetensors"  # its manifest says sha256-verified
    data = bytearray(bad.read_bytes())
    data[-100] ^= 0xFF
    bad.write_bytes(bytes(data))
    change = mod.plan(context(HOSTS, True), args)
    assert isinstance(change, Change)
    text = {d.label.split(":")[0]: d.before + d.after for d in change.diffs}
    assert "model-00001-of-00002.safetensors: sha256" in text["h2"] and "from h1" in text["h2"]
    result = mod.apply(context(HOSTS, False), args, change)
    for host in HOSTS:
        assert snapshot(tmp_path, host) == FILES, host
    assert result.data["rejected"] == []


def test_a_source_corrupted_after_the_plan_is_caught_by_the_target_and_not_spread(tmp_path: Path) -> None:
    args = args_for(tmp_path, HOSTS)
    seed(tmp_path, "h1", args)
    seed(tmp_path, "h2", args)
    change = mod.plan(context(HOSTS, True), args)
    assert isinstance(change, Change)
    for name in FILES:  # after the plan verified h2, every one of its files goes bad in place
        path = tmp_path / "h2" / "model" / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
    result = mod.apply(context(HOSTS, False), args, change)
    assert result.data["rejected"], "h2 served nobody?"
    assert {r["source"] for r in result.data["rejected"]} == {"h2"}
    assert all("sha256" in r["detail"] or "git blob" in r["detail"] for r in result.data["rejected"])
    for host in HOSTS:
        assert snapshot(tmp_path, host) == FILES, host
    assert any("rejected" in w for w in result.warnings)


class Interrupted(BaseException):
    """The controller stopped mid-copy (what a Ctrl-C or a killed run leaves behind)."""


class DropsAfter(LocalConnection):
    def __init__(self, name: str, appends: int) -> None:
        super().__init__(name)
        self.left = appends

    def run_probe(self, name: str, args: Any = None, *, sudo: bool = False) -> dict[str, Any]:
        if name == "model_peer_write" and args["op"] == "append":
            if self.left == 0:
                raise Interrupted()
            self.left -= 1
        return super().run_probe(name, args, sudo=sudo)


def test_an_interrupted_spread_resumes_file_by_file_and_within_the_part(tmp_path: Path) -> None:
    hosts = ["h1", "h2"]
    seed(tmp_path, "h1", args_for(tmp_path, hosts))
    # h2 receives config.json (1 append), then 2 of the 3 chunks of shard 1 (names in order)
    with pytest.raises(Interrupted):
        run(tmp_path, hosts, {"h2": DropsAfter("h2", 3)}, parallel=1)
    assert sorted(snapshot(tmp_path, "h2")) == ["config.json"]
    assert (tmp_path / "h2" / "model" / ".model-00001-of-00002.safetensors.rigger-spread").stat().st_size == 2 * 2**20
    result = run(tmp_path, hosts)
    assert snapshot(tmp_path, "h2") == FILES
    rest = sorted(set(FILES) - {"config.json"})
    assert sorted(result.data["peer_copies"]["h2"]) == rest, "config.json was verified: not copied again"
    assert result.data["resumed_bytes"] == 2 * 2**20
    assert result.data["relayed_bytes"] == sum(len(FILES[n]) for n in rest) - 2 * 2**20


class Gone(LocalConnection):
    """A host that went away after its first file: every later call fails as a dead SSH
    connection does (an OSError from the transport)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.calls = 0

    def run_probe(self, name: str, args: Any = None, *, sudo: bool = False) -> dict[str, Any]:
        if name.startswith("model_peer_"):
            self.calls += 1
            if self.calls > 3:  # it received config.json (begin, append, finish), then went
                raise ConnectionResetError(f"connection to {self.host_name} closed")
        return super().run_probe(name, args, sudo=sudo)


def test_a_host_gone_mid_spread_fails_by_name_and_the_others_complete(tmp_path: Path) -> None:
    seed(tmp_path, "h1", args_for(tmp_path, HOSTS))
    with pytest.raises(TaskFailed, match=r"the spread did not complete: h3: ConnectionResetError") as failed:
        run(tmp_path, HOSTS, {"h3": Gone("h3")})
    for host in ("h1", "h2", "h4"):
        assert snapshot(tmp_path, host) == FILES, host
        assert (tmp_path / host / "model" / ".rigger-manifest.json").exists(), host
    assert not (tmp_path / "h3" / "model" / ".rigger-manifest.json").exists()
    assert list(failed.value.data["peer_copies"]["h3"]) == ["config.json"]
    assert any(n.startswith("h3 could not serve config.json") for n in failed.value.data["notes"]), "never a source?"


def test_a_resumed_part_that_does_not_match_is_fetched_again_whole(tmp_path: Path) -> None:
    hosts = ["h1", "h2"]
    seed(tmp_path, "h1", args_for(tmp_path, hosts))
    part = tmp_path / "h2" / "model" / ".config.json.rigger-spread"
    part.parent.mkdir(parents=True)
    part.write_bytes(b'{"model_type": "EVIL')  # shorter than the file: resumed from, then wrong
    result = run(tmp_path, hosts)
    assert snapshot(tmp_path, "h2") == FILES
    assert result.data["rejected"] == [], "a stale part is not the source's fault"


def test_a_fifo_or_a_hard_link_planted_at_a_part_name_is_removed_not_written_through(tmp_path: Path) -> None:
    """Real: a FIFO (an open for writing would block) and a hard link to another file (an
    append would land in that file) at the names the parts will have."""
    hosts = ["h1", "h2"]
    seed(tmp_path, "h1", args_for(tmp_path, hosts))
    model = tmp_path / "h2" / "model"
    model.mkdir(parents=True)
    os.mkfifo(model / ".config.json.rigger-spread")
    victim = tmp_path / "victim"
    victim.write_bytes(b"not to be touched\n")
    os.link(victim, model / ".model.safetensors.index.json.rigger-spread")
    run(tmp_path, hosts)
    assert snapshot(tmp_path, "h2") == FILES
    assert victim.read_bytes() == b"not to be touched\n"


def test_the_seed_fetches_with_its_own_huggingface_hub_and_a_failed_fetch_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real: this interpreter's huggingface_hub run as h1's (model_hub_download), offline
    (HF_HUB_OFFLINE passes through to the host, as ensure_model passes it; without it the
    client's retries take 25 s): the plan is made as if h1 had reached the hub (the seed of
    its site), so the hub round runs for real and fails, naming the download."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hosts = ["h1", "h2"]
    args = args_for(tmp_path, hosts)
    state = mod.State(listing(), seeds={"": "h1"}, holders={f.name: set() for f in listing().files})
    rounds = schedule(Fleet(tuple(hosts), {h: "" for h in hosts}, {"": "h1"}), state.holders)
    assert {(c.source, c.target) for c in rounds[0]} == {(HUB, "h1")} and len(rounds[0]) == len(FILES)
    change = Change("spread", payload={"state": state, "rounds": rounds, "site_of": {"h1": "", "h2": ""}, "notes": ()})
    with pytest.raises(TaskFailed, match=r"download of o/r failed: config\.json: \w+Error"):
        mod.apply(context(hosts, False), args, change)
    assert snapshot(tmp_path, "h2") == {}, "nothing spread from a fetch that failed"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"hosts": ["h1", "h1"]}, r"hosts lists a host twice"),
        ({"host_local_dir": {"h9": "/m"}}, r"host_local_dir names h9, not among the hosts"),
        ({"sites": {"a": ["h1"], "b": ["h1"]}}, r"'h1' is in two sites, 'a' and 'b'"),
        ({"sites": {"a": ["h9"]}}, r"site 'a' names 'h9', not among the hosts"),
    ],
)
def test_wrong_hosts_or_sites_fail_before_any_host_is_reached(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    def unreachable(name: str) -> LocalConnection:
        raise AssertionError(f"{name} reached")

    args = {**args_for(tmp_path, ["h1", "h2"]), **extra}
    ctx = TaskContext("h1", ScopedConnection(LocalConnection("h1")).planning(), {}, {}, connect=unreachable)
    with pytest.raises(TaskFailed, match=message):
        mod.plan(ctx, args)


def test_with_no_verified_copy_and_no_hub_the_plan_fails_naming_it(tmp_path: Path) -> None:
    """Real: this interpreter's huggingface_hub on each host, asking an endpoint where
    nothing listens."""
    hosts = ["h1", "h2"]
    args = args_for(tmp_path, hosts)
    seed(tmp_path, "h1", args)
    (tmp_path / "h1" / "model" / "config.json").write_bytes(b"{}\n")
    with pytest.raises(TaskFailed, match=r"no host holds config\.json and no host reached the hub"):
        mod.plan(context(hosts, True), args)


# -- through the CLI: a play over several inventory hosts -----------------------------------


def _play(tmp_path: Path, hosts: list[str]) -> tuple[Path, Path]:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"fleet": {"hosts": {h: {"ansible_connection": "local"} for h in hosts}}}))
    args = {k: v for k, v in args_for(tmp_path, hosts).items() if k in ("repo_id", "revision", "local_dir",
            "host_local_dir", "python", "endpoint", "reserve_free_mib", "chunk_mib")}  # fmt: skip
    task = {"name": "spread the model", "run_once": True, "spread_model": args}
    playbook = tmp_path / "spread.yml"
    playbook.write_text(json.dumps([{"hosts": "fleet", "gather_facts": False, "tasks": [task]}]))
    return playbook, inventory


def test_a_play_over_three_hosts_plans_then_spreads(tmp_path: Path, rigger: Any) -> None:
    """Real: the rigger CLI (in this process), the runner's run_once and its connections to
    the other inventory hosts (ctx.peer), the module and its probes."""
    hosts = ["h1", "h2", "h3"]
    seed(tmp_path, "h1", args_for(tmp_path, hosts))
    playbook, inventory = _play(tmp_path, hosts)
    checked = rigger("run", str(playbook), "-i", str(inventory), "--check", "--diff", "--output", "jsonl")
    assert checked.rc == 0, checked.stdout[-3000:] + checked.stderr[-3000:]
    assert snapshot(tmp_path, "h2") == {} and snapshot(tmp_path, "h3") == {}, "check mode copied"
    assert "config.json: from h1 (round 1)" in checked.stdout
    done = rigger("run", str(playbook), "-i", str(inventory), "--output", "jsonl")
    assert done.rc == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for host in hosts:
        assert snapshot(tmp_path, host) == FILES, host
