"""The Kimi playbook's saved plan applied whole on a clean host: every reviewed step,
in one go, no drift.

The plan predicts what the earlier steps leave (engine/connection/predicted.py): the
server's spec hash covers the config files that the reviewed patch_quant_config edits,
so the plan hashes the patched files and the apply, which hashes them after the real
patch, finds the same spec.

Real: the rigger CLI (plan and apply, each a process of its own), fact gathering through
the real nvidia-ml-py, every module's plan and apply, a copy of the Kimi-K2.5-NVFP4
config files really patched, a private mount namespace whose /dev/shm is a fresh tmpfs,
a server process really started in its own session and asked over HTTP.
Not real: the GPUs (tests/fakes/fake_nvml, no process holding them), vLLM (the launcher
is tests/fakes/fake_vllm/vllm, which answers /health, /v1/models and completions).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import fakenvml
from ports import free_port

REPO = Path(__file__).resolve().parents[3]
FIXTURE = REPO / "tests" / "fixtures" / "kimi-k2.5-nvfp4"
LAUNCHER = REPO / "tests" / "fakes" / "fake_vllm" / "vllm"


def in_private_shm(tmp_path: Path, *commands: list[str]) -> subprocess.CompletedProcess[str]:
    """The rigger commands, one after the other, in a mount namespace of their own."""
    fake = fakenvml.create(tmp_path / "nvml")
    fake.eight_gpus([])
    steps = " && ".join(" ".join(repr(a) for a in command) for command in commands)
    script = f"mount -t tmpfs -o size=2g,mode=1777 rigger-plan-shm /dev/shm && {steps}"
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd=REPO,
        env={**os.environ, **fake.env(), "PYTHONPATH": str(REPO), "HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def stop_server(state_file: Path) -> None:
    if state_file.exists():
        record = json.loads(state_file.read_text())
        with contextlib.suppress(ProcessLookupError):  # the session serve_vllm started
            os.killpg(int(record["sid"]), signal.SIGKILL)


def test_the_kimi_plan_applies_every_reviewed_step_with_no_drift(tmp_path: Path) -> None:
    model = tmp_path / "Kimi-K2.5-NVFP4"
    shutil.copytree(FIXTURE, model)
    (tmp_path / "home").mkdir()
    port = free_port()
    extra = json.dumps(
        {
            "model_dir": str(model),
            "download_model": False,
            "install_vllm": False,
            "serve_port": port,
            "kimi_vllm_launcher": str(LAUNCHER),
            # the GPU stand-in has no NCCL to smoke-test (tests/modules/test_collective_smoke.py
            # tests that step, with a stand-in torch and with the vLLM CPU venv's gloo)
            "kimi_collective_smoke": "never",
        }
    )
    plan_file = tmp_path / "kimi.json"
    cli = [sys.executable, "-m", "engine.cli"]
    book = ["playbooks/kimi_k25_nvfp4.yml", "-i", "inventory/local.yml", "-e", extra]
    state_file = tmp_path / "home" / ".local" / "state" / "rigger" / "vllm" / "kimi-k25.json"
    try:
        done = in_private_shm(
            tmp_path, [*cli, "plan", *book, "-o", str(plan_file)], [*cli, "apply", str(plan_file), "-e", extra]
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-6000:]
        saved = json.loads(plan_file.read_text())
        pending = [s["task"] for s in saved["hosts"][0]["steps"] if s["planned"] == "change" and not s["read_only"]]
        assert pending == [
            "FP8 KV cache removed from the checkpoint (only where the GPUs need it)",
            "vLLM serves Kimi-K2.5 with tensor parallel 8",
        ], pending
        assert f"applied {len(pending)} reviewed changes" in output, output[-4000:]
        assert "drifted" not in output and "refused" not in output, output[-4000:]
        assert "kv_cache_scheme" not in (model / "config.json").read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as answer:
            assert json.load(answer)["data"][0]["id"] == "kimi-k2.5"
    finally:
        stop_server(state_file)


def serve_book(tmp_path: Path, port: int) -> Path:
    book = tmp_path / f"serve-{port}.yml"
    book.write_text(
        f"""\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: vLLM serves
      serve_vllm:
        name: impact-test
        model: {tmp_path / "model"}
        served_model_name: tiny
        launcher: {LAUNCHER}
        port: {port}
        state_dir: {tmp_path / "state"}
    - name: It answers
      check_serving: {{port: {port}, model: tiny, requests: 2, concurrency: 1, max_tokens: 4}}
"""
    )
    return book


def test_a_port_change_says_it_stops_the_healthy_server_then_starts_with_argv(rigger: Any, tmp_path: Path) -> None:
    """Real: the CLI, serve_vllm's plan and apply, a server process in its own session
    answering /health on the port it was started on, check_serving's benchmark. Not real:
    vLLM (tests/fakes/fake_vllm/vllm). The health probe asks the running server on its own
    port (not the new one), and the benchmark is no planned change."""
    shutil.copytree(FIXTURE, tmp_path / "model")
    old, new = free_port(), free_port()
    state_file = tmp_path / "state" / "impact-test.json"
    try:
        first = rigger("run", str(serve_book(tmp_path, old)))
        assert first.rc == 0, first.stdout + first.stderr
        pid = json.loads(state_file.read_text())["pid"]

        planned = rigger("plan", str(serve_book(tmp_path, new)), "-o", str(tmp_path / "plan.json"))
        assert planned.rc == 0, planned.stdout + planned.stderr
        assert "1 change pending" in planned.stdout, "check_serving is not a change"
        shown = rigger("show", str(tmp_path / "plan.json")).stdout
        assert f"restart vLLM: the spec changed (pid {pid} runs an older one)" in shown, shown
        assert "not healthy" not in shown, shown
        assert f"stops vLLM pid {pid} serving tiny on :{old}" in shown, shown
        assert f"then starts impact-test on port {new} with argv {LAUNCHER} serve" in shown, shown
    finally:
        stop_server(state_file)
