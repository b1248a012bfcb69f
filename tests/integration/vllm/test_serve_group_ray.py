"""serve_vllm_group with backend ray against a real Ray head: what the CPU build does with it.

Real: Ray 2.60.0 (`ray start --head --block`, started here in its own session and stopped by
its pid; never `ray stop`, which would stop every Ray on the machine), `ray status`, vLLM CPU
0.32.0 launched with --distributed-executor-backend ray, its log and processes.
vLLM's CPU platform refuses the Ray executor ("current platform cpu does not support ray",
v1/executor/ray_utils.py), so the bring-up must fail quickly quoting that line and leave
nothing running. Not real: nothing; the single node is this machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllmkit import (
    SAFE_DTYPE,
    free_port,
    listening,
    live_session_members,
    plan_only,
    require_vllm,
    run_module,
    wait_until,
)

import modules.serving.serve_vllm_group as serve_vllm_group
from engine.errors import TaskFailed
from engine.module_api import Change

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A home of its own: Ray reads ~/.ray (an auth token another Ray user left there makes
    `ray status` fail with InvalidAuthToken against this token-less head)."""
    home = tmp_path_factory.mktemp("ray-home")
    before = os.environ["HOME"]
    os.environ["HOME"] = str(home)
    try:
        yield home
    finally:
        os.environ["HOME"] = before


@pytest.fixture(scope="module")
def ray_head(ray_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    ray = Path(require_vllm()).parent / "ray"
    port = free_port()
    temp = tmp_path_factory.mktemp("ray")
    head = subprocess.Popen(
        [str(ray), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(port),
         "--num-cpus", "1", "--object-store-memory", "200000000", "--include-dashboard", "false",
         "--disable-usage-stats", "--temp-dir", str(temp)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        status = None
        for _ in range(30):
            status = subprocess.run([str(ray), "status", "--address", address], capture_output=True, text=True)
            if status.returncode == 0 and "node_" in status.stdout:
                break
            time.sleep(1)
        assert status is not None and status.returncode == 0, status.stderr if status else "no ray status"
        yield address
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # --block: ray start stops the processes it started
        head.wait(60)


def ray_args(model: Path, state_dir: Path, address: str, **extra: object) -> dict[str, object]:
    return {
        "name": "tiny-ray", "model": str(model), "served_model_name": "tiny", "launcher": str(require_vllm()),
        "backend": "ray", "ray_address": address, "dtype": SAFE_DTYPE, "max_model_len": 256,
        "gpu_memory_utilization": 0.05, "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "port": free_port(),
        "ready_timeout_s": 300, "state_dir": str(state_dir), **extra,
    }  # fmt: skip


def test_ray_backend_sees_the_cluster_and_the_cpu_build_refusal_is_quoted(
    ray_head: str, tiny_model: Path, tmp_path: Path
) -> None:
    args = ray_args(tiny_model, tmp_path / "state", ray_head)
    planned = plan_only(serve_vllm_group, args)
    assert isinstance(planned, Change) and planned.summary == "start the vLLM group on 1 nodes", planned.summary
    no_cluster = plan_only(serve_vllm_group, {**args, "ray_address": f"127.0.0.1:{free_port()}"})
    assert isinstance(no_cluster, Change) and "no Ray cluster answers at 127.0.0.1:" in no_cluster.summary

    with pytest.raises(TaskFailed) as failed:
        run_module(serve_vllm_group, args)
    print(failed.value.msg)
    assert "current platform cpu does not support ray" in failed.value.msg
    record = json.loads((tmp_path / "state" / "tiny-ray@localhost.json").read_text())
    assert record["argv"][-2:] == ["--distributed-executor-backend", "ray"]
    sid = int(record["sid"])
    assert record["env"]["RAY_ADDRESS"] == ray_head, "vLLM joins the declared cluster, not a private one"
    assert wait_until(lambda: live_session_members(sid) == [], 10), "what was started was stopped again"
    assert not listening(int(str(args["port"])))
