"""Shared test helpers. The CLI is exercised for real, in a subprocess, as a user runs it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from isolated_home import own_run_lock

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Each test run locks hosts under its own state directory (tests/fakes/isolated_home.py),
    so its rigger runs never meet (or wait for) a user's or another test run's."""
    os.environ.update(own_run_lock())


def pytest_unconfigure(config: pytest.Config) -> None:
    for name, state_dir in own_run_lock().items():
        os.environ.pop(name, None)
        shutil.rmtree(state_dir, ignore_errors=True)


@dataclass
class RiggerRun:
    rc: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def recap(self) -> dict[str, Any]:
        recaps = [e for e in self.events if e["event"] == "recap"]
        assert recaps, f"no recap in output:\n{self.stdout}\n{self.stderr}"
        hosts: dict[str, Any] = recaps[-1]["hosts"]
        return hosts

    def results(self, task: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "task_result" and (task is None or e["task"] == task)]

    def totals(self, key: str) -> int:
        return sum(counts[key] for counts in self.recap.values())


def run_rigger(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout_s: float = 300
) -> RiggerRun:
    """Run the real CLI; with --output jsonl the events are parsed."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **own_run_lock(), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    events = []
    if "jsonl" in args:
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return RiggerRun(proc.returncode, proc.stdout, proc.stderr, events)


@pytest.fixture
def rigger():
    return run_rigger


def tree_digest(root: Path) -> dict[str, str]:
    """Path -> sha256 (or link target) of everything under root: proves 'nothing changed'."""
    digest = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            digest[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            digest[rel] = hashlib.sha256(path.read_bytes()).hexdigest() + f":{oct(path.stat().st_mode)}"
        else:
            digest[rel] = "dir"
    return digest


@pytest.fixture
def digest():
    return tree_digest


# Tests that start real services (sshd, vLLM CPU, the hub mirror) are the slow tier, by
# where they live: `pytest -m "not slow"` needs none of those services.
SLOW_PLACES = ("integration/ssh/", "integration/vllm/", "integration/hub/", "integration/test_incident.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(REPO / "tests").as_posix()
        if where.startswith(SLOW_PLACES):
            item.add_marker(pytest.mark.slow)
