"""Reading the events of a `rigger run --output jsonl` in tests (a harness helper, not a fake)."""

from __future__ import annotations

import json
from typing import Any


def task_result(events: list[dict[str, Any]], task: str | None = None) -> dict[str, Any]:
    """The first task_result event (of ``task``), or a failure listing what the run
    reported instead (an unreachable host, a held run lock) - never a bare StopIteration."""
    found = [e for e in events if e.get("event") == "task_result" and (task is None or e.get("task") == task)]
    assert found, f"no result for task {task!r}; the run reported: {json.dumps(events)[-3000:]}"
    return found[0]
