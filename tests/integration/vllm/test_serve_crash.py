"""A vLLM engine that crashes after start-up is reported as a crash, quoting its fatal line.

Real: vLLM CPU (`.venv-vllm`) serving the tiny model, its API server, EngineCore and
worker processes, the worker dying of a real SIGILL, vLLM's own log of it, serve_vllm's
readiness wait and check_serving's measurement, /proc. Not real: what raises the SIGILL -
tests/integration/vllm/fault_injection/sitecustomize.py (on the server's PYTHONPATH) makes
the worker's CPU attention call kill itself with SIGILL once a trigger file exists, the way
the bf16 kernel faults on a CPU that advertises instructions it may not run (issue 11).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllmkit import SAFE_DTYPE, free_port, listening, live_session_members, require_vllm, run_module

import modules.serving.check_serving as check_serving
import modules.serving.serve_vllm as serve_vllm
from engine.errors import TaskFailed

pytestmark = pytest.mark.slow
FAULT_DIR = Path(__file__).parent / "fault_injection"


def crash_args(model: Path, state_dir: Path, trigger: Path, **env: str) -> dict[str, Any]:
    return {
        "name": "crashing",
        "model": str(model),
        "served_model_name": "tiny",
        "launcher": str(require_vllm()),
        "port": free_port(),
        "dtype": SAFE_DTYPE,
        "max_model_len": 256,
        "gpu_memory_utilization": 0.05,
        "extra_args": ["--enforce-eager"],
        "env": {"PYTHONPATH": str(FAULT_DIR), "RIGGER_TEST_SIGILL_WHEN": str(trigger), **env},
        "ready_timeout_s": 600,
        "state_dir": str(state_dir),
    }


@pytest.fixture
def stopped_after(tmp_path: Path) -> Iterator[list[dict[str, Any]]]:
    started: list[dict[str, Any]] = []
    yield started
    for args in started:
        run_module(serve_vllm, {**args, "state": "stopped"})


def test_engine_that_dies_on_its_first_request_is_reported_as_healthy_then_died(
    tiny_model: Path, tmp_path: Path, stopped_after: list[dict[str, Any]]
) -> None:
    # Armed from the start: vLLM's start-up runs the model without attention metadata (the
    # profiling pass skips the kernel), so the first call that faults is the first request,
    # readiness's one-token completion - after /health and /v1/models have answered.
    trigger = tmp_path / "sigill-now"
    trigger.touch()
    args = crash_args(tiny_model, tmp_path / "state", trigger)
    stopped_after.append(args)
    with pytest.raises(TaskFailed) as failure:
        run_module(serve_vllm, args)
    message = failure.value.msg
    first_line = message.splitlines()[0]
    assert "was healthy at" in first_line and "then died: Fatal Python error: Illegal instruction" in first_line
    assert "did not start" not in message and "the server process exited" not in message
    assert "hint: an illegal instruction" in message and "dtype: float32" in message
    assert failure.value.data["fatal_line"] == "Fatal Python error: Illegal instruction"
    # The fatal line was quoted although the log goes on for many lines after it.
    log = Path(failure.value.data["log_path"]).read_text().splitlines()
    after = len(log) - next(i for i, line in enumerate(log) if line.startswith("Fatal Python error"))
    assert after > 20, after
    # What was left of it was stopped.
    assert live_session_members(int(failure.value.data["pid"])) == []
    assert not listening(int(args["port"]))


def test_engine_that_dies_while_measured_fails_check_serving_quoting_the_log(
    tiny_model: Path, tmp_path: Path, stopped_after: list[dict[str, Any]]
) -> None:
    trigger = tmp_path / "sigill-now"
    # No faulthandler this time: the line that tells is then vLLM's own "Worker proc died".
    args = crash_args(tiny_model, tmp_path / "state", trigger, PYTHONFAULTHANDLER="")
    stopped_after.append(args)
    started = run_module(serve_vllm, args)
    assert started.changed
    bench = {"port": args["port"], "model": "tiny", "requests": 4, "concurrency": 2, "max_tokens": 8,
             "log_path": started.data["log_path"]}  # fmt: skip
    assert run_module(check_serving, bench).data["errors"] == 0
    trigger.touch()
    with pytest.raises(TaskFailed) as failure:
        run_module(check_serving, bench)
    message = failure.value.msg
    assert message.startswith(f"vLLM at http://127.0.0.1:{args['port']} died while being measured: ")
    assert "Worker proc VllmWorker-0 died unexpectedly" in message.splitlines()[0]
    assert failure.value.data["fatal_line"] in message
    assert "Fatal Python error" not in Path(started.data["log_path"]).read_text()
