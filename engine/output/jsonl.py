"""One JSON object per line and per event; diffs always included; no_log masked."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from typing import Any, TextIO

from engine.output.events import (
    Event,
    HostResult,
    Interruption,
    Notice,
    PlayStarted,
    Progress,
    Recap,
    TaskFinished,
    TaskStarted,
)

_NAMES = {
    PlayStarted: "play_start",
    TaskStarted: "task_start",
    HostResult: "task_result",
    TaskFinished: "task_end",
    Progress: "progress",
    Notice: "notice",
    Interruption: "interrupted",
    Recap: "recap",
}


def event_dict(event: Event) -> dict[str, Any]:
    if isinstance(event, HostResult):
        event = event.masked()
    body = asdict(event)
    if isinstance(event, Recap):
        body = {
            "hosts": body["stats"],
            "duration_s": round(event.duration_s, 3),
            "check_mode": event.check_mode,
            "stopped": body["stopped"],
            "quarantined": body["quarantined"],
        }
    return {"event": _NAMES[type(event)], **body}


class JsonlSink:
    def __init__(self, stream: TextIO):
        self._stream = stream
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        line = json.dumps(event_dict(event), default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        self._stream.flush()
