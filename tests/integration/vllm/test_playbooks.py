"""The Kimi serving playbooks through the real CLI (`python -m engine.cli run`, a subprocess).
(demo_cpu.yml's whole life with real vLLM, check to plan and apply, is
tests/integration/vllm/test_readme_demo.py: one file, one server start each way.)

kimi_k25_nvfp4.yml and kimi_k25_two_nodes.yml in check mode — Real: rigger, fact gathering through the real
nvidia-ml-py, every module's plan, a copy of the Kimi-K2.5-NVFP4 config files. Stand-in:
the eight SM 12.0 GPUs (tests/fakes/fake_nvml, the fake libnvidia-ml.so.1 pynvml loads);
for the two-node play, two inventory "nodes" on this machine (local connection) that both
see the same four fake GPUs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import fakenvml
import pytest
import yaml
from vllmkit import REPO, free_port, require_vllm

pytestmark = pytest.mark.slow
FIXTURE = REPO / "tests" / "fixtures" / "kimi-k2.5-nvfp4"


def rigger(*args: str, env: dict[str, str] | None = None, timeout_s: float = 900) -> list[Any]:
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "run", *args, "--output", "jsonl"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert events and events[-1]["event"] == "recap", done.stdout[-3000:] + done.stderr[-3000:]
    return events


def results(events: list[Any]) -> dict[str, Any]:
    return {e["task"]: e for e in events if e["event"] == "task_result"}


def failures(events: list[Any]) -> dict[str, str]:
    return {e["task"]: e["msg"] for e in events if e["event"] == "task_result" and e["status"] == "failed"}


def recap(events: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = events[-1]["hosts"]["localhost"]
    return counts


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_kimi_check_diff_on_eight_sm120_gpus_changes_nothing(tmp_path: Path) -> None:
    fake = fakenvml.create(tmp_path / "nvml")
    fake.eight_gpus()
    model = tmp_path / "Kimi-K2.5-NVFP4"
    shutil.copytree(FIXTURE, model)
    state_dir = Path.home() / ".local" / "state" / "rigger" / "vllm"
    state_before = tree(state_dir) if state_dir.exists() else {}
    model_before = tree(model)
    events = rigger(
        "playbooks/kimi_k25_nvfp4.yml", "-i", "inventory/local.yml", "--check", "--diff",
        "-e", json.dumps({"model_dir": str(model), "download_model": False,
                          "serve_port": free_port()}),
        env=fake.env(),
    )  # fmt: skip
    done = results(events)
    assert recap(events)["failed"] == 0, failures(events)
    # The story: the preflight finds FP8 KV on SM 12.0, so the patch would run, with its diff.
    compat = done["Can this host's GPUs and vLLM serve the checkpoint as it is?"]
    assert compat["data"]["facts"]["gpu.count"] == 8
    ids = [f["id"] for f in compat["data"]["findings"]]
    assert {"mla-fp8-kv-sm12x", "mla-fp8-kv-sm12x-vllm-unknown"} & set(ids), ids
    patch = done["FP8 KV cache removed from the checkpoint (only where the GPUs need it)"]
    assert patch["status"] == "changed"
    patch_diffs = "".join(d["before"] for d in patch["diffs"])
    assert "kv_cache_quant_algo" in patch_diffs or "kv_cache_scheme" in patch_diffs
    # What would start: vllm serve with TP 8 and the Kimi flags.
    serve = done["vLLM serves Kimi-K2.5 with tensor parallel 8"]
    assert serve["status"] == "changed"
    argv = next(d["after"] for d in serve["diffs"] if d["label"] == "vLLM argv")
    for flag in ("vllm\nserve\n", "--tensor-parallel-size 8", "--trust-remote-code",
                 "--reasoning-parser kimi_k2", "--kv-cache-dtype auto"):  # fmt: skip
        assert flag in argv, argv
    assert done["It answers, fast enough"]["status"] == "skipped"
    # No byte and no process changed.
    assert tree(model) == model_before
    assert (tree(state_dir) if state_dir.exists() else {}) == state_before
    assert not processes_mentioning(str(model)), "check mode started nothing"


def test_kimi_on_two_four_gpu_nodes_check_diff_shows_both_ranks_and_changes_nothing(tmp_path: Path) -> None:
    fake = fakenvml.create(tmp_path / "nvml")
    fake.write([fakenvml.gpu(i) for i in range(4)])
    model = tmp_path / "Kimi-K2.5-NVFP4"
    shutil.copytree(FIXTURE, model)
    model_before = tree(model)
    nodes = {"kimi-a": "10.1.0.1", "kimi-b": "10.1.0.2"}
    hosts = {name: {"ansible_connection": "local", "rigger_node_ip": ip, "rigger_node_interface": "ib0"}
             for name, ip in nodes.items()}  # fmt: skip
    inventory = tmp_path / "pair.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"kimi_pair": {"hosts": hosts}}}}))
    state_dir = Path.home() / ".local" / "state" / "rigger" / "vllm"
    state_before = tree(state_dir) if state_dir.exists() else {}
    events = rigger(
        "playbooks/kimi_k25_two_nodes.yml", "-i", str(inventory), "--check", "--diff",
        "-e", json.dumps({"model_dir": str(model), "download_model": False, "serve_port": free_port()}),
        env=fake.env(),
    )  # fmt: skip
    counts = events[-1]["hosts"]
    assert counts["kimi-a"]["failed"] == 0 and counts["kimi-b"]["failed"] == 0, failures(events)
    done = {(e["task"], e["host"]): e for e in events if e["event"] == "task_result"}
    compat = done[("Can each node's GPUs and vLLM serve its half as it is?", "kimi-b")]
    assert compat["data"]["facts"]["gpu.count"] == 4
    serve = done[("vLLM serves Kimi-K2.5 on both nodes, TP 4 x PP 2", "kimi-a")]
    assert serve["status"] == "changed", serve
    diffs = {d["label"]: d["after"] for d in serve["diffs"]}
    head, worker = diffs["rank 0 on kimi-a: vLLM argv"], diffs["rank 1 on kimi-b: vLLM argv"]
    for flag in ("--tensor-parallel-size 4", "--pipeline-parallel-size 2", "--nnodes 2", "--master-addr 10.1.0.1"):
        assert flag in head and flag in worker, (head, worker)
    assert "--node-rank 0" in head and "--headless" not in head and "--port" in head
    assert "--node-rank 1" in worker and "--headless" in worker and "--port" not in worker
    assert "VLLM_HOST_IP=10.1.0.2" in diffs["rank 1 on kimi-b: vLLM env"]
    assert "NCCL_SOCKET_IFNAME=ib0" in diffs["rank 1 on kimi-b: vLLM env"]
    assert done[("Every rank on both nodes alive, and a completion comes back", "kimi-a")]["status"] == "skipped"
    assert tree(model) == model_before
    assert (tree(state_dir) if state_dir.exists() else {}) == state_before
    assert not processes_mentioning(str(model)), "check mode started nothing"


def test_kimi_on_two_nodes_on_ray_check_diff_plans_the_cluster_then_the_head_only(tmp_path: Path) -> None:
    """The same play with -e kimi_backend=ray: real Ray's python (.venv-vllm) answers
    ray_cluster's plan (no node of the cluster runs), nothing is started."""
    fake = fakenvml.create(tmp_path / "nvml")
    fake.write([fakenvml.gpu(i) for i in range(4)])
    model = tmp_path / "Kimi-K2.5-NVFP4"
    shutil.copytree(FIXTURE, model)
    nodes = {"kimi-a": "10.1.0.1", "kimi-b": "10.1.0.2"}
    hosts = {name: {"ansible_connection": "local", "rigger_node_ip": ip, "rigger_node_interface": "ib0"}
             for name, ip in nodes.items()}  # fmt: skip
    inventory = tmp_path / "pair.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"kimi_pair": {"hosts": hosts}}}}))
    extra = {"model_dir": str(model), "download_model": False, "install_vllm": False, "serve_port": free_port(),
             "kimi_backend": "ray", "kimi_vllm_python": str(require_vllm())}  # fmt: skip
    events = rigger("playbooks/kimi_k25_two_nodes.yml", "-i", str(inventory), "--check", "--diff",
                    "-e", json.dumps(extra), env=fake.env())  # fmt: skip
    assert all(c["failed"] == 0 for c in events[-1]["hosts"].values()), failures(events)
    done = {(e["task"], e["host"]): e for e in events if e["event"] == "task_result"}
    cluster = done[("A Ray cluster over both nodes, all 8 GPUs in it (backend ray only)", "kimi-a")]
    assert cluster["status"] == "changed", cluster
    assert "kimi-b" in cluster["msg"], cluster["msg"]
    serve = done[("vLLM serves Kimi-K2.5 on both nodes, TP 4 x PP 2", "kimi-a")]
    argv = "".join(d["after"] for d in serve["diffs"] if "argv" in d["label"])
    assert "--distributed-executor-backend ray" in argv and "--nnodes" not in argv, argv
    assert not processes_mentioning("kimi-k25-pair"), "check mode started nothing"


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if entry.isdigit() and text.encode() in cmdline:
            found.append(int(entry))
    return found
