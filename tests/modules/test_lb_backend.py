"""lb_backend against a real HAProxy (Debian's, started by the test on loopback) with live
traffic: drain takes a server out while its requests in flight finish, ready puts it back,
the last serving server is never taken out, check mode changes nothing.

Real: HAProxy, its runtime API and health checks, the rigger CLI (in the test process),
the upstream servers (stdlib HTTP servers on loopback answering slowly, so requests are in
flight when a drain starts). Not vLLM: routing does not depend on what the upstream serves.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from haproxy_lab import HAProxyLab, LoadGenerator, get, haproxy, server_status, wait_for

ANSWER_DELAY_S = 0.3


class _Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/health":
            time.sleep(ANSWER_DELAY_S)
        body = self.server.label.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[HAProxyLab]:
    upstreams = []
    for label in ("a", "b"):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
        server.label = label  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        upstreams.append(server)
    try:
        with haproxy(tmp_path, {s.label: s.server_address[1] for s in upstreams}) as running:  # type: ignore[attr-defined]
            wait_for(lambda: set(server_status(running).values()) == {"UP"})
            yield running
    finally:
        for server in upstreams:
            server.shutdown()
            server.server_close()


def _playbook(tmp_path: Path, lab: HAProxyLab, servers: dict[str, str]) -> Path:
    entries = "\n".join(f"          {name}: {state}" for name, state in servers.items())
    book = tmp_path / "route.yml"
    book.write_text(
        f"""- hosts: localhost
  gather_facts: false
  tasks:
    - name: route
      lb_backend:
        socket: {lab.socket}
        backend: {lab.backend}
        servers:
{entries}
"""
    )
    return book


def _answered(load: LoadGenerator, label: str) -> int:
    with load._lock:
        return load.report.answered_by.get(label, 0)


def test_drain_under_traffic_fails_no_request_and_ready_readmits(lab: HAProxyLab, tmp_path: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    with LoadGenerator(lambda: get(lab.url + "/"), workers=4, max_requests=2000) as load:
        wait_for(lambda: _answered(load, "a") > 3 and _answered(load, "b") > 3)
        drained = rigger("run", str(_playbook(tmp_path, lab, {"a": "drain"})), "--output", "jsonl")
        assert drained.rc == 0, drained.stdout + drained.stderr
        (result,) = drained.results("route")
        assert result["status"] == "changed"
        assert result["data"]["drained"]["a"]["current_sessions"] == 0
        assert server_status(lab)["a"] == "DRAIN"
        after_drain = _answered(load, "a")
        wait_for(lambda: _answered(load, "b") > after_drain + 20)
        assert _answered(load, "a") == after_drain  # no new request reached the drained server
        readmitted = rigger("run", str(_playbook(tmp_path, lab, {"a": "ready"})), "--output", "jsonl")
        assert readmitted.rc == 0, readmitted.stdout
        wait_for(lambda: _answered(load, "a") > after_drain + 5)
    assert load.report.failed == 0, load.report.errors[:5]


def test_the_last_serving_server_is_never_taken_out(lab: HAProxyLab, tmp_path: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    run = rigger("run", str(_playbook(tmp_path, lab, {"a": "maint", "b": "drain"})), "--output", "jsonl")
    assert run.rc == 2
    (result,) = run.results("route")
    assert "refusing to take a, b out" in result["msg"] and "no other server would be serving" in result["msg"]
    assert server_status(lab) == {"a": "UP", "b": "UP"}


def test_check_mode_shows_the_change_and_touches_nothing(lab: HAProxyLab, tmp_path: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    run = rigger("run", str(_playbook(tmp_path, lab, {"b": "maint"})), "--check", "--output", "jsonl")
    assert run.rc == 0, run.stdout
    (result,) = run.results("route")
    assert "b ready -> maint" in result["msg"]
    assert server_status(lab) == {"a": "UP", "b": "UP"}


def test_an_unknown_server_names_the_ones_there_are(lab: HAProxyLab, tmp_path: Path, rigger) -> None:  # type: ignore[no-untyped-def]
    run = rigger("run", str(_playbook(tmp_path, lab, {"c": "drain"})), "--output", "jsonl")
    assert run.rc == 2
    (result,) = run.results("route")
    assert "no server 'c'" in result["msg"] and "it has a, b" in result["msg"]
