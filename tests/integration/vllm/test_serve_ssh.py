"""serve_vllm over real SSH: start, re-run, survives the connection, crash recovery, stop, failures.

Real: Debian's OpenSSH sshd (started here with the SSH tests' harness, sshlab.py), paramiko,
sudo (become: the vLLM venv lives under /root), vLLM CPU, the probes running ON the "host"
(this machine reached through sshd, so /health is asked from the far side, not from the
controller). Nothing is faked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sshlab
from sshlab import Lab
from vllmkit import (
    SAFE_DTYPE,
    alive,
    free_port,
    http_json,
    listening,
    live_session_members,
    plan_only,
    require_vllm,
    run_module,
    wait_until,
)

import modules.serving.serve_vllm as serve_vllm
from engine.connection.ssh.connection import SSHConnection
from engine.errors import TaskFailed
from engine.module_api import Change, Unchanged

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with sshlab.running_lab(tmp_path_factory.mktemp("vllm-sshlab"), "vllm", ("127.0.0.2",)) as lab:
        yield lab


@pytest.fixture
def conn(lab: Lab) -> Iterator[SSHConnection]:
    connection = lab.connect("gpu1")
    try:
        yield connection
    finally:
        connection.close()


def ssh_args(model: Path, state_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": "tiny-ssh",
        "model": str(model),
        "served_model_name": "tiny",
        "launcher": str(require_vllm()),
        "dtype": SAFE_DTYPE,
        "max_model_len": 256,
        "gpu_memory_utilization": 0.05,
        "extra_args": ["--enforce-eager"],
        "ready_timeout_s": 400,
        "state_dir": str(state_dir),
        **extra,
    }


def test_serve_over_ssh_start_rerun_detached_crash_recovery_stop(lab: Lab, tiny_model: Path, tmp_path: Path) -> None:
    args = ssh_args(tiny_model, tmp_path / "state", port=free_port())
    first = lab.connect("gpu1")
    try:
        run = run_module(serve_vllm, args, first, become=True)
        assert run.changed, run.planned
        pid = int(run.data["pid"])
        record = json.loads((tmp_path / "state" / "tiny-ssh.json").read_text())
        assert record["pid"] == pid and record["sid"] == pid
        again = run_module(serve_vllm, args, first, become=True)
        assert isinstance(again.planned, Unchanged) and again.data["pid"] == pid
    finally:
        first.close()
    # The SSH connection is gone; the server is not (own session, not a child of sshd).
    assert wait_until(lambda: not sshlab_session_alive(lab), 10)
    assert alive(pid)
    status, body = http_json(
        f"http://127.0.0.1:{args['port']}/v1/completions",
        {"model": "tiny", "prompt": "Hi", "max_tokens": 2},
    )
    assert status == 200 and body["usage"]["completion_tokens"] == 2
    # The incident over SSH: the API server is SIGKILLed, EngineCore and workers live on.
    orphans = [p for p in live_session_members(pid) if p != pid]
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not alive(pid), 10)
    assert [p for p in orphans if alive(p)]
    second = lab.connect("gpu1")
    try:
        recovered = run_module(serve_vllm, args, second, become=True)
        assert recovered.changed and "orphaned" in recovered.planned.summary
        new_pid = int(recovered.data["pid"])
        assert not [p for p in orphans if alive(p)], "orphans stopped over SSH"
        assert isinstance(plan_only(serve_vllm, args, second, become=True), Unchanged)
        stopped = run_module(serve_vllm, {**args, "state": "stopped"}, second, become=True)
        assert stopped.changed
    finally:
        second.close()
    assert live_session_members(new_pid) == []
    assert not listening(int(args["port"]))


def sshlab_session_alive(lab: Lab) -> bool:
    """True while sshd still has a session process for a client (the closed connection)."""
    return bool(lab.sshd.session_pids())


def test_taken_port_over_ssh_names_the_process(conn: SSHConnection, tiny_model: Path, tmp_path: Path) -> None:
    port = free_port()
    holder = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_until(lambda: listening(port), 10)
        with pytest.raises(TaskFailed) as failure:
            plan_only(serve_vllm, ssh_args(tiny_model, tmp_path / "s", port=port), conn, True)
        assert f"pid {holder.pid}" in failure.value.msg and "http.server" in failure.value.msg
        assert alive(holder.pid)
    finally:
        holder.kill()
        holder.wait()


def test_bad_model_over_ssh_fails_with_the_log_line(conn: SSHConnection, tmp_path: Path) -> None:
    model = Path(subprocess.check_output(["mktemp", "-d", "/tmp/rigger-badmodel-XXXXXX"], text=True).strip())
    try:
        model.chmod(0o755)
        (model / "config.json").write_text(json.dumps({"model_type": "no_such_architecture"}))
        args = ssh_args(model, tmp_path / "state", port=free_port())
        planned = plan_only(serve_vllm, args, conn, True)
        assert isinstance(planned, Change)
        with pytest.raises(TaskFailed) as failure:
            run_module(serve_vllm, args, conn, become=True)
        assert "no_such_architecture" in failure.value.msg
        assert live_session_members(int(failure.value.data["pid"])) == []
    finally:
        subprocess.run(["rm", "-rf", str(model)], check=False)
