"""A real HAProxy (Debian's package, /usr/sbin/haproxy) started by a test on loopback, and a
bounded load generator that counts what the load balancer answered.

Nothing here is faked: HAProxy runs in the foreground (`-db`) with an admin stats socket
in the test's directory, health-checks its servers (`option httpchk GET /health`), and is
stopped by the test that started it (its own process handle, never a name). A missing
haproxy is a FAILURE with the command that installs it, never a skip.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ports import free_port

HAPROXY = Path("/usr/sbin/haproxy")
BACKEND = "vllm"
CONFIG = """global
    stats socket {socket} mode 600 level admin
    pidfile {pidfile}
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    retries 2
    option redispatch
frontend fe
    bind 127.0.0.1:{port}
    default_backend {backend}
backend {backend}
    balance roundrobin
    option httpchk GET /health
    # which server answered, for the tests' load generator to count
    http-response set-header X-Served-By %s
{servers}
"""


@dataclass
class HAProxyLab:
    socket: Path
    port: int
    process: subprocess.Popen[bytes]
    backend: str = BACKEND

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def require_haproxy() -> Path:
    if not HAPROXY.exists():
        pytest.fail(f"{HAPROXY} is missing: run `bash scripts/ci/setup_haproxy.sh`", pytrace=False)
    return HAPROXY


@contextmanager
def haproxy(work: Path, servers: Mapping[str, int], check_inter_ms: int = 300) -> Iterator[HAProxyLab]:
    """HAProxy in front of ``servers`` (name -> port on 127.0.0.1), until the block ends."""
    binary = require_haproxy()
    port = free_port()
    sock = work / "haproxy.sock"
    lines = "\n".join(
        f"    server {name} 127.0.0.1:{p} check inter {check_inter_ms}ms fall 2 rise 1" for name, p in servers.items()
    )
    config = work / "haproxy.cfg"
    config.write_text(
        CONFIG.format(socket=sock, pidfile=work / "haproxy.pid", port=port, backend=BACKEND, servers=lines)
    )
    check = subprocess.run([str(binary), "-c", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    process = subprocess.Popen(
        [str(binary), "-db", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else "haproxy exited"
            assert time.monotonic() < deadline, "haproxy's stats socket did not appear"
            time.sleep(0.05)
        yield HAProxyLab(sock, port, process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def admin(lab: HAProxyLab, command: str) -> str:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(str(lab.socket))
        conn.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def server_status(lab: HAProxyLab) -> dict[str, str]:
    rows = [line.split(",") for line in admin(lab, "show stat").splitlines() if line and not line.startswith("#")]
    return {r[1]: r[17] for r in rows if r[0] == lab.backend and r[1] not in ("FRONTEND", "BACKEND")}


def wait_for(predicate: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


@dataclass
class LoadReport:
    ok: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    answered_by: dict[str, int] = field(default_factory=dict)


class LoadGenerator:
    """``workers`` threads sending ``request()`` through the load balancer until stopped,
    at most ``max_requests`` in all (bounded: a wedged rollout cannot make it run forever).
    ``request`` returns who answered (a label) or raises: every raise is a failed request.
    ``pause_s`` between a worker's requests bounds the rate (the servers under test share
    the machine with the ones starting: a flat-out load starves a start)."""

    def __init__(self, request: Callable[[], str], workers: int = 2, max_requests: int = 100_000, pause_s: float = 0.0):
        self._request = request
        self._pause_s = pause_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._left = max_requests
        self.report = LoadReport()
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]

    def _take(self) -> bool:
        with self._lock:
            if self._left <= 0 or self._stop.is_set():
                return False
            self._left -= 1
            return True

    def _work(self) -> None:
        while self._take():
            try:
                label = self._request()
            except (OSError, urllib.error.URLError, ValueError) as exc:
                with self._lock:
                    self.report.failed += 1
                    self.report.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            with self._lock:
                self.report.ok += 1
                self.report.answered_by[label] = self.report.answered_by.get(label, 0) + 1
            if self._pause_s:
                self._stop.wait(self._pause_s)

    def __enter__(self) -> LoadGenerator:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=300)

    def total(self) -> int:
        with self._lock:
            return self.report.ok + self.report.failed


def get(url: str, timeout_s: float = 60) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}")
        return response.read().decode()


def post_json(url: str, body: Mapping[str, object], timeout_s: float = 120) -> str:
    """POST through the load balancer; the server HAProxy chose (X-Served-By) answers."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        json.loads(response.read())
        return str(response.headers.get("X-Served-By"))
