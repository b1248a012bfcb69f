"""Read a vLLM start-up log: which phase it is in, and whether a line means it will not start.

Pure functions over text, so they are tested on recorded log excerpts. The phases are the
ones an operator waits through on a big model (facts §2.4): loading weights, KV cache
sizing, graph capture / compilation, and the API coming up.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import ScopedConnection
from modules.serving import loglines

TAIL_LINES = 15
MAX_LINE_CHARS = 400


@dataclass(frozen=True)
class Phase:
    name: str
    pattern: re.Pattern[str]


# Roughly in start-up order; see phase_of for how the current one is chosen.
PHASES = (
    Phase("starting engine", re.compile(r"Initializing a V1 LLM engine|Resolved architecture")),
    Phase(
        "loading weights",
        re.compile(r"Starting to load model|Loading safetensors checkpoint|Loading weights took"),
    ),
    Phase(
        "graph capture",
        re.compile(
            r"Capturing CUDA graph|Warming up model for the compilation|torch\.compile"
            r"|Compiling a graph|Graph capturing"
        ),
    ),
    Phase(
        "KV cache",
        re.compile(r"Available KV cache memory|(GPU|CPU) KV cache size|for KV cache on node"),
    ),
    Phase(
        "API up",
        re.compile(r"Starting vLLM (API )?server|Uvicorn running on|Application startup complete"),
    ),
)

# A line matching one of these means the engine crashed, while starting or while serving:
# a process died of a signal (faulthandler's "Fatal Python error: Illegal instruction"),
# or the API server saw its engine core or a worker die.
CRASH_PATTERNS = (
    re.compile(r"Fatal Python error"),
    re.compile(r"Worker proc \S+ died unexpectedly"),
    re.compile(r"Engine core proc \S+ died unexpectedly|EngineCore\S* (?:exited|died)\b|EngineDeadError"),
)
# The engine's own "it failed" line: true, but the cause is the exception logged before it.
GENERIC_START_FAILURE = r"Engine core initialization failed|EngineCore failed to start"
# A line matching one of these means the server will not come up: fail now, not at timeout.
FATAL_PATTERNS = (
    re.compile(r"No valid attention backend"),
    re.compile(r"NotImplementedError"),
    re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError"),
    re.compile(r"Insufficient space in /dev/shm"),
    re.compile(GENERIC_START_FAILURE),
    re.compile(r"\[Errno 98\] .*address already in use", re.IGNORECASE),
    *CRASH_PATTERNS,
    # the field's fatal lines with a named cause (modules/serving/loglines.py)
    *loglines.fatal_patterns(),
)
# Causes rigger knows how to fix, found anywhere in the log: (what the log says, what to do).
HINTS = (
    (
        re.compile(r"Illegal instruction|SIGILL|exit ?code:? ?-4\b"),
        "an illegal instruction: the CPU (or its kernel) refused an instruction the chosen "
        "dtype's kernels use; vLLM's CPU build faults in bfloat16 on some CPUs that advertise "
        "bf16/AMX. Serve in float32: serve_vllm `dtype: float32` (the demo: `-e demo_dtype=float32`)",
    ),
)
# An exception named anywhere in a line, as vLLM's prefixed log lines carry them.
EXCEPTION_TEXT = re.compile(r"\b\w*(?:Error|Exception): \S")
# The line that explains an exit: the last exception line of a traceback.
ERROR_LINE = re.compile(r"^\s*(?:\(\S+ pid=\d+\)\s*)?(?:\w+\.)*\w*(?:Error|Exception)\b.*:")


def _clean(line: str) -> str:
    line = line.rstrip("\r\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "..."


def phase_of(lines: Iterable[str], current: str | None = None) -> str | None:
    """The phase named by the latest line that names one (or ``current`` if none does).

    Latest line wins, not a fixed order: a GPU build sizes the KV cache before it captures
    CUDA graphs, the CPU build warms up (compiles) first.
    """
    latest = current
    for line in lines:
        for phase in PHASES:
            if phase.pattern.search(line):
                latest = phase.name
    return latest


def fatal_line(lines: Iterable[str]) -> str | None:
    """The first line that means the server cannot start, or None."""
    for line in lines:
        if any(pattern.search(line) for pattern in FATAL_PATTERNS):
            return _clean(line).strip()
    return None


def hint_for(lines: Iterable[str]) -> str | None:
    """What to do about a crash whose cause the log names, or None: the first line that a
    hint or a named cause (loglines.CAUSES: cause, fix, source) explains."""
    for line in lines:
        for pattern, hint in HINTS:
            if pattern.search(line):
                return hint
        named = loglines.explain([line])
        if named:
            return named
    return None


def last_error_line(lines: list[str]) -> str | None:
    """The last exception line (``ValueError: ...``): what explains a process that exited."""
    for line in reversed(lines):
        if ERROR_LINE.match(line):
            return _clean(line).strip()
    return None


def root_cause(line: str | None, lines: list[str]) -> str | None:
    """For the engine's generic start failure, the last other exception line of the log
    (``... ValueError: current platform cpu does not support ray.``), else None."""
    if not line or not re.search(GENERIC_START_FAILURE, line):
        return None
    for candidate in reversed(lines):
        if EXCEPTION_TEXT.search(candidate) and not re.search(GENERIC_START_FAILURE, candidate):
            return _clean(candidate).strip()
    return None


def tail(lines: list[str], count: int = TAIL_LINES) -> list[str]:
    kept = [_clean(line) for line in lines if line.strip()]
    return kept[-count:]


@dataclass
class LogFollower:
    """Accumulates a log read in chunks; keeps the lines and the current phase."""

    lines: list[str]
    phase: str | None = None
    _partial: str = ""
    max_lines: int = 400

    def feed(self, chunk: str) -> list[str]:
        """Add text; returns the complete new lines (a line may arrive in two chunks)."""
        text = self._partial + chunk.replace("\r", "\n")
        *complete, self._partial = text.split("\n")
        new = [line for line in complete if line.strip()]
        self.lines.extend(new)
        del self.lines[: max(0, len(self.lines) - self.max_lines)]
        self.phase = phase_of(new, self.phase)
        return new

    def all_lines(self) -> list[str]:
        return [*self.lines, self._partial] if self._partial.strip() else list(self.lines)


def liveness(
    conn: ScopedConnection,
    pids: Sequence[int],
    base_url: str,
    model: str,
    api_key: str | None,
    timeout_s: float,
    processes_only: bool = False,
) -> Mapping[str, Any]:
    """Forward progress, not just an answer (the vllm_liveness probe): ``wedged`` is true when
    a process of the server (``pids`` and their descendants) is stopped or stuck in
    uninterruptible sleep, or when ``/health`` says 200 but a 1-token completion does not come
    back within ``timeout_s``; ``why`` names the process and its state. Bounded: the states
    are read in well under a second, the completion waits at most ``timeout_s``."""
    answer: Mapping[str, Any] = conn.run_probe(
        "vllm_liveness",
        {
            "pids": list(pids),
            "base_url": base_url,
            "model": model,
            "api_key": api_key,
            "timeout_s": timeout_s,
            "processes_only": processes_only,
        },
    )
    return answer
