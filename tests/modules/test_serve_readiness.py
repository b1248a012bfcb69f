"""Reading vLLM's start-up log: phases and fatal lines, and the staged wait built on it.

Real: a start-up log recorded from vLLM CPU 0.32.0 serving the tiny model
(vllm_logs/cpu_startup_0.32.0.log), and fatal lines in the exact wording of
from vLLM's source and issues (vllm_logs/gpu_fatal_lines.txt). Not real: the host in
the wait tests is a RecordedHost (tests/fakes) that replays probe answers built from those logs;
what is tested is the decision rigger makes from them (fail at once, quote the line).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from recorded_host import RecordedHost

from engine.module_api import ScopedConnection
from modules.serving.readiness import LogFollower, fatal_line, last_error_line, phase_of
from modules.serving.waiting import WaitTarget, wait_ready

LOGS = Path(__file__).parent / "vllm_logs"
CPU_LOG = (LOGS / "cpu_startup_0.32.0.log").read_text().splitlines()
GPU_FATAL = [
    line for line in (LOGS / "gpu_fatal_lines.txt").read_text().splitlines() if line and not line.startswith("#")
]


def phases_in_order(lines: list[str]) -> list[str]:
    seen: list[str] = []
    for line in lines:
        phase = phase_of([line])
        if phase and (not seen or seen[-1] != phase):
            seen.append(phase)
    return seen


def test_recorded_cpu_log_walks_through_the_phases() -> None:
    phases = phases_in_order(CPU_LOG)
    assert phases[0] == "starting engine"
    for earlier, later in (("loading weights", "KV cache"), ("KV cache", "API up")):
        assert phases.index(earlier) < phases.index(later), phases
    assert phase_of(CPU_LOG) == "API up"


def test_gpu_phase_lines_are_recognised() -> None:
    assert phase_of(["(Worker_TP0 pid=9) INFO Loading weights took 812.33 seconds"]) == ("loading weights")
    assert phase_of(["(EngineCore_DP0 pid=8) INFO GPU KV cache size: 1,234,560 tokens"]) == ("KV cache")
    assert phase_of(["Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%"]) == ("graph capture")
    assert phase_of(["INFO:     Uvicorn running on http://0.0.0.0:8000"]) == "API up"


def test_healthy_start_has_no_fatal_line() -> None:
    assert fatal_line(CPU_LOG) is None


@pytest.mark.parametrize("line", GPU_FATAL)
def test_each_known_fatal_line_is_caught(line: str) -> None:
    assert fatal_line([*CPU_LOG[:20], line]) == line.strip()


def test_last_error_line_explains_an_exit() -> None:
    lines = [
        *CPU_LOG[:10],
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "(APIServer pid=1) ValueError: No model architecture found in /models/bad/config.json",
        "",
    ]
    assert last_error_line(lines) == (
        "(APIServer pid=1) ValueError: No model architecture found in /models/bad/config.json"
    )


def test_follower_joins_a_line_split_across_two_reads() -> None:
    follower = LogFollower([])
    assert follower.feed("INFO Loading weig") == []
    assert follower.feed("hts took 0.01 seconds\nnext") == ["INFO Loading weights took 0.01 seconds"]
    assert follower.phase == "loading weights"
    assert follower.all_lines()[-1] == "next"


def replay(answers: list[Mapping[str, Any]], log_fatal_line: str | None = None) -> RecordedHost:
    """A host whose vllm_wait probe answers these, in order (the last one again after), and
    whose whole-log scan (asked once the process has exited) finds ``log_fatal_line``."""
    return RecordedHost(probes={"vllm_wait": list(answers), "vllm_log_scan": {"line": log_fatal_line, "exists": True}})


def answer(text: str, stage: str = "none", alive: bool = True) -> dict[str, Any]:
    return {"alive": alive, "log_text": text, "offset": 0, "stage": stage, "detail": "refused"}


def target(timeout_s: float = 600) -> WaitTarget:
    return WaitTarget(1, 1, "/var/log/vllm.log", "http://127.0.0.1:8000", "m", None, timeout_s)


def run_wait(host: RecordedHost, timeout_s: float = 600):  # type: ignore[no-untyped-def]
    ticks = iter(float(i) for i in range(10_000))
    progress: list[str] = []
    ready = wait_ready(ScopedConnection(host), target(timeout_s), progress.append, clock=lambda: next(ticks),
                       sleep=lambda _: None)  # fmt: skip
    return ready, progress


def test_fatal_line_fails_on_the_poll_that_brings_it() -> None:
    fatal = GPU_FATAL[0]
    conn = replay(
        [
            answer("\n".join(CPU_LOG[:15]) + "\n"),
            answer(fatal + "\n"),
            answer("never read\n"),
        ]
    )
    ready, _ = run_wait(conn)
    assert not ready.ready
    assert ready.fatal_line == fatal.strip()
    assert len(conn.probe_args) == 2
    message = ready.failure_message("/var/log/vllm.log")
    assert fatal.strip() in message and "last lines of /var/log/vllm.log" in message


def test_process_exit_fails_quoting_the_last_error() -> None:
    conn = replay(
        [
            answer("\n".join(CPU_LOG[:10]) + "\n"),
            answer(
                "Traceback (most recent call last):\nOSError: /m does not appear to have a file named config.json\n",
                alive=False,
            ),
        ]
    )
    ready, _ = run_wait(conn)
    assert not ready.ready
    assert "process exited" in ready.reason and "config.json" in ready.reason


def test_ready_after_all_three_stages_with_phases_reported() -> None:
    conn = replay(
        [
            answer("\n".join(CPU_LOG[:40]) + "\n"),
            answer("\n".join(CPU_LOG[40:]) + "\n", stage="health"),
            answer("", stage="completion"),
        ]
    )
    ready, progress = run_wait(conn)
    assert ready.ready
    assert [args["stage"] for _, args in conn.probe_args] == ["none", "none", "health"]
    assert [name for name, _ in ready.phases][-1] == "API up"
    assert any("waiting for" in line for line in progress)


def test_every_phase_gets_a_progress_line_even_when_one_poll_passes_several() -> None:
    # The whole recorded start-up arrives in one poll, as it does for a small model: each
    # phase it went through is still reported, not only the last one.
    conn = replay([answer("\n".join(CPU_LOG) + "\n", stage="health"), answer("", stage="completion")])
    ready, progress = run_wait(conn)
    assert ready.ready
    reported = [line.split(",")[0].removeprefix("vLLM ") for line in progress]
    assert reported == phases_in_order(CPU_LOG), progress
    assert "loading weights" in reported and "API up" in reported


def test_timeout_says_which_stage_it_was_waiting_for() -> None:
    conn = replay([answer("x\n", stage="health") for _ in range(20)])
    ready, _ = run_wait(conn, timeout_s=5)
    assert not ready.ready
    assert "not ready after 5s" in ready.reason
    assert "waiting for /v1/models" in ready.reason
