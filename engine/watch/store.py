"""What ``rigger watch`` remembers per host between rounds and across restarts: repairs in
the window, the backoff, pauses with their evidence, the fleet breaker.

One JSON file on the controller (``$RIGGER_STATE_DIR/watch/state.json``, else
``~/.local/state/rigger/watch/state.json``), written whole to a new file with a random name
(O_EXCL) and renamed over the old one, so a crash leaves the old or the new state, never
half of one. The folder and the file go through fileio's state-file rules: the folder made
0700 and refused when another user's, the file never read or written through a link, and
a FIFO or device there refused at once, never waited on.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine import mask
from engine.errors import OptionsError
from engine.probes.fileio import read_state, write_state
from engine.runlock import STATE_DIR_ENV

EVIDENCE_CHARS = 4000  # of a failure's message: enough for the fatal log line and its context


def state_dir(explicit: str | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get(STATE_DIR_ENV)
    return Path(base) / "watch" if base else Path("~/.local/state/rigger/watch").expanduser()


@dataclass
class Pause:
    since: float
    reason: str
    evidence: str = ""


@dataclass
class HostState:
    repairs: list[float] = field(default_factory=list)  # when each repair in the window began
    failed_repairs: int = 0  # in a row
    last_check: float = 0.0
    state: str = "unknown"  # converged, repaired, repair failed, drift, backoff, paused, unreachable, ...
    detail: str = ""
    pause: Pause | None = None

    def repairs_in(self, now: float, window_s: float) -> int:
        self.repairs = [t for t in self.repairs if now - t < window_s]
        return len(self.repairs)


@dataclass
class WatchState:
    hosts: dict[str, HostState] = field(default_factory=dict)
    fleet_pause: Pause | None = None
    cycles: int = 0

    def host(self, name: str) -> HostState:
        return self.hosts.setdefault(name, HostState())


def _pause_of(data: Any) -> Pause | None:
    return Pause(**data) if isinstance(data, dict) else None


def load(folder: Path) -> WatchState:
    path = folder / "state.json"
    try:
        text = read_state(os.path.abspath(path))
        if text is None:
            return WatchState()
        raw = json.loads(text.decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise OptionsError(f"{path}: unreadable watch state ({exc}); move it away to start afresh") from None
    hosts = {}
    for name, data in (raw.get("hosts") or {}).items():
        data = dict(data)
        pause = _pause_of(data.pop("pause", None))
        hosts[name] = HostState(**data, pause=pause)
    return WatchState(hosts, _pause_of(raw.get("fleet_pause")), int(raw.get("cycles", 0)))


def save(state: WatchState, folder: Path) -> None:
    text = mask.dumps(asdict(state), indent=1, sort_keys=True)
    try:
        write_state(os.path.abspath(folder / "state.json"), text.encode("utf-8"))
    except OSError as exc:
        raise OptionsError(f"cannot keep the watch state in {folder}: {exc}") from None


def evidence(text: str) -> str:
    return text if len(text) <= EVIDENCE_CHARS else text[:EVIDENCE_CHARS] + " ..."
