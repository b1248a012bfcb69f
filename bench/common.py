"""Shared benchmark plumbing: tool venvs, interleaved timing, medians and ratios, one task played
by the real CLI."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import psutil

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
VENVS = BENCH_DIR / ".venvs"
T = TypeVar("T")
TOOL_PACKAGES = {"ansible": ["ansible-core"], "pyinfra": ["pyinfra"]}


def tool_venv(tool: str) -> Path:
    """A venv with the tool installed (created once; reused)."""
    venv = VENVS / tool
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *TOOL_PACKAGES[tool]], check=True)
    return venv / "bin"


def rigger_command() -> list[str]:
    return [sys.executable, "-m", "engine.cli"]


def local_fleet(hosts: Sequence[str]) -> dict[str, Any]:
    """An inventory whose group ``fleet`` is loopback "hosts" on the local connection."""
    return {"fleet": {"hosts": {host: {"ansible_connection": "local"} for host in hosts}}}


@dataclass(frozen=True)
class PlayRun:
    """One play of the real CLI with ``--output jsonl``: exit code, wall time, its events."""

    rc: int
    wall_s: float
    events: list[dict[str, Any]]
    output: str  # stdout then stderr, for the report of a run that failed

    def last_event(self, data_key: str | None = None, kind: str | None = None) -> dict[str, Any]:
        """The last event with data (holding ``data_key``, of event ``kind``, when given); {} if none."""
        found: dict[str, Any] = {}
        for event in self.events:
            data = event.get("data")
            keyed = isinstance(data, dict) and data and (data_key is None or data_key in data)
            if keyed and (kind is None or event.get("event") == kind):
                found = event
        return found


def play_one_task(
    work: Path,
    name: str,
    inventory: dict[str, Any],
    task: dict[str, Any],
    env: dict[str, str] | None = None,
    extra: Sequence[str] = (),
) -> PlayRun:
    """``task`` on the group ``fleet`` of ``inventory`` (files written under ``work``), by the
    real CLI in a process of its own."""
    (work / "inventory.json").write_text(json.dumps(inventory))
    playbook = work / f"{name}.json"
    playbook.write_text(json.dumps([{"hosts": "fleet", "gather_facts": False, "tasks": [task]}]))
    argv = [*rigger_command(), "run", str(playbook), "-i", str(work / "inventory.json"), "--output", "jsonl", *extra]
    started = time.perf_counter()
    done = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, check=False,
        env=env if env is not None else {**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    wall = time.perf_counter() - started
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return PlayRun(done.returncode, wall, events, done.stdout + done.stderr)


def timed(argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    return measured(argv, env, cwd).wall_s


@dataclass(frozen=True)
class Measurement:
    wall_s: float
    cpu_s: float  # user + sys of the tool's whole process tree (bench/tree_usage.py)
    peak_pss_mb: float  # max over samples of the tree's summed proportional set size


def measured(argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Measurement:
    """Run one tool to completion: wall time, CPU of its process tree, peak memory of that tree."""
    with tempfile.NamedTemporaryFile(prefix="rigger-bench-usage-", suffix=".json") as report:
        wrapped = [sys.executable, str(BENCH_DIR / "tree_usage.py"), report.name, *argv]
        proc = subprocess.Popen(
            wrapped,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        sampler = _PeakSampler(proc.pid)
        sampler.start()
        stdout, stderr = proc.communicate()
        sampler.stop()
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{stdout[-2000:]}\n{stderr[-2000:]}")
        usage = json.loads(Path(report.name).read_text())
    return Measurement(usage["wall_s"], usage["cpu_s"], sampler.peak_bytes / 2**20)


class _PeakSampler:
    """Samples the summed PSS of the wrapper's descendants (the tool's tree)."""

    def __init__(self, wrapper_pid: int, interval_s: float = 0.05):
        self.wrapper_pid, self.interval_s = wrapper_pid, interval_s
        self.peak_bytes = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, self._tree_pss())

    def _tree_pss(self) -> int:
        total = 0
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(self.wrapper_pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_full_info().pss
        return total


@dataclass(frozen=True)
class Case(Generic[T]):
    tool: str
    label: str
    run: Callable[[], T]


def interleaved(
    cases: Sequence[Case[T]],
    repeats: int,
    each_round: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    warm_up: Sequence[Case[T]] | None = None,
) -> dict[tuple[str, str], list[T]]:
    """Run every case once per round, round after round, so drift hits all alike.

    ``each_round`` wraps every round (the warm-up too): the shared lock for timed runs.
    ``warm_up``: the cases run once, untimed, first (imports, page cache, sshd); all of them
    unless told."""
    times: dict[tuple[str, str], list[T]] = {(c.tool, c.label): [] for c in cases}
    with each_round():
        for case in cases if warm_up is None else warm_up:
            case.run()
    for done in range(repeats):
        with each_round():
            for case in cases:
                times[(case.tool, case.label)].append(case.run())
        print(f"round {done + 1}/{repeats} done", file=sys.stderr, flush=True)
    return times


@contextlib.contextmanager
def shared_lock(path: str | None) -> Iterator[None]:
    """flock ``path`` (the machine's lock for heavy or timed runs) while the block runs."""
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def report_per_task(
    times: dict[tuple[str, str], list[float]], tools: Sequence[str], n: int, title: str
) -> dict[str, float]:
    """Print medians and per-task overhead (t_n - t_1) / (n - 1), with ratios to rigger."""
    overhead = {}
    print(f"\n{title}")
    print(f"{'tool':10} {'1 task (s)':>11} {f'{n} tasks (s)':>12} {'per task (ms)':>14} {'vs rigger':>10}")
    for tool in tools:
        one, many = median(times[(tool, "1")]), median(times[(tool, str(n))])
        overhead[tool] = (many - one) / (n - 1) * 1000
    for tool in tools:
        one, many = median(times[(tool, "1")]), median(times[(tool, str(n))])
        ratio = overhead[tool] / overhead["rigger"] if overhead["rigger"] > 0 else float("inf")
        print(f"{tool:10} {one:11.3f} {many:12.3f} {overhead[tool]:14.2f} {ratio:9.1f}x")
    return overhead
