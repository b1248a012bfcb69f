"""User regexes searched with a bound on the text and on the time: kill/protect/only
patterns (``UserRegex``) and the regexes of lineinfile, blockinfile and wait_for (``TextRegex``).

``UserRegex`` searches at most ``MATCH_CHARS`` characters of a text (a process's argv can
be megabytes) with the ``regex`` package's per-call timeout (``MATCH_TIMEOUT_S``). Why that
engine: Python's ``re`` has no time bound, and a backtracking pattern such as
``python.*vllm.*serve`` took seconds on 12 KB of argv (days on 400 KiB); RE2 is linear but
refuses lookarounds and backreferences that ``re`` accepts, so patterns that validate today
would break. ``regex`` in VERSION0 reads what ``re`` reads and stops in C once the timeout
passes, in whatever thread runs it (a signal alarm reaches only the main thread). It is
imported when a pattern is compiled, so code that never compiles one (a module imported
by a bare system python) does not need it.

May import: engine.errors.
"""

from __future__ import annotations

import importlib
import time
from typing import Any

from engine.errors import TaskFailed

MATCH_CHARS = 16_384  # of a process name or command line; vLLM's fit many times over
MATCH_TIMEOUT_S = 0.25  # per search; a pattern over it fails the task, nothing is signalled


def compile_bounded(pattern: str, multiline: bool = False) -> Any:
    """The pattern compiled by ``regex`` (VERSION0: ``re``'s syntax); ValueError if it is none.
    ``multiline``: ``^``/``$`` at every line (Ansible's wait_for compiles with re.MULTILINE)."""
    engine = importlib.import_module("regex")
    try:
        return engine.compile(pattern, flags=engine.VERSION0 | (engine.MULTILINE if multiline else 0))
    except engine.error as exc:
        raise ValueError(str(exc)) from None


class UserRegex:
    """A user's regex searched with bounds (the module docstring says why): at most
    MATCH_CHARS of the text, at most MATCH_TIMEOUT_S per search."""

    def __init__(self, pattern: str, arg: str) -> None:
        try:
            self._compiled = compile_bounded(pattern)
        except ValueError as exc:
            raise TaskFailed(f"{arg}: invalid regex {pattern!r}: {exc}") from None
        self.pattern, self.arg = pattern, arg

    def search(self, text: str) -> bool | None:
        """Found or not; None when the text is over the bound and its first MATCH_CHARS do
        not match (the rest is unknown: the caller decides on the safe side)."""
        try:
            found = self._compiled.search(text[:MATCH_CHARS], timeout=MATCH_TIMEOUT_S) is not None
        except TimeoutError:
            raise TaskFailed(
                f"{self.arg}: regex {self.pattern!r} took more than {MATCH_TIMEOUT_S}s on {len(text)} characters "
                "(it backtracks: drop nested or repeated '.*'); nothing was signalled"
            ) from None
        return True if found else (None if len(text) > MATCH_CHARS else False)


TEXT_BUDGET_S = 2.0  # all of one task's searches in a file's (or a port's) text


class TextRegex:
    """A user's regex over a file's text, line by line or whole (``lineinfile``,
    ``blockinfile``, ``wait_for``): the length is bounded by the read that produced the text
    (``fileio``'s limit, 16 MiB for ``wait_for``, 64 KiB from a port), the time by one
    budget, TEXT_BUDGET_S, for all of a task's searches with this pattern, each search
    bounded by the ``regex`` package's timeout. Over the budget the task fails naming the
    pattern: nothing is written."""

    def __init__(self, pattern: str, arg: str, budget_s: float | None = None, multiline: bool = False) -> None:
        try:
            self._compiled = compile_bounded(pattern, multiline)
        except ValueError as exc:
            raise TaskFailed(f"{arg} {pattern!r} is not a valid regular expression: {exc}") from None
        self.pattern, self.arg = pattern, arg
        self._budget = TEXT_BUDGET_S if budget_s is None else budget_s
        self._left = self._budget
        self.multiline = bool(self._compiled.flags & importlib.import_module("regex").MULTILINE)

    def search(self, text: str) -> Any:
        """The first match (a ``regex`` match: ``groups()``, ``expand()``, ``start()``) or None."""
        started = time.monotonic()
        try:
            return self._compiled.search(text, timeout=max(self._left, 0.001))
        except TimeoutError:
            raise TaskFailed(
                f"{self.arg}: regex {self.pattern!r} took more than {self._budget:g}s on {len(text)} characters "
                "(it backtracks: drop nested or repeated '.*'); nothing was changed"
            ) from None
        finally:
            self._left -= time.monotonic() - started
