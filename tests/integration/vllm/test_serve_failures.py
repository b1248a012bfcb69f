"""serve_vllm failing clearly: a bad model directory, a port someone else holds, no launcher.

Real: vLLM CPU failing on a broken model directory (its own log, its own exit), a real
listening socket held by a Python http.server that rigger did not start, /proc.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from vllmkit import (
    SAFE_DTYPE,
    alive,
    free_port,
    live_session_members,
    plan_only,
    require_vllm,
    run_module,
    wait_until,
)

import modules.serving.serve_vllm as serve_vllm
from engine.errors import TaskFailed

pytestmark = pytest.mark.slow


def serve_args(model: Path, state_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": "broken",
        "model": str(model),
        "launcher": str(require_vllm()),
        "port": free_port(),
        "dtype": SAFE_DTYPE,
        "max_model_len": 256,
        "gpu_memory_utilization": 0.05,
        "ready_timeout_s": 600,
        "state_dir": str(state_dir),
        **extra,
    }


def test_bad_model_directory_fails_fast_quoting_the_log(tmp_path: Path) -> None:
    model = tmp_path / "not-a-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
    args = serve_args(model, tmp_path / "state")
    started = time.monotonic()
    with pytest.raises(TaskFailed) as failure:
        run_module(serve_vllm, args)
    elapsed = time.monotonic() - started
    message = failure.value.msg
    # Failed long before ready_timeout_s (600 s): on the process exit, not the timeout.
    assert elapsed < 180, elapsed
    assert "vLLM did not start" in message and "not ready after" not in message
    assert "no_such_architecture" in message, message
    log_path = Path(failure.value.data["log_path"])
    quoted = failure.value.data["fatal_line"]
    assert quoted and quoted in log_path.read_text()
    assert failure.value.data["log_tail"], "the log's last lines travel with the failure"
    # Nothing of it is left running.
    pid = int(failure.value.data["pid"])
    assert live_session_members(pid) == []


@pytest.fixture
def foreign_listener() -> Any:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: _listening_pid(port) is not None, 10), "http.server did not start"
        yield port, proc
    finally:
        proc.kill()
        proc.wait()


def _listening_pid(port: int) -> int | None:
    from engine.probes import run_in_process

    owners = run_in_process("port_owner", {"port": port})["owners"]
    return int(owners[0]["pid"]) if owners else None


def test_port_taken_by_another_process_fails_naming_it(tiny_model: Path, tmp_path: Path, foreign_listener: Any) -> None:
    port, proc = foreign_listener
    args = {**serve_args(tiny_model, tmp_path / "state"), "port": port}
    with pytest.raises(TaskFailed) as failure:
        plan_only(serve_vllm, args)
    message = failure.value.msg
    assert f"port {port} is already in use" in message
    assert f"pid {proc.pid}" in message and "http.server" in message
    assert "rigger never kills" in message
    # The same in a real run, and the other process is untouched.
    with pytest.raises(TaskFailed, match=f"pid {proc.pid}"):
        run_module(serve_vllm, args)
    assert alive(proc.pid)
    assert not (tmp_path / "state" / "broken.json").exists(), "nothing was launched"


def test_missing_launcher_is_a_clear_failure(tiny_model: Path, tmp_path: Path) -> None:
    args = {**serve_args(tiny_model, tmp_path / "state"), "launcher": "/nonexistent/vllm"}
    with pytest.raises(TaskFailed, match="could not execute '/nonexistent/vllm'"):
        run_module(serve_vllm, args)
