"""spread_model over real sshd against a real hub mirror: bytes from the hub, wall time,
per-host bytes, rounds, versus every host downloading; then the faults.

    python bench/spread_ssh_bench.py [--hosts 1 4 8] [--mib 1024] [--shards 8] [--faults] [--out F]

Real: one OpenSSH sshd per "host" on its own loopback address (127.0.0.41 onwards, the
launcher of tests/integration/ssh/sshlab.py; login user rigger-bench, or --user, with
/bin/sh and no sudo: the run lock is per user on a machine, so two benches at once need two
users), each host with its own directory; the real CLI (`python -m engine.cli run`, a
process of its own) running one play; huggingface_hub on the host side (a venv of the
system python that the hosts' user can run, --host-venv, as `ensure_model` runs the host's
`python`); the olah mirror of tests/integration/hub serving a git-lfs repository
(safetensors shards of random bytes with valid headers, the index, config.json and the
small json files, one pinned commit). The hub's byte count: a TCP relay in front of olah
counts every byte olah sends (HTTP headers included), which is what a metered hub sees.

For each N: every host downloads (`ensure_model` on each host, forks N or
--baseline-forks) versus one `spread_model` (run_once); each starts from empty directories.
With --faults, at the largest N: (A) h1 cannot reach the hub (spread_model's `endpoint` is
one for the group, so h1's sshd sets HTTP(S)_PROXY to a port where nothing listens: its
huggingface_hub's requests are refused, as a host's behind a dead egress proxy are) and
h5's sshd and sessions are SIGKILLed once h5 holds 40% of the model; (B) h5's sshd comes
back (same port, same host key) and the same play runs again: the bytes it relays are
compared with what the hosts lacked (missing files minus part files' lengths); (C) a byte
of shard 1 is flipped on h3 and shard 1 is deleted on h4..hN: the spread must not use h3's
copy (every host's shard 1 hashes to the hub's sha256 at the end, nothing rejected mid-copy).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for extra in ("tests/integration/ssh", "tests/integration/hub", "tests/fakes"):
    sys.path.insert(0, str(REPO / extra))
sys.path.insert(0, str(REPO))

import sshlab
from common import play_one_task
from olah_mirror import OlahMirror, build_repo

BENCH_USER = "rigger-bench"
FIRST_ADDRESS = 41  # 127.0.0.41 onwards: away from the tests' and bench/ssh's addresses
REPO_ID = "bench/synthetic"
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens on it here
MIB = 2**20


# -- the hub: olah behind a relay that counts the bytes it serves ----------------------------


class CountingRelay:
    """A TCP relay on loopback in front of ``upstream``; ``served`` counts upstream->client bytes."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.served = 0
        self.port = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return
        pipes = {
            asyncio.ensure_future(self._pipe(reader, up_writer, False)),
            asyncio.ensure_future(self._pipe(up_reader, writer, True)),
        }
        # an HTTP client does not half-close: when either side is done, the exchange is over
        # (waiting for both would leave a pending pipe per kept-alive connection)
        _, pending = await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        for w in (writer, up_writer):
            w.close()
        for task in pending:
            task.cancel()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: bool) -> None:
        try:
            while data := await reader.read(MIB):
                if count:
                    self.served += len(data)  # one event loop thread: no lock needed
                writer.write(data)
                await writer.drain()
        except OSError:
            pass


@dataclass
class CountedMirror(OlahMirror):
    front: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.front}"

    def _config(self) -> Path:
        path = super()._config()
        text = path.read_text().replace(f'netloc = "127.0.0.1:{self.port}"', f'netloc = "127.0.0.1:{self.front}"')
        path.write_text(text)
        return path


