"""The serving probes on this machine, with real processes, sockets and files (no vLLM).

Real: /proc, TCP sockets, a real HTTP server (http.server in a thread), processes started
by the launch probe (`sleep`, `sh`), signals through the shared signal_procs probe. The
probes run in-process, as the local connection runs them.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import modules.serving.serve_vllm as serve_vllm
from engine.probes import run_in_process


def proc_stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock
    finally:
        sock.close()


def test_port_owner_names_the_process_holding_the_socket(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    answer = run_in_process("port_owner", {"port": port})
    assert answer["listening"] and not answer["unresolved"]
    assert [p["pid"] for p in answer["owners"]] == [os.getpid()]
    listener.close()
    assert run_in_process("port_owner", {"port": port})["listening"] is False


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = 200 if self.path == "/health" else 401
        self.send_response(code)
        self.end_headers()
        self.wfile.write(json.dumps({"auth": self.headers.get("Authorization")}).encode())

    def log_message(self, *args: Any) -> None:
        return None


def test_http_probe_reports_status_body_and_refusal() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        ok = run_in_process("vllm_http", {"url": base + "/health"})
        assert ok["status"] == 200
        denied = run_in_process("vllm_http", {"url": base + "/v1/models", "api_key": "k"})
        assert denied["status"] == 401 and json.loads(denied["body"])["auth"] == "Bearer k"
    finally:
        server.shutdown()
        server.server_close()
    refused = run_in_process("vllm_http", {"url": base + "/health", "timeout_s": 2})
    assert refused["status"] is None and "refused" in refused["error"].lower()


# What the launch probe starts in these tests: a python process (as vLLM's are) that says
# whether the key reached its environment, then waits.
SERVER_STAND_IN = (
    "import os, time; "
    "print('key is set:', 'yes' if os.environ.get('VLLM_API_KEY') else 'no', flush=True); "
    "time.sleep(60)"
)


@pytest.fixture
def launched(tmp_path: Path) -> Iterator[dict[str, Any]]:
    record = run_in_process(
        "vllm_launch",
        {
            "argv": [sys.executable, "-c", SERVER_STAND_IN],
            "env": {"VLLM_API_KEY": "sk-secret-123", "SHOWN": "1"},
            "log_path": str(tmp_path / "logs" / "x.log"),
            "state_path": str(tmp_path / "state" / "x.json"),
            "record": {"spec_hash": "abc", "env": {"SHOWN": "1"}},
        },
    )
    try:
        yield {**record, "tmp": tmp_path}
    finally:
        targets = [{"pid": record["pid"], "start_time": record["start_time"]}]
        run_in_process("signal_procs", {"targets": targets, "term_timeout_s": 5})


def test_launch_detaches_into_its_own_session_with_a_state_file(launched: dict[str, Any]) -> None:
    pid = launched["pid"]
    fields = proc_stat(pid)
    assert fields is not None
    assert int(fields[3]) == pid == launched["sid"], "session leader of a new session"
    assert int(fields[1]) != os.getpid(), "not a child of rigger (the launcher exited)"
    assert int(fields[19]) == launched["start_time"]
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    log = Path(launched["log_path"])
    assert os.readlink(f"/proc/{pid}/fd/1") == os.readlink(f"/proc/{pid}/fd/2") == str(log)
    deadline = time.monotonic() + 5
    while "key is set: yes" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "key is set: yes" in log.read_text(), "the key reached the server's environment"
    state_file = Path(launched["state_path"])
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    stored = state_file.read_text()
    assert "sk-secret-123" not in stored
    assert json.loads(stored)["spec_hash"] == "abc"


def test_state_probe_sees_the_session_and_its_end(launched: dict[str, Any]) -> None:
    answer = run_in_process("vllm_state", {"state_path": launched["state_path"]})
    assert answer["leader_alive"]
    assert [p["pid"] for p in answer["session"]] == [launched["pid"]]
    os.kill(launched["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while run_in_process("vllm_state", {"state_path": launched["state_path"]})["leader_alive"]:
        assert time.monotonic() < deadline, "a killed leader must read as gone (zombie or not)"
        time.sleep(0.05)


def test_launch_of_a_missing_program_is_an_error_not_a_record(tmp_path: Path) -> None:
    answer = run_in_process(
        "vllm_launch",
        {
            "argv": ["/nonexistent/vllm", "serve", "/m"],
            "env": {},
            "log_path": str(tmp_path / "x.log"),
            "state_path": str(tmp_path / "x.json"),
        },
    )
    assert "could not execute '/nonexistent/vllm': no such program." in answer["error"]
    assert "FileNotFoundError" not in answer["error"] and "Errno" not in answer["error"], answer["error"]
    assert not (tmp_path / "x.json").exists()


def test_launch_of_a_program_not_on_the_path_says_so(tmp_path: Path) -> None:
    """It said "FileNotFoundError: [Errno 2] No such file or directory: b'/bin/vllm'"."""
    answer = run_in_process(
        "vllm_launch",
        {
            "argv": ["rigger-no-such-vllm", "serve", "/m"],
            "env": {"PATH": "/usr/bin:/bin"},
            "log_path": str(tmp_path / "x.log"),
            "state_path": str(tmp_path / "x.json"),
        },
    )
    assert answer["error"].startswith("could not execute 'rigger-no-such-vllm': no such program on the host's PATH")
    assert "b'/" not in answer["error"] and "ensure_vllm" in answer["error"]


def test_log_rotation_keeps_the_previous_log(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("previous run\n")
    answer = run_in_process(
        "vllm_launch",
        {"argv": ["true"], "env": {}, "log_path": str(log), "state_path": str(tmp_path / "s.json")},
    )
    assert (tmp_path / "x.log.prev").read_text() == "previous run\n"
    assert answer["pid"] > 0


def test_binding_all_interfaces_warns() -> None:
    assert serve_vllm._warnings({"host": "0.0.0.0"})
    assert serve_vllm._warnings({"host": "127.0.0.1"}) == ()


def test_state_probe_refuses_a_session_id_now_used_by_someone_else(launched: dict[str, Any], tmp_path: Path) -> None:
    stale = {**json.loads(Path(launched["state_path"]).read_text())}
    stale["start_time"] = launched["start_time"] - 1  # the recorded leader started earlier
    state = tmp_path / "stale.json"
    state.write_text(json.dumps(stale))
    answer = run_in_process("vllm_state", {"state_path": str(state)})
    assert answer["session"] == [] and not answer["leader_alive"]


def test_state_probe_counts_only_vllm_like_processes(tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        fields = proc_stat(other.pid)
        assert fields is not None
        record = {"pid": other.pid, "sid": other.pid, "start_time": int(fields[19])}
        state = tmp_path / "s.json"
        state.write_text(json.dumps(record))
        answer = run_in_process("vllm_state", {"state_path": str(state)})
        assert answer["session"] == [], "a `sleep` is nothing vLLM would run"
    finally:
        other.kill()
        other.wait()
