"""spread_model on N loopback "hosts": bytes and wall time of one spread.

    python bench/spread_bench.py [--hosts 1 4 8] [--mib 64] [--shards 4] [--chunk-mib 4]

Each host is an inventory name on the local connection with its own directory under a
temp dir; host h1 holds a synthetic snapshot (random shards with valid safetensors
headers) and the manifest `ensure_model` writes, so no hub is needed; the others start
empty. For each N, the real CLI (`python -m engine.cli run`, a process of its own) runs
one play with spread_model, and the report gives the wall time, the bytes relayed through
the controller (from the task's registered data), the bytes each host received, and the
rounds. With --hub-endpoint and --repo/--revision, h1 starts empty too and the seed
fetches from that hub (the olah mirror of tests/integration/hub counts the bytes it
serves). Keep the sizes small on a shared machine: every byte is written N-1 times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from common import local_fleet, play_one_task

from modules.checkpoints.manifest import HubFile, Listing, Manifest

COMMIT = "0" * 40


def shard(size: int) -> bytes:
    payload = os.urandom(size)
    header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    return struct.pack("<Q", len(header)) + header + payload


def seed(root: Path, args: dict[str, Any], mib: int, shards: int) -> int:
    root.mkdir(parents=True)
    files = []
    for index in range(1, shards + 1):
        name = f"model-{index:05d}-of-{shards:05d}.safetensors"
        data = shard(mib * 2**20 // shards)
        (root / name).write_bytes(data)
        files.append(HubFile(name, len(data), hashlib.sha256(data).hexdigest()))
    manifest = Manifest.build({**args, "local_dir": str(root)}, Listing(COMMIT, tuple(files)), "sha256")
    (root / ".rigger-manifest.json").write_text(manifest.to_json())
    return sum(f.size for f in files)


def one(work: Path, count: int, opts: argparse.Namespace) -> dict[str, Any]:
    hosts = [f"h{i}" for i in range(1, count + 1)]
    args: dict[str, Any] = {
        "repo_id": opts.repo,
        "revision": opts.revision,
        "local_dir": str(work / "unused"),
        "host_local_dir": {h: str(work / h / "model") for h in hosts},
        "allow_patterns": None,
        "ignore_patterns": None,
        "python": sys.executable,
        "endpoint": opts.hub_endpoint or "http://127.0.0.1:9",
        "reserve_free_mib": 0,
        "chunk_mib": opts.chunk_mib,
    }
    total = 0 if opts.hub_endpoint else seed(work / "h1" / "model", args, opts.mib, opts.shards)
    task = {"name": "spread", "run_once": True, "spread_model": args, "register": "spread"}
    run = play_one_task(work, "spread", local_fleet(hosts), task)
    if run.rc != 0:
        raise SystemExit(f"N={count}: rigger exited {run.rc}\n{run.output[-6000:]}")
    data: dict[str, Any] = run.last_event("relayed_bytes").get("data", {})
    received = {h: sum(f.stat().st_size for f in (work / h / "model").rglob("*.safetensors")) for h in hosts}
    return {
        "hosts": count,
        "model_bytes": total or data.get("bytes", 0),
        "wall_s": round(run.wall_s, 2),
        "hub_bytes": data.get("hub_bytes", 0),
        "relayed_bytes": data.get("relayed_bytes", 0),
        "received_bytes": received,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--mib", type=int, default=64, help="model size (MiB)")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--chunk-mib", type=int, default=4)
    parser.add_argument("--hub-endpoint", default=None)
    parser.add_argument("--repo", default="bench/synthetic")
    parser.add_argument("--revision", default=COMMIT)
    opts = parser.parse_args()
    for count in opts.hosts:
        with tempfile.TemporaryDirectory(prefix="spread-bench-") as work:
            print(json.dumps(one(Path(work), count, opts)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
