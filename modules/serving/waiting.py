"""Wait for a freshly launched vLLM to be ready, in stages, asking ON the host.

Stages: ``/health`` answers 200, then ``/v1/models`` lists the served name, then a
one-token completion succeeds. Each poll is one ``vllm_wait`` probe round trip that also
brings back the new log text, so a fatal line (or the process exiting) fails the wait
within a poll or two, quoting the line and the log's last lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.module_api import ScopedConnection
from modules.serving.readiness import LogFollower, fatal_line, last_error_line, phase_of, tail

POLL_S = 1.0
PROGRESS_EVERY_S = 5.0
STAGE_NAMES = {
    "none": "waiting for /health",
    "health": "waiting for /v1/models to list the model",
    "models": "waiting for a first completion",
    "completion": "ready",
}


@dataclass(frozen=True)
class WaitTarget:
    pid: int
    start_time: int | None
    log_path: str
    base_url: str
    served_name: str
    api_key: str | None
    timeout_s: float


@dataclass(frozen=True)
class Readiness:
    ready: bool
    elapsed_s: float
    phase: str | None
    reason: str = ""
    fatal_line: str | None = None
    log_tail: tuple[str, ...] = ()
    phases: tuple[tuple[str, float], ...] = ()

    def failure_message(self, log_path: str) -> str:
        lines = "\n".join(f"  | {line}" for line in self.log_tail)
        return f"vLLM did not start: {self.reason}\nlast lines of {log_path}:\n{lines}"


def _probe_args(target: WaitTarget, offset: int, stage: str) -> dict[str, Any]:
    return {
        "pid": target.pid,
        "start_time": target.start_time,
        "log_path": target.log_path,
        "offset": offset,
        "base_url": target.base_url,
        "served_name": target.served_name,
        "api_key": target.api_key,
        "stage": stage,
        "request_timeout_s": 30 if stage == "models" else 5,
    }


@dataclass
class _Seen:
    """The log so far and when each phase was first seen (seconds after launch)."""

    follower: LogFollower
    phases: list[tuple[str, float]]

    def feed(self, text: str, elapsed: float) -> list[str]:
        new_lines = self.follower.feed(text)
        for line in new_lines:  # every phase named, even several in one poll
            phase = phase_of([line])
            if phase and (not self.phases or self.phases[-1][0] != phase):
                self.phases.append((phase, round(elapsed, 1)))
        return new_lines


def _failed(seen: _Seen, elapsed: float, reason: str, line: str | None) -> Readiness:
    return Readiness(
        ready=False,
        elapsed_s=elapsed,
        phase=seen.follower.phase,
        reason=reason,
        fatal_line=line,
        log_tail=tuple(tail(seen.follower.all_lines())),
        phases=tuple(seen.phases),
    )


def _verdict(answer: Mapping[str, Any], seen: _Seen, new_lines: list[str], elapsed: float) -> Readiness | None:
    fatal = fatal_line(new_lines)
    if fatal:
        return _failed(seen, elapsed, f"fatal log line: {fatal}", fatal)
    if answer["stage"] == "completion":
        return Readiness(True, elapsed, seen.follower.phase, "ready", phases=tuple(seen.phases))
    if not answer["alive"]:
        line = last_error_line(seen.follower.all_lines())
        reason = "the server process exited" + (f"; last error: {line}" if line else "")
        return _failed(seen, elapsed, reason, line)
    return None


def wait_ready(
    conn: ScopedConnection,
    target: WaitTarget,
    progress: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Readiness:
    seen = _Seen(LogFollower([]), [])
    offset, stage = 0, "none"
    started = clock()
    last_report, last_phase = started, None
    while True:
        answer = conn.run_probe("vllm_wait", _probe_args(target, offset, stage))
        offset, stage = int(answer["offset"]), str(answer["stage"])
        elapsed = clock() - started
        new_lines = seen.feed(str(answer["log_text"]), elapsed)
        verdict = _verdict(answer, seen, new_lines, elapsed)
        if verdict is not None:
            return verdict
        if elapsed >= target.timeout_s:
            doing = f"{STAGE_NAMES[stage]}: {answer['detail']}"
            return _failed(seen, elapsed, f"not ready after {target.timeout_s:g}s ({doing})", None)
        now = clock()
        phase = seen.follower.phase
        if phase != last_phase or now - last_report >= PROGRESS_EVERY_S:
            progress(f"vLLM {phase or 'starting'}, {STAGE_NAMES[stage]} ({elapsed:.0f}s)")
            last_report, last_phase = now, phase
        sleep(POLL_S)
