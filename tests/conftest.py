"""Shared test helpers. The CLI is exercised for real: its click command, in the test
process (tests/fakes/cli_in_process.py says what a process of its own gave and how that is
kept), or as a process of its own where the entry point itself is under test."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli, run_cli_process
from isolated_home import own_run_lock

from tests.time_budget import over_budget

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Each test run locks hosts under its own state directory (tests/fakes/isolated_home.py),
    so its rigger runs never meet (or wait for) a user's or another test run's."""
    os.environ.update(own_run_lock())


def pytest_unconfigure(config: pytest.Config) -> None:
    for name, state_dir in own_run_lock().items():
        os.environ.pop(name, None)
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_mask() -> Iterator[None]:
    """The one mask (engine/mask.py) is process-wide, as in a CLI process: a secret one test
    recorded must not mask another test's output (the CLI clears it per command too)."""
    from engine.mask import MASK

    yield
    MASK.clear()


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
    """Run the real CLI (in this process where that is the same); with --output jsonl the
    events are parsed."""
    outcome = run_cli(args, cwd=cwd, env={**_cli_env(), **(env or {})}, timeout_s=timeout_s)
    return _parsed(args, outcome.rc, outcome.stdout, outcome.stderr)


def run_rigger_process(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 300,
    own_network: bool = False,
) -> RiggerRun:
    """Run the real CLI as a user does, ``python -m engine.cli``, in a process of its own
    (with ``own_network``: in a network namespace where nothing listens, tests/fakes/own_network.py)."""
    outcome = run_cli_process(
        args, cwd=cwd, env={**_cli_env(), **(env or {})}, timeout_s=timeout_s, own_network=own_network
    )
    return _parsed(args, outcome.rc, outcome.stdout, outcome.stderr)


def _cli_env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO), **own_run_lock()}


def _parsed(args: tuple[str, ...], rc: int, stdout: str, stderr: str) -> RiggerRun:
    events = []
    if "jsonl" in args:
        events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return RiggerRun(rc, stdout, stderr, events)


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


# The slow tier runs as two pytest processes side by side (scripts/test.sh), parts that
# share no resource: `-m "slow and vllm_part"`, the files that start real vLLM servers, one
# after another (on a 2-core machine two servers at once would make each other's start-up
# and load-test figures meaningless: the rollouts' performance gate compares a release with
# the baseline), and `-m "slow and not vllm_part"`: sshd labs, the hub mirror, apt and pip,
# ansible-core, each file on its own ports and users. (Not xdist's loadgroup: with pytest
# 9 its xdist_group marks no longer group anything.)
VLLM_PART = ("integration/vllm/", "integration/test_incident.py", "integration/ssh/test_ssh_ray_cluster.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        where = item.path.relative_to(REPO / "tests").as_posix()
        if where.startswith(SLOW_PLACES):
            item.add_marker(pytest.mark.slow)
        if where.startswith(VLLM_PART):
            item.add_marker(pytest.mark.vllm_part)
    # Once a test has loaded the fake NVML into this process, CLI runs need a process of
    # their own (cli_in_process.py): those tests go last, after the in-process runs.
    items.sort(key=lambda item: item.get_closest_marker("nvml_in_process") is not None)


# The time budget (tests/time_budget.py): each test's set-up, call and tear-down, summed on
# the process that reports (the xdist controller when there are workers).
_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """RIGGER_TIME_BUDGET=enforce (scripts/test.sh's whole run, as CI runs it): a test over
    its budget fails the session; otherwise the summary only names it."""
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller sees every report
    lines = over_budget(_durations)
    session.config.stash[_OVER_BUDGET] = lines
    if lines and os.environ.get("RIGGER_TIME_BUDGET") == "enforce" and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_OVER_BUDGET = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(_OVER_BUDGET, [])
    if lines:
        enforced = os.environ.get("RIGGER_TIME_BUDGET") == "enforce"
        terminalreporter.section("time budget: " + ("FAILED" if enforced else "over (not enforced here)"))
        for line in lines:
            terminalreporter.write_line(line)
