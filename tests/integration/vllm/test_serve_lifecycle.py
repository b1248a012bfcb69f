"""serve_vllm against real vLLM CPU: start, idempotent re-run, restarts, crash recovery, stop.

Real: vLLM CPU (the API server, EngineCore and worker processes it forks), the tiny model
on disk, its log, /proc, TCP ports, HTTP requests. Nothing is faked. The tests run in file
order and share one server (each start costs 30-90 s on two cores); each test says what it
proves and fails on its own if that behaviour breaks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from vllmkit import (
    SAFE_DTYPE,
    alive,
    context,
    free_port,
    http_json,
    listening,
    live_session_members,
    plan_only,
    proc_stat,
    require_vllm,
    run_module,
    wait_until,
    with_defaults,
)

import modules.checkpoints.patch_quant_config as patch_quant_config
import modules.serving.check_serving as check_serving
import modules.serving.serve_vllm as serve_vllm
from engine.connection.local import LocalConnection
from engine.errors import TaskFailed
from engine.module_api import Change, Unchanged

pytestmark = pytest.mark.slow
API_KEY_ENV = "RIGGER_TEST_VLLM_KEY"
API_KEY = "sk-rigger-test-0123456789abcdef"


@dataclass
class Server:
    """The shared server and the args it was last declared with."""

    args: dict[str, Any]
    state_dir: Path
    history: list[int] = field(default_factory=list)

    @property
    def state_file(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state_dir / "tiny.json").read_text())
        return data

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.args['port']}"


@pytest.fixture(scope="module")
def server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    os.environ[API_KEY_ENV] = API_KEY
    state_dir = tmp_path_factory.mktemp("vllm-state")
    args = {
        "name": "tiny",
        "model": str(tiny_model),
        "served_model_name": "tiny",
        "launcher": str(require_vllm()),
        "port": free_port(),
        "dtype": SAFE_DTYPE,
        "max_model_len": 256,
        "gpu_memory_utilization": 0.05,
        "api_key_env": API_KEY_ENV,
        # Eager mode: no torch.compile, so restarts with a new config do not recompile.
        "extra_args": ["--enforce-eager"],
        "ready_timeout_s": 400,
        "state_dir": str(state_dir),
    }
    srv = Server(args, state_dir)
    try:
        yield srv
    finally:
        run_module(serve_vllm, {**srv.args, "state": "stopped"})
        os.environ.pop(API_KEY_ENV, None)


def test_start_launches_detached_and_ready(server: Server) -> None:
    run = run_module(serve_vllm, server.args)
    assert run.changed, run.planned
    pid = int(run.data["pid"])
    server.history.append(pid)
    record = server.state_file
    # Own session, stdin from /dev/null, output into the log, recorded with its start time.
    stat = proc_stat(pid)
    assert stat is not None and stat["sid"] == pid == record["sid"] == record["pid"]
    assert stat["start_time"] == record["start_time"]
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == record["log_path"]
    assert "Application startup complete" in Path(record["log_path"]).read_text()
    # The readiness stages really passed: it serves completions now (with the key only).
    status, body = http_json(
        server.url + "/v1/completions", {"model": "tiny", "prompt": "Hi", "max_tokens": 4}, API_KEY
    )
    assert status == 200 and body["usage"]["completion_tokens"] == 4
    assert http_json(server.url + "/v1/models")[0] == 401
    # The phases were read from the log, in order, and progress lines named them.
    phases = [p["phase"] for p in run.data["phases"]]
    assert phases.index("loading weights") < phases.index("KV cache") < phases.index("API up")
    assert any("vLLM loading weights" in line for line in run.progress), run.progress


def test_api_key_never_in_argv_state_file_or_output(server: Server) -> None:
    pid = server.history[-1]
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert API_KEY not in cmdline
    assert API_KEY not in (server.state_dir / "tiny.json").read_text()
    planned = plan_only(serve_vllm, {**server.args, "env": {"RIGGER_TEST": "1"}})
    assert isinstance(planned, Change)
    shown = repr(planned) + "".join(d.before + d.after for d in planned.diffs)
    assert API_KEY not in shown
    assert "VLLM_API_KEY=<secret>" in shown
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert f"VLLM_API_KEY={API_KEY}".encode() in environ


def test_rerun_is_ok_without_restart(server: Server) -> None:
    run = run_module(serve_vllm, server.args)
    assert isinstance(run.planned, Unchanged), run.planned
    assert not run.changed
    assert run.data["pid"] == server.history[-1]
    assert "running and healthy" in run.planned.msg
    assert alive(server.history[-1])


def test_a_move_to_a_port_a_foreign_process_holds_fails_with_the_old_server_running(server: Server) -> None:
    """Issue 10: the port was free when planned; a foreign process took it before apply.
    apply checks the port again BEFORE stopping anything: the old server keeps serving."""
    old_pid = server.history[-1]
    port = free_port()
    moved = with_defaults(serve_vllm.SCHEMA, {**server.args, "port": port})
    planned = plan_only(serve_vllm, moved)
    assert isinstance(planned, Change), planned
    foreign = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: listening(port), 10), "the foreign listener did not start"
        with pytest.raises(TaskFailed, match=f"port {port} is already in use.*pid {foreign.pid}"):
            serve_vllm.apply(context(LocalConnection(), [], planning=False, become=False), moved, planned)
        assert alive(old_pid), "the old server was stopped before the failing check"
        assert http_json(server.url + "/health")[0] == 200
        assert server.state_file["pid"] == old_pid
        assert alive(foreign.pid)
    finally:
        foreign.kill()
        foreign.wait()


def test_changed_arg_restarts_with_argv_diff(server: Server) -> None:
    old_pid = server.history[-1]
    server.args = {**server.args, "max_model_len": 200}
    run = run_module(serve_vllm, server.args)
    assert isinstance(run.planned, Change) and run.changed
    argv_diff = next(d for d in run.planned.diffs if d.label == "vLLM argv")
    assert "--max-model-len 256" in argv_diff.before
    assert "--max-model-len 200" in argv_diff.after
    new_pid = int(run.data["pid"])
    server.history.append(new_pid)
    assert new_pid != old_pid and alive(new_pid) and not alive(old_pid)
    assert live_session_members(old_pid) == []
    status, body = http_json(server.url + "/v1/models", api_key=API_KEY)
    assert status == 200 and body["data"][0]["max_model_len"] == 200


def test_patched_config_restarts(server: Server, tiny_model: Path) -> None:
    old_pid = server.history[-1]
    patched = run_module(
        patch_quant_config,
        {"path": str(tiny_model), "set": {"config.json": {"rms_norm_eps": 1e-5}}},
    )
    assert patched.changed
    planned = plan_only(serve_vllm, server.args)
    assert isinstance(planned, Change), planned
    labels = [d.label for d in planned.diffs]
    assert labels == ["model config files (sha256)"], labels
    run = run_module(serve_vllm, server.args)
    assert run.changed
    new_pid = int(run.data["pid"])
    server.history.append(new_pid)
    assert new_pid != old_pid and not alive(old_pid)
    assert isinstance(plan_only(serve_vllm, server.args), Unchanged)


def test_sigkill_of_api_server_then_started_recovers(server: Server) -> None:
    leader = server.history[-1]
    others = [pid for pid in live_session_members(leader) if pid != leader]
    assert others, "vLLM should have an EngineCore and workers in the session"
    os.kill(leader, signal.SIGKILL)
    assert wait_until(lambda: not alive(leader), 10)
    # The incident: the API server is gone, its EngineCore and workers live on, orphaned.
    assert [pid for pid in others if alive(pid)], "orphans expected after SIGKILL"
    planned = plan_only(serve_vllm, server.args)
    assert isinstance(planned, Change)
    assert "orphaned" in planned.summary
    run = run_module(serve_vllm, server.args)
    assert run.changed
    assert not [pid for pid in others if alive(pid)], "orphans of the old session must be gone"
    new_pid = int(run.data["pid"])
    server.history.append(new_pid)
    assert alive(new_pid)
    status, _ = http_json(server.url + "/v1/completions", {"model": "tiny", "prompt": "Hi", "max_tokens": 1}, API_KEY)
    assert status == 200


def test_check_serving_measures_on_the_host_and_fails_when_it_should(server: Server) -> None:
    bench = {"port": server.args["port"], "model": "tiny", "api_key_env": API_KEY_ENV,
             "requests": 6, "concurrency": 3, "max_tokens": 8}  # fmt: skip
    run = run_module(check_serving, bench)
    assert run.result is not None and not run.changed
    data = run.data
    assert data["errors"] == 0 and data["requests"] == 6
    assert data["output_tokens"] == 48, "ignore_eos: every request yields max_tokens"
    assert data["tokens_per_s"] > 0 and 0 < data["ttft_p50_s"] <= data["ttft_p95_s"]
    with pytest.raises(TaskFailed, match="below min_tokens_per_s"):
        run_module(check_serving, {**bench, "min_tokens_per_s": 1e9})
    with pytest.raises(TaskFailed, match=r"6 errors.*HTTP 401"):
        run_module(check_serving, {**bench, "api_key_env": None})
    with pytest.raises(TaskFailed, match="HTTP 404"):
        run_module(check_serving, {**bench, "model": "no-such-model"})


def test_stop_leaves_no_process_and_no_port(server: Server) -> None:
    leader = server.history[-1]
    members = live_session_members(leader)
    assert len(members) >= 3
    run = run_module(serve_vllm, {**server.args, "state": "stopped"})
    assert run.changed
    assert live_session_members(leader) == []
    assert not listening(int(server.args["port"]))
    again = plan_only(serve_vllm, {**server.args, "state": "stopped"})
    assert isinstance(again, Unchanged), again
