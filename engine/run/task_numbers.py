"""Task keywords that are numbers (retries, delay, timeout) written as templates: Ansible
renders them when the task runs, with the task's variables, and so does rigger; a value
that renders to no fitting number fails the task with the keyword named."""

from __future__ import annotations

from typing import Any

from engine import templating


def rendered_count(value: int | str, key: str, scope: templating.Scope) -> int:
    """A whole number of 0 or more (``retries``)."""
    rendered = _rendered(value, scope)
    text = str(rendered).strip()
    if isinstance(rendered, bool) or not text.isdigit():
        raise ValueError(f"{key}: {rendered!r} is not a whole number of 0 or more")
    return int(text)


def rendered_seconds(value: float | str, key: str, scope: templating.Scope, *, zero_ok: bool = True) -> float:
    """A number of seconds (``delay`` may be 0, ``timeout`` may not)."""
    rendered = _rendered(value, scope)
    try:
        seconds = float(rendered)
    except (TypeError, ValueError):
        seconds = -1.0
    if isinstance(rendered, bool) or seconds < 0 or (seconds == 0 and not zero_ok):
        least = "0 or more" if zero_ok else "more than 0"
        raise ValueError(f"{key}: {rendered!r} is not a number of seconds of {least}")
    return seconds


def _rendered(value: Any, scope: templating.Scope) -> Any:
    return templating.render(value, scope) if isinstance(value, str) else value
