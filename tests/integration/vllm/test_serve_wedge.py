"""Wedged engines on real vLLM CPU: /health says 200, the engine makes no progress.

Real: vLLM CPU (its API server and the EngineCore it forks), the tiny model, /proc, HTTP,
SIGSTOP / SIGCONT / SIGKILL on the real EngineCore, check_serving and serve_vllm as the
engine drives them. Nothing is faked. The tests share one server, in file order (each
start costs 30-90 s on two cores); each says what it proves.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllmkit import SAFE_DTYPE, alive, context, free_port, http_json, require_vllm, run_module, wait_until

import modules.serving.check_serving as check_serving
import modules.serving.serve_vllm as serve_vllm
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    args = {
        "name": "tiny-wedge",
        "model": str(tiny_model),
        "served_model_name": "tiny",
        "launcher": str(require_vllm()),
        "port": free_port(),
        "dtype": SAFE_DTYPE,
        "max_model_len": 256,
        "gpu_memory_utilization": 0.05,
        "extra_args": ["--enforce-eager"],
        "ready_timeout_s": 400,
        "wedge_timeout_s": 20,
        "state_dir": str(tmp_path_factory.mktemp("vllm-state")),
    }
    started = run_module(serve_vllm, args)
    assert started.changed, started.planned
    try:
        yield {**args, "pid": int(started.data["pid"])}
    finally:
        for pid in engine_cores(args):
            os.kill(pid, signal.SIGCONT)
        run_module(serve_vllm, {**args, "state": "stopped"})


def state_pid(args: dict[str, Any]) -> int:
    return int(json.loads((Path(args["state_dir"]) / f"{args['name']}.json").read_text())["pid"])


def engine_cores(args: dict[str, Any]) -> list[int]:
    """The EngineCore processes of the recorded server (vLLM retitles them VLLM::EngineCore)."""
    try:
        root = state_pid(args)
    except (OSError, ValueError):
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[0]
            sid = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[3])
        except (OSError, IndexError, ValueError):
            continue
        if sid == root and title.startswith(b"VLLM::EngineCore"):
            found.append(int(entry))
    return found


def measure(args: dict[str, Any]) -> Any:
    full = {name: spec.get("default") for name, spec in check_serving.SCHEMA["properties"].items()}
    full.update(
        {"port": args["port"], "model": "tiny", "pid": state_pid(args), "wedge_timeout_s": 20, "requests": 2,
         "max_tokens": 4, "request_timeout_s": 60}
    )  # fmt: skip
    return check_serving.apply(context(LocalConnection(), [], planning=False, become=False), full, Change("measure"))


def url(args: dict[str, Any]) -> str:
    return f"http://127.0.0.1:{args['port']}"


def test_a_stopped_engine_core_is_wedged_while_health_says_200(server: dict[str, Any]) -> None:
    (core,) = engine_cores(server)
    os.kill(core, signal.SIGSTOP)
    try:
        assert http_json(url(server) + "/health", timeout_s=10)[0] == 200, "the API still answers"
        with pytest.raises(TaskFailed) as failed:
            measure(server)
        assert f"(pid {core}) is stopped (SIGSTOP) (state T)" in failed.value.msg
        assert "VLLM::EngineCore" in failed.value.msg
    finally:
        os.kill(core, signal.SIGCONT)
    result = measure(server)  # resumed: it makes progress again, and is measured
    assert result.data["errors"] == 0


def test_serve_vllm_restarts_a_wedged_server_with_its_spec_unchanged(server: dict[str, Any]) -> None:
    before = state_pid(server)
    (core,) = engine_cores(server)
    os.kill(core, signal.SIGSTOP)
    run = run_module(serve_vllm, server)
    assert isinstance(run.planned, Change)
    assert run.planned.summary.startswith("restart vLLM, spec unchanged: it is wedged (VLLM::EngineCore")
    assert run.changed and state_pid(server) != before
    assert not alive(core), "the stopped EngineCore was ended with its session"
    assert measure(server).data["errors"] == 0


def test_a_killed_engine_core_is_caught_in_bounded_time(server: dict[str, Any]) -> None:
    (core,) = engine_cores(server)
    os.kill(core, signal.SIGKILL)
    assert wait_until(lambda: not alive(core), 30)
    with pytest.raises(TaskFailed) as failed:
        measure(server)
    msg = failed.value.msg
    # vLLM either keeps answering /health (then the completion bound catches it) or notices
    # and goes down; both are reported, neither hangs for request_timeout_s
    assert "is wedged" in msg or "errors" in msg, msg
    run = run_module(serve_vllm, server)
    assert run.changed, run.planned
    assert measure(server).data["errors"] == 0
