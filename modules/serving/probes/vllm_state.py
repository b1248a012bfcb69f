"""Read-only: what rigger recorded about a vLLM server, and whether it still runs.

Args: ``state_path``, ``main_pid`` (optional, see below), ``health_url`` (asked only
while the recorded leader is alive), ``timeout_s`` (per /health request; a request that
times out is asked again, twice).
Answer: ``record`` (the state file, or None), ``leader_alive`` (the recorded pid is still
the process rigger started: same start time, same boot, not a zombie), ``session`` (the
vLLM processes rigger can prove are its server's, by identity: the recorded leader and
members and their descendants, orphans included; see ``recorded_tree``: never by session
id), ``health_status`` (HTTP status of /health, or None), ``health_error``,
``state_error`` (the state file exists but cannot be read), ``leader_age_s`` (seconds since
the recorded leader started, from its start time in /proc: how long a server recorded as
"starting" has been loading, whoever waited for it).

A server run as a systemd unit (the record names its ``unit``) may have been started again
by systemd itself (``Restart=``, or the host rebooted): ``main_pid`` (the unit's MainPID,
asked by the caller: session.read_status) is then its leader, identified by its own pid +
start time + boot id. The record answered carries that identity (``adopted_from_unit``: the
pid rigger recorded) and says "starting" until a run sees it ready and records it
(serve_vllm waits for a server that is still loading instead of restarting it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("recorded_tree", "vllm_http", "fileio", "procs")

import base64
import json
import os
import re
import time


def read_record(state_path: str) -> tuple[dict[str, Any] | None, str | None]:
    path = os.path.abspath(os.path.expanduser(state_path))
    try:  # the guarded read: a regular file, bounded, no untrusted link followed
        answer = call("fileio", {"op": "read", "path": path, "max_bytes": 1 << 20})
        if not answer["exists"]:
            return None, None
        return json.loads(base64.b64decode(answer["data"])), None
    except (OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


# What vLLM's session holds: the API server (python or vllm), VLLM::EngineCore,
# VLLM::Worker*, multiprocessing helpers (python). Anything else is not counted as ours.
VLLM_LIKE = re.compile(r"vllm|python", re.IGNORECASE)


def session_members(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The live vLLM-like processes the record identifies (see ``recorded_tree``)."""
    found = call("recorded_tree", {"record": record})["processes"]
    return [p for p in found if VLLM_LIKE.search(p["name"] + " " + p["cmdline"])]


def leader_alive(record: dict[str, Any], members: list[dict[str, Any]]) -> bool:
    return any(p["pid"] == record.get("pid") and p["start_time"] == record.get("start_time") for p in members)


def main(args: dict[str, Any]) -> dict[str, Any]:
    record, error = read_record(args["state_path"])
    answer: dict[str, Any] = {
        "record": record,
        "state_error": error,
        "leader_alive": False,
        "session": [],
        "health_status": None,
        "health_error": None,
        "leader_age_s": None,
    }
    if record is None:
        return answer
    if record.get("unit") and int(args.get("main_pid") or 0) > 0:
        record = answer["record"] = unit_leader(record, int(args["main_pid"]))
    answer["session"] = session_members(record)
    answer["leader_alive"] = leader_alive(record, answer["session"])
    if answer["leader_alive"]:
        answer["leader_age_s"] = age_s(int(record["start_time"]))
    if answer["leader_alive"] and args.get("health_url"):
        health = ask_health(args["health_url"], float(args.get("timeout_s", 5)))
        answer["health_status"] = health["status"]
        answer["health_error"] = health["error"]
    return answer


def unit_leader(record: dict[str, Any], main_pid: int) -> dict[str, Any]:
    """The record with the unit's MainPID as its leader when systemd started another process."""
    found = call("procs", {"pids": [main_pid]})
    if not found["processes"]:
        return record
    identity = (main_pid, found["processes"][0]["start_time"], found["boot_id"])
    if identity == (record.get("pid"), record.get("start_time"), record.get("boot_id")):
        return record
    adopted = {k: v for k, v in record.items() if k != "members"}
    adopted.update(
        {
            "pid": main_pid,
            "start_time": found["processes"][0]["start_time"],
            "boot_id": found["boot_id"],
            "sid": None,
            "state": "starting",
            "adopted_from_unit": record.get("pid"),
        }
    )
    return adopted


def age_s(start_ticks: int) -> float | None:
    """Seconds since a process started (its start time counts clock ticks since boot)."""
    clock = call("procs", {"pids": []})
    if not clock.get("boot_time") or not clock.get("clock_ticks"):
        return None
    started = float(clock["boot_time"]) + start_ticks / float(clock["clock_ticks"])
    return round(max(0.0, time.time() - started), 1)


def ask_health(url: str, timeout_s: float, attempts: int = 3) -> dict[str, Any]:
    """A busy host may answer late: only a real answer counts, a timeout is asked again."""
    health: dict[str, Any] = {"status": None, "error": "not asked"}
    for _ in range(attempts):
        health = call("vllm_http", {"url": url, "timeout_s": timeout_s})
        if health["status"] is not None or "refused" in str(health["error"]).lower():
            return health
    return health
