"""Shared benchmark plumbing: tool venvs, interleaved timing, medians and ratios."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
VENVS = BENCH_DIR / ".venvs"
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


def timed(argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, env={**os.environ, **(env or {})}, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return elapsed


@dataclass(frozen=True)
class Case:
    tool: str
    label: str
    run: Callable[[], float]


def interleaved(cases: Sequence[Case], repeats: int) -> dict[tuple[str, str], list[float]]:
    """Run every case once per round, round after round, so drift hits all alike."""
    times: dict[tuple[str, str], list[float]] = {(c.tool, c.label): [] for c in cases}
    for case in cases:  # warm-up: imports, page cache, sshd
        case.run()
    for _ in range(repeats):
        for case in cases:
            times[(case.tool, case.label)].append(case.run())
    return times


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
