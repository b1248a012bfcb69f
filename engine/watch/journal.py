"""The watcher's one event stream: a JSON object per line (plans, repairs, pauses, drift),
secrets masked, appended and flushed as they happen so ``tail -f`` and log shippers see
them at once."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, TextIO

from engine import mask


class Journal:
    def __init__(self, path: Path):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # O_NOFOLLOW: a link planted at the path is refused, not written through
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        self._out: TextIO = os.fdopen(fd, "a", encoding="utf-8")
        self.path = path

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        entry = {"time": round(time.time(), 3), "event": event, **mask.MASK.value(fields)}
        self._out.write(mask.dumps(entry, sort_keys=True, default=str) + "\n")
        self._out.flush()
        return entry

    def close(self) -> None:
        self._out.close()
