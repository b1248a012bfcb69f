"""Quarantined hosts, kept on the controller: hosts a module judged unfit to serve.

A module marks a host by returning ``data["quarantine"] = {"reason": ...}`` (ensure_gpus_healthy
does, on a refuse verdict). The runner records it here, in ``quarantine.json`` under the
controller's state directory ($RIGGER_STATE_DIR, as the run lock uses it, else
~/.local/state/rigger), so it survives the controller restarting. While a host is in it:
its variable ``rigger_quarantined`` holds the entry (``rigger inventory`` shows it), the
recap names it, and a module that serves (``quarantine_skips(args)`` true) is skipped on
it unless the run says ``-e rigger_include_quarantined=true`` (or ``--include-quarantined``).
``rigger quarantine clear HOST`` ends it.

A module may also set ``data["circuit_breaker"] = {"max_share": 0.5}``: when more than that
share of the play's hosts (and at least two) are marked by one task in one run, the run
stops there and no host is quarantined, because a shared cause (a driver rollout, a bad image) is likelier
than that many broken machines.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.probes.fileio import read_state, write_state
from engine.runlock import STATE_DIR_ENV

FILE_NAME = "quarantine.json"
INCLUDE_VAR = "rigger_include_quarantined"
HOST_VAR = "rigger_quarantined"
_LOCK = threading.Lock()


def state_dir() -> Path:
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rigger"


def path() -> Path:
    return state_dir() / FILE_NAME


def load() -> dict[str, dict[str, Any]]:
    """Host -> its entry (reason, task, since). A missing file is no quarantine; an
    unreadable one is an error the caller reports (never silently "nothing quarantined")."""
    raw = read_state(os.path.abspath(path()))  # fileio's state-file rules: no link, no FIFO, ours
    if raw is None:
        return {}
    data = json.loads(raw.decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path()}: expected a JSON object of hosts")
    return {str(host): dict(entry) for host, entry in data.items() if isinstance(entry, dict)}


def _save(entries: Mapping[str, Any]) -> None:
    text = json.dumps(dict(sorted(entries.items())), indent=2) + "\n"
    write_state(os.path.abspath(path()), text.encode("utf-8"))


def add(marks: Iterable[tuple[str, str, str]]) -> None:
    """Record (host, reason, task) marks at once."""
    with _LOCK:
        entries = load()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for host, reason, task in marks:  # refused again: the first refusal's time stays
            since = entries.get(host, {}).get("since", now)
            entries[host] = {"reason": reason, "task": task, "since": since}
        _save(entries)


def clear(host: str) -> bool:
    """End a host's quarantine; False when it was not quarantined."""
    with _LOCK:
        entries = load()
        if host not in entries:
            return False
        del entries[host]
        _save(entries)
        return True


def mark_of(data: Mapping[str, Any]) -> str | None:
    """The reason a task result quarantines its host, or None."""
    mark = data.get("quarantine")
    if isinstance(mark, Mapping) and mark.get("reason"):
        return str(mark["reason"])
    return None


def breaker_share(results_data: Iterable[Mapping[str, Any]]) -> float | None:
    """The smallest circuit-breaker share any of one task's results asks for."""
    shares = []
    for data in results_data:
        breaker = data.get("circuit_breaker")
        if isinstance(breaker, Mapping) and isinstance(breaker.get("max_share"), int | float):
            shares.append(float(breaker["max_share"]))
    return min(shares) if shares else None
