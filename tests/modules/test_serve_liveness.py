"""The vllm_liveness probe and check_serving's wedge check against real processes and a
real HTTP server.

Real: the probe (run by LocalConnection as on a host), /proc, processes stopped with
SIGSTOP and resumed, a real HTTP server on loopback (Python's http.server) that answers
/health 200 while its completions hang, check_serving's apply. Not real: vLLM (the real
vLLM cases are tests/integration/vllm/test_serve_wedge.py): the "server" processes are
`sleep` children that stand in for an API server and its EngineCore.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import modules.serving.check_serving as check_serving
from engine.connection.base import ScopedConnection
from engine.connection.local import LocalConnection
from engine.module_api import Change, TaskContext, TaskFailed

RELEASE = threading.Event()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._reply(200, b"")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.server.hang:  # type: ignore[attr-defined]
            RELEASE.wait(60)  # a wedged engine: the API takes the request and never answers
        self._reply(200, b'{"choices": [{"text": "x"}], "usage": {"completion_tokens": 1}}')

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture
def api() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.hang = False  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    RELEASE.set()
    server.shutdown()
    server.server_close()
    RELEASE.clear()


@pytest.fixture
def tree() -> Iterator[tuple[int, int]]:
    """An "API server" (sh) with an "EngineCore" child (sleep, retitled as vLLM does)."""
    proc = subprocess.Popen(["bash", "-c", "(exec -a VLLM::EngineCore sleep 300) & wait"])
    child = None
    for _ in range(200):
        kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        if kids and Path(f"/proc/{kids[0]}/cmdline").read_bytes().startswith(b"VLLM::EngineCore"):
            child = int(kids[0])
            break
        threading.Event().wait(0.05)
    assert child is not None, "the stand-in EngineCore never started"
    yield proc.pid, child
    os.kill(child, signal.SIGCONT)
    os.kill(child, signal.SIGKILL)
    proc.kill()
    proc.wait()


def probe(pids: list[int], url: str, **extra: Any) -> dict[str, Any]:
    args = {"pids": pids, "base_url": url, "model": "tiny", "timeout_s": 2, "samples": 2, "sample_interval_s": 0.05}
    return LocalConnection().run_probe("vllm_liveness", {**args, **extra})


def url_of(api: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{api.server_address[1]}"


def test_a_live_server_is_not_wedged(api: ThreadingHTTPServer, tree: tuple[int, int]) -> None:
    answer = probe([tree[0]], url_of(api))
    assert answer["wedged"] is False and answer["health"] == 200
    assert {p["pid"] for p in answer["processes"]} == set(tree), "descendants are read too"
    assert answer["why"].startswith("a 1-token completion came back in")


def test_a_stopped_engine_core_is_named_with_its_state(api: ThreadingHTTPServer, tree: tuple[int, int]) -> None:
    os.kill(tree[1], signal.SIGSTOP)
    answer = probe([tree[0]], url_of(api))
    assert answer["wedged"] is True and answer["health"] == 200
    assert answer["why"] == f"VLLM::EngineCore (pid {tree[1]}) is stopped (SIGSTOP) (state T)"
    assert answer["completion"] is None, "no request sent to a stopped engine"
    os.kill(tree[1], signal.SIGCONT)
    assert probe([tree[0]], url_of(api))["wedged"] is False, "resumed: making progress again"


def test_health_200_and_a_completion_that_never_comes_is_wedged(
    api: ThreadingHTTPServer, tree: tuple[int, int]
) -> None:
    api.hang = True  # type: ignore[attr-defined]
    answer = probe([tree[0]], url_of(api), timeout_s=1)
    assert answer["wedged"] is True and answer["health"] == 200
    assert answer["why"].startswith("/health answers 200 but a 1-token completion did not come back within 1s")


def test_check_serving_fails_on_a_wedged_server_before_measuring(
    api: ThreadingHTTPServer, tree: tuple[int, int]
) -> None:
    os.kill(tree[1], signal.SIGSTOP)
    args = {name: spec.get("default") for name, spec in check_serving.SCHEMA["properties"].items()}
    args.update({"url": url_of(api), "model": "tiny", "pid": tree[0], "wedge_timeout_s": 2})
    ctx = TaskContext("localhost", ScopedConnection(LocalConnection()), {}, {})
    with pytest.raises(TaskFailed) as failed:
        check_serving.apply(ctx, args, Change("measure"))
    assert failed.value.msg.startswith(f"vLLM at {url_of(api)} is wedged: VLLM::EngineCore (pid {tree[1]}) is stopped")
    assert failed.value.data["stuck"][0]["state"] == "T"
