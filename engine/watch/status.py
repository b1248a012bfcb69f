"""The compact per-host view of the watcher: last check, state, repairs in the window,
paused or not. Host-supplied text is shown on one line, control characters removed."""

from __future__ import annotations

import time

from engine.watch.store import WatchState

DETAIL_CHARS = 100


def _one_line(text: str) -> str:
    flat = "".join(ch if ch.isprintable() else " " for ch in text)
    return flat if len(flat) <= DETAIL_CHARS else flat[: DETAIL_CHARS - 3] + "..."


def table(state: WatchState, now: float, window_s: float) -> str:
    rows = [("HOST", "LAST CHECK", "STATE", "REPAIRS", "PAUSED", "DETAIL")]
    for name, host in sorted(state.hosts.items()):
        checked = time.strftime("%H:%M:%S", time.localtime(host.last_check)) if host.last_check else "-"
        paused = "yes" if host.pause is not None or state.fleet_pause is not None else "no"
        detail = host.pause.reason if host.pause is not None else host.detail
        rows.append((name, checked, host.state, str(host.repairs_in(now, window_s)), paused, _one_line(detail)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5] for row in rows]
    if state.fleet_pause is not None:
        lines.append(f"FLEET PAUSED: {state.fleet_pause.reason} (rigger watch-resume --fleet clears it)")
    return "\n".join(line.rstrip() for line in lines)
