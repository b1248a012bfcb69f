"""Wait for a freshly launched vLLM to be ready, in stages, asking ON the host.

Stages: ``/health`` answers 200, then ``/v1/models`` lists the served name, then a
one-token completion succeeds. Each poll is one ``vllm_wait`` probe round trip that also
brings back the new log text, so a fatal line (or the process exiting) fails the wait
within a poll or two, quoting the line and the log's last lines. A server that passed
``/health`` and then crashed (a kernel that faults on the first request) is reported as
that, with the fatal line found anywhere in the log since its start and a hint when the
cause is known.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.module_api import ScopedConnection
from modules.serving import loglines
from modules.serving.readiness import (
    FATAL_PATTERNS,
    LogFollower,
    fatal_line,
    hint_for,
    last_error_line,
    phase_of,
    root_cause,
    tail,
)

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
    healthy_at_s: float | None = None
    died_after_health: bool = False
    hint: str | None = None
    # what the start logged about itself (loglines.facts_from): backends, KV cache size...
    log_facts: Mapping[str, Any] = field(default_factory=dict)

    def failure_message(self, log_path: str) -> str:
        lines = "\n".join(f"  | {line}" for line in self.log_tail)
        head = f"vLLM {self.reason}" if self.died_after_health else f"vLLM did not start: {self.reason}"
        hint = f"\nhint: {self.hint}" if self.hint else ""
        return f"{head}{hint}\nlast lines of {log_path}:\n{lines}"


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
    """The log so far, when each phase was first seen and when /health first answered 200
    (seconds after launch)."""

    follower: LogFollower
    phases: list[tuple[str, float]]
    healthy_at: float | None = None
    # kept apart from the follower, which forgets old lines: the KV cache size is logged early
    facts: dict[str, Any] = field(default_factory=dict)

    def feed(self, text: str, stage: str, elapsed: float) -> list[str]:
        if stage != "none" and self.healthy_at is None:
            self.healthy_at = round(elapsed, 1)
        new_lines = self.follower.feed(text)
        self.facts = loglines.facts_from(new_lines, self.facts)
        for line in new_lines:  # every phase named, even several in one poll
            phase = phase_of([line])
            if phase and (not self.phases or self.phases[-1][0] != phase):
                self.phases.append((phase, round(elapsed, 1)))
        return new_lines


def _failed(seen: _Seen, elapsed: float, reason: str, line: str | None, died: bool = False) -> Readiness:
    return Readiness(
        ready=False,
        elapsed_s=elapsed,
        phase=seen.follower.phase,
        reason=reason,
        fatal_line=line,
        log_tail=tuple(tail(seen.follower.all_lines())),
        phases=tuple(seen.phases),
        healthy_at_s=seen.healthy_at,
        died_after_health=died and seen.healthy_at is not None,
        hint=hint_for([*([line] if line else []), *seen.follower.all_lines()]),
        log_facts=dict(seen.facts),
    )


def _died(seen: _Seen, elapsed: float, what: str, line: str | None) -> Readiness:
    """A crash: after /health answered, it is "was healthy, then died", not "did not start"."""
    if seen.healthy_at is not None:
        reason = f"was healthy at {seen.healthy_at:g}s (/health answered 200), then died: {line or what}"
    else:
        reason = f"{what}: {line}" if line else what
    cause = root_cause(line, seen.follower.all_lines())
    if cause:
        reason += f"\ncause: {cause}"
    return _failed(seen, elapsed, reason, line, died=True)


def _whole_log_fatal(conn: ScopedConnection, target: WaitTarget) -> str | None:
    """The first fatal line anywhere in the log: the follower may have seen only the end."""
    answer = conn.run_probe(
        "vllm_log_scan", {"log_path": target.log_path, "patterns": [p.pattern for p in FATAL_PATTERNS]}
    )
    line = answer.get("line")
    return str(line).strip() if line else None


def _verdict(
    conn: ScopedConnection,
    target: WaitTarget,
    answer: Mapping[str, Any],
    seen: _Seen,
    new_lines: list[str],
    elapsed: float,
) -> Readiness | None:
    fatal = fatal_line(new_lines)
    if fatal:
        return _died(seen, elapsed, "fatal log line", fatal)
    if answer["stage"] == "completion":
        return Readiness(
            True,
            elapsed,
            seen.follower.phase,
            "ready",
            phases=tuple(seen.phases),
            healthy_at_s=seen.healthy_at,
            log_facts=dict(seen.facts),
        )
    if not answer["alive"]:
        fatal = _whole_log_fatal(conn, target)
        if fatal:
            return _died(seen, elapsed, "fatal log line", fatal)
        # no crash line: the last exception line explains the exit, and is the line quoted
        line = last_error_line(seen.follower.all_lines())
        return _died(seen, elapsed, "the server process exited" + ("; last error" if line else ""), line)
    return None


# Another process the server depends on (a worker rank on another node): called each poll,
# it answers (what happened, the line that explains it) once that process is gone.
Watch = Callable[[], tuple[str, str | None] | None]


def wait_ready(
    conn: ScopedConnection,
    target: WaitTarget,
    progress: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    watch: Watch | None = None,
) -> Readiness:
    seen = _Seen(LogFollower([]), [])
    offset, stage = 0, "none"
    started = clock()
    last_report, reported_phases = started, 0
    while True:
        answer = conn.run_probe("vllm_wait", _probe_args(target, offset, stage))
        offset, stage = int(answer["offset"]), str(answer["stage"])
        elapsed = clock() - started
        new_lines = seen.feed(str(answer["log_text"]), stage, elapsed)
        # every phase entered since the last poll gets its own line, even when one poll passed
        # through several (a small model loads its weights between two polls)
        entered, reported_phases = seen.phases[reported_phases:], len(seen.phases)
        for phase, at in entered:
            progress(f"vLLM {phase}, {STAGE_NAMES[stage]} ({at:.0f}s)")
        verdict = _verdict(conn, target, answer, seen, new_lines, elapsed)
        if verdict is not None:
            return verdict
        elsewhere = watch() if watch is not None else None
        if elsewhere is not None:
            return _died(seen, elapsed, *elsewhere)
        if elapsed >= target.timeout_s:
            doing = f"{STAGE_NAMES[stage]}: {answer['detail']}"
            return _failed(seen, elapsed, f"not ready after {target.timeout_s:g}s ({doing})", None)
        now = clock()
        if not entered and now - last_report >= PROGRESS_EVERY_S:
            progress(f"vLLM {seen.follower.phase or 'starting'}, {STAGE_NAMES[stage]} ({elapsed:.0f}s)")
        if entered or now - last_report >= PROGRESS_EVERY_S:
            last_report = now
        sleep(POLL_S)
