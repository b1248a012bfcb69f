"""The watcher's one event stream: a JSON object per line (plans, repairs, pauses, drift),
secrets masked, appended and flushed as they happen so ``tail -f`` and log shippers see
them at once."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, TextIO

from engine import mask
from engine.errors import OptionsError
from engine.probes.fileio import open_state_append


class Journal:
    def __init__(self, path: Path):
        # the state-file rules (fileio): folder 0700 and ours, never through a link, a FIFO refused
        try:
            fd = open_state_append(os.path.abspath(path))
        except OSError as exc:
            raise OptionsError(f"cannot open the watch event journal {path}: {exc}") from None
        self._out: TextIO = os.fdopen(fd, "a", encoding="utf-8")
        self.path = path

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        entry = {"time": round(time.time(), 3), "event": event, **mask.MASK.value(fields)}
        self._out.write(mask.dumps(entry, sort_keys=True, default=str) + "\n")
        self._out.flush()
        return entry

    def close(self) -> None:
        self._out.close()