def shard_bytes(size: int) -> bytes:
    header = json.dumps({"weight": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + os.urandom(size)


def model_files(mib: int, shards: int) -> dict[str, bytes]:
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    files = {name: shard_bytes(mib * MIB // shards) for name in names}
    index = {
        "metadata": {"total_size": mib * MIB},
        "weight_map": {f"layers.{i}.weight": n for i, n in enumerate(names)},
    }
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_attention_heads": 32}
    files["model.safetensors.index.json"] = json.dumps(index, indent=2).encode() + b"\n"
    files["config.json"] = json.dumps(config, indent=2).encode() + b"\n"
    files["generation_config.json"] = b'{"bos_token_id": 1, "eos_token_id": 2}\n'
    files["tokenizer_config.json"] = b'{"model_max_length": 4096}\n'
    return files


@dataclass
class Hub:
    mirror: CountedMirror
    relay: CountingRelay
    commit: str
    sha256: dict[str, str]
    sizes: dict[str, int]

    def stop(self) -> None:
        self.mirror.stop()
        self.relay.loop.call_soon_threadsafe(self.relay.loop.stop)


def start_hub(work: Path, mib: int, shards: int) -> Hub:
    mirror = CountedMirror(work / "olah")
    mirror.workdir.mkdir(parents=True)
    relay = CountingRelay(mirror.port)
    mirror.front = relay.port
    build_repo(mirror.mirror_root)  # the tiny repository olah's start-up check asks for
    files = model_files(mib, shards)
    commit = build_repo(mirror.mirror_root, REPO_ID, files)
    mirror.commit = commit
    files[".gitattributes"] = (mirror.mirror_root / "models" / REPO_ID / ".gitattributes").read_bytes()
    mirror.start()
    return Hub(
        mirror,
        relay,
        commit,
        {n: hashlib.sha256(d).hexdigest() for n, d in files.items()},
        {n: len(d) for n, d in files.items()},
    )


# -- the fleet: one sshd per host -------------------------------------------------------------


@dataclass
class Fleet:
    work: Path
    key: Path
    known_hosts: Path
    servers: dict[str, sshlab.Sshd] = field(default_factory=dict)
    host_key: Path = Path()

    def dir(self, host: str) -> Path:
        return self.work / "hosts" / host / "model"

    def start(self, host: str, port: int | None = None, env: str = "") -> None:
        address = f"127.0.0.{FIRST_ADDRESS + int(host[1:]) - 1}"
        extra = [f"AllowUsers {BENCH_USER}", *([f"SetEnv {env}"] if env else [])]
        self.servers[host] = sshlab.start_sshd(
            self.work, host, (address,), host_key=self.host_key, extra_config=extra, port=port
        )

    def kill(self, host: str) -> None:
        self.servers[host].kill_all()

    def restart(self, host: str, env: str = "") -> None:
        """The host back on its port with its host key (after a kill, or to change its environment)."""
        if self.servers[host].process.poll() is None:
            self.kill(host)
        self.start(host, port=self.servers[host].port, env=env)

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()

    def fresh_dirs(self, hosts: list[str]) -> None:
        for host in hosts:
            top = self.dir(host).parent
            shutil.rmtree(top, ignore_errors=True)
            top.mkdir(parents=True)
            shutil.chown(top, BENCH_USER, BENCH_USER)

    def inventory(self, hosts: list[str]) -> dict[str, Any]:
        return {
            "fleet": {
                "hosts": {
                    h: sshlab.host_vars(
                        self.servers[h],
                        self.key,
                        self.known_hosts,
                        user=BENCH_USER,
                        model_dir=str(self.dir(h)),
                        ssh_connect_timeout_s=10,
                    )
                    for h in hosts
                }
            }
        }


HUBLESS_ENV = " ".join(f"{k}={DEAD_PROXY}" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"))


def start_fleet(work: Path, count: int) -> Fleet:
    sshlab.require_prerequisites()
    (work / "hosts").mkdir(parents=True)
    work.chmod(0o755)
    key = sshlab.keygen(work / "bench_ed25519")
    sshlab.ensure_user(BENCH_USER, key)
    fleet = Fleet(work, key, work / "known_hosts", host_key=sshlab.keygen(work / "host_ed25519"))
    for i in range(1, count + 1):
        fleet.start(f"h{i}")
    fleet.known_hosts.write_text("".join(s.known_hosts_lines() for s in fleet.servers.values()))
    return fleet


# -- one run of the CLI ---------------------------------------------------------------------


@dataclass
class Run:
    rc: int
    wall_s: float
    hub_wire_bytes: int
    result: dict[str, Any]  # the spread task's task_result event (or {} for the baseline)
    stdout: str


def run_play(fleet: Fleet, hub: Hub, hosts: list[str], task: dict[str, Any], forks: int) -> Run:
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN" and not k.lower().endswith("_proxy")}
    env.update(PYTHONPATH=str(REPO), HF_HUB_DISABLE_XET="1", HF_HUB_ETAG_TIMEOUT="5")
    before = hub.relay.served
    run = play_one_task(fleet.work, "play", fleet.inventory(hosts), task, env, ("--forks", str(forks)))
    result = run.last_event("relayed_bytes", kind="task_result")
    return Run(run.rc, round(run.wall_s, 1), hub.relay.served - before, result, run.output)


def host_python(venv: Path) -> str:
    """The hosts' own interpreter with huggingface_hub (this checkout's version): a venv of the
    system python that the hosts' user can run (this checkout's venv lives under root's home)."""
    python = venv / "bin" / "python"
    if not python.exists():
        from importlib.metadata import version

        subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True)
        pin = f"huggingface_hub=={version('huggingface_hub')}"
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", pin], check=True)
    return str(python)


HOST_PYTHON = ""


def hub_args(hub: Hub) -> dict[str, Any]:
    return {
        "repo_id": REPO_ID,
        "revision": hub.commit,
        "python": HOST_PYTHON,
        "endpoint": hub.mirror.endpoint,
        "reserve_free_mib": 0,  # every "host" shares this machine's one disk
    }


def spread_task(fleet: Fleet, hub: Hub, hosts: list[str]) -> dict[str, Any]:
    args = {**hub_args(hub), "local_dir": "/nonexistent", "host_local_dir": {h: str(fleet.dir(h)) for h in hosts}}
    return {"name": "spread", "run_once": True, "spread_model": args, "register": "spread"}


def held(path: Path, names: list[str]) -> int:
    """Bytes of the model's files in a host's directory, at their final names or in part files."""
    paths = [path / n for n in names] + [path / f".{n}.rigger-spread" for n in names]
    return sum(p.stat().st_size for p in paths if p.is_file())


def lacking(fleet: Fleet, hub: Hub, hosts: list[str]) -> int:
    """What the hosts still need: each file not at its final name, less its part file's length."""
    need = 0
    for host in hosts:
        for name, size in hub.sizes.items():
            final = fleet.dir(host) / name
            part = fleet.dir(host) / f".{name}.rigger-spread"
            if not (final.exists() and final.stat().st_size == size):
                need += size - (part.stat().st_size if part.exists() else 0)
    return need


def served_by(hub: Hub, data: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for copies in data.get("peer_copies", {}).values():
        for name, source in copies.items():
            out[source] = out.get(source, 0) + hub.sizes[name]
    return out


def rounds_of(result: dict[str, Any]) -> int | None:
    found = re.search(r"in (\d+) rounds", json.dumps(result))
    return int(found.group(1)) if found else None


def report(label: str, run: Run, fleet: Fleet, hosts: list[str], hub: Hub, **extra: Any) -> dict[str, Any]:
    data = run.result.get("data") or {}
    row = {
        "case": label,
        "hosts": len(hosts),
        "rc": run.rc,
        "wall_s": run.wall_s,
        "hub_wire_bytes": run.hub_wire_bytes,
        "hub_file_bytes": data.get("hub_bytes"),
        "relayed_bytes": data.get("relayed_bytes"),
        "resumed_bytes": data.get("resumed_bytes"),
        "rounds": rounds_of(run.result),
        "received_bytes": {h: held(fleet.dir(h), list(hub.sizes)) for h in hosts},
        "served_bytes": served_by(hub, data),
        "hub_files_by": {h: len(v) for h, v in data.get("hub_files", {}).items()},
        "rejected": data.get("rejected"),
        "notes": data.get("notes"),
        **extra,
    }
    print(json.dumps(row), flush=True)
    if run.rc != 0 and not extra.get("may_fail"):
        print(run.stdout[-4000:], file=sys.stderr)
    return row


def measure(fleet: Fleet, hub: Hub, count: int, baseline: bool = True, forks: int = 0) -> list[dict[str, Any]]:
    hosts = [f"h{i}" for i in range(1, count + 1)]
    rows = []
    if baseline:
        fleet.fresh_dirs(hosts)
        task = {"name": "download", "ensure_model": {**hub_args(hub), "local_dir": "{{ model_dir }}"}}
        run = run_play(fleet, hub, hosts, task, min(forks or count, count))
        rows.append(report("every host downloads", run, fleet, hosts, hub, forks=min(forks or count, count)))
    fleet.fresh_dirs(hosts)
    rows.append(
        report("spread_model", run_play(fleet, hub, hosts, spread_task(fleet, hub, hosts), count), fleet, hosts, hub)
    )
    return rows


def kill_when(fleet: Fleet, hub: Hub, victim: str, threshold: int, stop: threading.Event, when: list[float]) -> None:
    started = time.perf_counter()
    while not stop.wait(0.2):
        if held(fleet.dir(victim), list(hub.sizes)) >= threshold:
            fleet.kill(victim)
            when.append(round(time.perf_counter() - started, 1))
            return


def faults(fleet: Fleet, hub: Hub, count: int) -> list[dict[str, Any]]:
    hosts = [f"h{i}" for i in range(1, count + 1)]
    total = sum(hub.sizes.values())
    fleet.fresh_dirs(hosts)
    fleet.restart("h1", env=HUBLESS_ENV)
    victim, stop, when = hosts[min(4, count - 1)], threading.Event(), []
    watcher = threading.Thread(target=kill_when, args=(fleet, hub, victim, int(total * 0.4), stop, when))
    watcher.start()
    first = run_play(fleet, hub, hosts, spread_task(fleet, hub, hosts), count)
    stop.set()
    watcher.join()
    if not when:
        raise SystemExit(f"{victim} was not killed (the run ended first):\n{first.stdout[-3000:]}")
    rows = [report(f"A: h1 without hub, {victim} killed", first, fleet, hosts, hub, killed_at_s=when, may_fail=True,
                   failed_msg=(first.result.get("msg") or "")[:400])]  # fmt: skip
    expected = lacking(fleet, hub, hosts)
    fleet.restart(victim)
    second = run_play(fleet, hub, hosts, spread_task(fleet, hub, hosts), count)
    rows.append(report("B: the same play again (resume)", second, fleet, hosts, hub, lacked_bytes=expected))
    shard = next(n for n in sorted(hub.sizes) if n.endswith(".safetensors"))
    bad = fleet.dir("h3") / shard
    with open(bad, "r+b") as handle:  # a tensor byte: size and header stay valid
        handle.seek(hub.sizes[shard] // 2)
        byte = handle.read(1)
        handle.seek(hub.sizes[shard] // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    for host in hosts[3:]:
        (fleet.dir(host) / shard).unlink()
    third = run_play(fleet, hub, hosts, spread_task(fleet, hub, hosts), count)
    digests = {h: hashlib.sha256((fleet.dir(h) / shard).read_bytes()).hexdigest() == hub.sha256[shard] for h in hosts}
    rows.append(
        report(
            "C: shard 1 flipped on h3, deleted on h4+", third, fleet, hosts, hub, shard=shard, shard_ok_after=digests
        )
    )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--mib", type=int, default=1024, help="model size (MiB of tensor bytes)")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--faults", action="store_true", help="then the fault runs at the largest N")
    parser.add_argument(
        "--skip-baseline",
        action="store_true",
        help="no 'every host downloads' run (olah 0.5.4 holds what it serves in memory: 8 hosts "
        "downloading 1 GiB at once took it past 22 GB here)",
    )
    parser.add_argument("--baseline-forks", type=int, default=0, help="hosts downloading at once (default N)")
    parser.add_argument("--skip-measure", action="store_true", help="only the fault runs")
    parser.add_argument(
        "--host-venv",
        type=Path,
        default=Path("/tmp/rigger-bench-hostpy"),
        help="the hosts' python venv (made with /usr/bin/python3 when missing)",
    )
    parser.add_argument(
        "--user", default="rigger-bench", help="the hosts' login user (its run lock is the hosts' lock)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write every row here as JSON")
    opts = parser.parse_args()
    count = max(opts.hosts)
    global HOST_PYTHON, BENCH_USER
    BENCH_USER = opts.user
    HOST_PYTHON = host_python(opts.host_venv)
    work = Path(tempfile.mkdtemp(prefix="spread-ssh-bench-", dir="/tmp"))
    work.chmod(0o755)  # the hosts' user walks through it to its directory
    rows: list[dict[str, Any]] = []
    hub = start_hub(work / "hub", opts.mib, opts.shards)
    fleet = start_fleet(work / "fleet", count)
    try:
        print(json.dumps({"model_bytes": sum(hub.sizes.values()), "files": len(hub.sizes), "commit": hub.commit}))
        if not opts.skip_measure:
            for n in opts.hosts:
                rows.extend(measure(fleet, hub, n, baseline=not opts.skip_baseline, forks=opts.baseline_forks))
        if opts.faults:
            rows.extend(faults(fleet, hub, count))
    finally:
        fleet.stop()
        hub.stop()
        if opts.out:
            opts.out.write_text(json.dumps(rows, indent=1))
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
