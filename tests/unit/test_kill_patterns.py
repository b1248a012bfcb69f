"""kill_patterns: "matches every process" is decided from the pattern's parse, and user
regexes are searched with a bound on the text and on the time.

Real: engine/argvalues.py (the validator's check), engine/userregex.py (UserRegex) and ensure_gpus_idle's own
matching over a process record shaped as the procs probe answers. Nothing is faked; the
400 KiB command line is built here as a user's process could have it. Seen red before:
`vllm|s`, `\\w+` and friends passed the ten-name sample, and `python.*vllm.*serve` ran
for minutes (the thread below was still searching when the test gave up).
"""

from __future__ import annotations

import threading
import time

import pytest

from engine.argvalues import kill_pattern_problem
from engine.errors import TaskFailed
from engine.userregex import MATCH_CHARS, UserRegex
from modules.gpu import ensure_gpus_idle

EVERY_PROCESS = [
    "vllm|s",
    r"\w+",
    ".",
    "[^x]*x?[^x]",
    "[^x]+",
    r"\S",
    r"(?=.)",
    r"^\S",
    "(?:serve|.)",
    "s",
    r"vllm serve|\d+",
    "..",
    r".{3}",
    r"(?s:.)+",
    "(?!x).",
    r"\w+\s*",
    "(?:vllm)?.",
]
NAMED = ["vllm serve", "python.*vllm.*serve", r"^python3? -m vllm", "[vV]llm", r"\bray::", "sshd?-vllm", "ab|cd"]


@pytest.mark.parametrize("pattern", EVERY_PROCESS)
def test_a_pattern_that_matches_nearly_every_process_is_refused(pattern: str) -> None:
    problem = kill_pattern_problem(pattern)
    assert problem is not None and "every process" in problem, (pattern, problem)


@pytest.mark.parametrize("pattern", NAMED)
def test_a_pattern_that_names_something_is_accepted(pattern: str) -> None:
    assert kill_pattern_problem(pattern) is None


def _bounded(call, seconds: float) -> dict[str, object]:
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except Exception as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return box or {"hung": True}


def test_a_backtracking_pattern_over_a_huge_argv_ends_in_bounded_time() -> None:
    cmdline = "python " + "vllm " * (400 * 1024 // 5)  # never "serve": the worst case
    rules = ensure_gpus_idle._compile(["python.*vllm.*serve"], "kill_patterns")
    started = time.monotonic()
    outcome = _bounded(lambda: ensure_gpus_idle._matches(rules, {"name": "python3", "cmdline": cmdline}), 5.0)
    assert "hung" not in outcome, "the search ran past 5 s"
    assert time.monotonic() - started < 3.0
    if "error" in outcome:  # over the time bound: the task fails, nothing is signalled
        assert isinstance(outcome["error"], TaskFailed) and "nothing was signalled" in str(outcome["error"])
    else:
        assert outcome["value"] is False


def test_past_the_bound_a_protect_pattern_counts_and_a_kill_pattern_does_not() -> None:
    """The text past MATCH_CHARS is unknown: it protects, it never selects."""
    far = "x" * MATCH_CHARS + " sshd"
    proc = {"name": "x", "cmdline": far}
    pattern = ensure_gpus_idle._compile(["sshd"], "patterns")
    assert UserRegex("sshd", "p").search(far) is None
    assert ensure_gpus_idle._matches(pattern, proc, unknown=True) is True
    assert ensure_gpus_idle._matches(pattern, proc) is False
