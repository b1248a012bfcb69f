"""A vLLM server as rigger sees it on a host: its state file, its session, its port.

Everything here goes through probes, so it works the same locally and over SSH.
Stopping uses the shared ``signal_procs`` probe (SIGTERM, then SIGKILL, PID-reuse guard)
on the processes the state file identifies (``recorded_tree``): the leader rigger started
and the members recorded once it was ready (vLLM's EngineCore and workers, which outlive
the API server re-parented to init), each by pid + start time + boot id, and their
descendants. A session id alone identifies nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import ScopedConnection, TaskFailed
from modules.serving import unitserver

PORT_POLL_S = 0.5
# The state file's "state": written "starting" with the server's identity and spec hash
# before the wait for readiness begins, "ready" once it answered. A run interrupted in
# between leaves the server loading, detached by design; the next run waits for it
# (serve_vllm) instead of taking "not answering yet" for "not healthy".
STARTING, READY = "starting", "ready"


@dataclass(frozen=True)
class ServerStatus:
    """What the state file says and what is still running of it."""

    record: Mapping[str, Any] | None
    leader_alive: bool
    session: tuple[Mapping[str, Any], ...]
    health_status: int | None
    health_error: str | None
    leader_age_s: float | None = None  # seconds since the recorded leader started

    @property
    def healthy(self) -> bool:
        return self.leader_alive and self.health_status == 200

    @property
    def start_unfinished(self) -> bool:
        """Recorded as "starting": the run that launched it never saw it ready (it was
        interrupted, or is the one asking)."""
        return self.record is not None and self.record.get("state") == STARTING

    @property
    def starting(self) -> bool:
        """Still loading: recorded as "starting", running, not answering yet."""
        return self.start_unfinished and self.leader_alive and not self.healthy

    @property
    def session_pids(self) -> tuple[int, ...]:
        return tuple(int(p["pid"]) for p in self.session)

    def describe(self) -> str:
        if self.record is None:
            return "no server recorded"
        pid = self.record.get("pid")
        if self.healthy:
            return f"pid {pid} running and healthy"
        unfinished = " (its start was interrupted before it was ready)" if self.start_unfinished else ""
        if self.starting:
            age = f" for {self.leader_age_s:.0f}s" if self.leader_age_s is not None else ""
            why = self.health_error or f"/health answered {self.health_status}"
            return f"pid {pid} still starting{age}, not answering yet ({why}){unfinished}"
        if self.leader_alive:
            why = self.health_error or f"/health answered {self.health_status}"
            return f"pid {pid} running but not healthy ({why})"
        if self.session:
            return f"pid {pid} is gone, {len(self.session)} orphaned process(es) of its session left{unfinished}"
        return f"pid {pid} is not running{unfinished}"


def read_status(conn: ScopedConnection, state_path: str, health_url: str) -> ServerStatus:
    """The recorded server's status. A server run as a systemd unit is the unit's MainPID
    (systemd may have started it again: Restart=, a reboot), by its own identity."""
    asked = {"state_path": state_path, "health_url": health_url}
    answer = conn.run_probe("vllm_state", asked)
    record = answer.get("record") or {}
    if record.get("unit"):
        main_pid = unitserver.main_pid(conn, record)
        if main_pid and (main_pid != record.get("pid") or not answer["leader_alive"]):
            answer = conn.run_probe("vllm_state", {**asked, "main_pid": main_pid})
    if answer.get("state_error"):
        raise TaskFailed(
            f"serve_vllm: cannot read the state file {state_path}: {answer['state_error']} "
            "(remove it if the server it described is gone)"
        )
    return ServerStatus(
        record=answer["record"],
        leader_alive=bool(answer["leader_alive"]),
        session=tuple(answer["session"]),
        health_status=answer.get("health_status"),
        health_error=answer.get("health_error"),
        leader_age_s=answer.get("leader_age_s"),
    )


def record_members(
    conn: ScopedConnection, state_path: str, status: ServerStatus, log_facts: Mapping[str, Any] | None = None
) -> None:
    """Add to the state file the identities of the server's processes running now, so they
    are still known as ours when their parent is gone (orphans carry no other proof), and
    mark it ready (called once the server answered), with what its start logged about itself
    (``log_facts``: modules/serving/loglines.py), so a later run (``inspected``, an unchanged
    start) reports them without the log."""
    if status.record is None or not status.leader_alive:
        return
    members = [{"pid": int(p["pid"]), "start_time": int(p["start_time"])} for p in status.session]
    record = {**dict(status.record), "members": members, "state": READY}
    if log_facts is not None:
        record["log_facts"] = dict(log_facts)
    conn.write_file(state_path, json.dumps(record, indent=2, sort_keys=True).encode(), mode=0o600)


def describe_process(proc: Mapping[str, Any]) -> str:
    cmdline = str(proc.get("cmdline") or proc.get("name") or "?")
    if len(cmdline) > 160:
        cmdline = cmdline[:160] + "..."
    return f"pid {proc.get('pid')} ({proc.get('user') or proc.get('uid')}): {cmdline}"


def foreign_listener(conn: ScopedConnection, port: int, ours: Sequence[int], strict: bool) -> Mapping[str, Any] | None:
    """The port's listener when it is not one of our session's processes, else None.

    A listener rigger cannot see (no process found holding the socket) counts as foreign
    only when ``strict``: right after our server died, its last threads may still hold it.
    """
    answer = conn.run_probe("port_owner", {"port": port})
    if not answer["listening"]:
        return None
    owners = [p for p in answer["owners"] if int(p["pid"]) not in set(ours)]
    if owners or (strict and not answer["owners"]):
        return answer
    return None


def port_taken_message(port: int, answer: Mapping[str, Any]) -> str:
    owners = answer.get("owners") or []
    if owners:
        who = "; ".join(describe_process(p) for p in owners)
    else:
        uids = sorted({str(s.get("uid")) for s in answer.get("sockets") or []})
        who = f"a process rigger cannot see (socket owned by uid {', '.join(uids)})"
    hint = ""
    if any("vllm" in str(p.get("cmdline", "")).lower() for p in owners):
        hint = (
            " If rigger started it under another name or state_dir, stop it with serve_vllm "
            "state: stopped and that name."
        )
    return (
        f"port {port} is already in use by a process rigger did not start: {who}. "
        "Stop it yourself or choose another port; rigger never kills what it did not start." + hint
    )


def stop_session(conn: ScopedConnection, session: Sequence[Mapping[str, Any]], term_s: float) -> dict[str, Any]:
    """SIGTERM every process of the session, SIGKILL what is left after ``term_s``."""
    if not session:
        return {"terminated": [], "killed": [], "gone": [], "skipped": [], "alive": []}
    targets = [{"pid": int(p["pid"]), "start_time": int(p["start_time"])} for p in session]
    answer = conn.run_probe(
        "signal_procs",
        {"targets": targets, "term_timeout_s": term_s, "kill_after_term": True},
    )
    if answer.get("alive") or answer.get("skipped"):
        left = [*answer.get("alive", []), *answer.get("skipped", [])]
        detail = "; ".join(f"pid {p['pid']}: {p.get('reason')}" for p in left)
        raise TaskFailed(f"serve_vllm: could not stop the old vLLM session: {detail}", answer)
    return answer


def ensure_port_free(conn: ScopedConnection, port: int, timeout_s: float) -> None:
    """Wait until nothing listens on the port; fail at once when a process we can see
    holds it (everything of ours was stopped before this is called), or at the timeout
    when the holder is invisible or still dying (a SIGKILLed server's threads)."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = conn.run_probe("port_owner", {"port": port})
        if not answer["listening"]:
            return
        visible = bool(answer["owners"])
        if visible or time.monotonic() >= deadline:
            raise TaskFailed(port_taken_message(port, answer), {"port": port})
        time.sleep(PORT_POLL_S)


def launch(
    conn: ScopedConnection,
    *,
    argv: Sequence[str],
    env: Mapping[str, str],
    log_path: str,
    state_path: str,
    record: Mapping[str, Any],
) -> dict[str, Any]:
    answer = conn.run_probe(
        "vllm_launch",
        {
            "argv": list(argv),
            "env": dict(env),
            "log_path": log_path,
            "state_path": state_path,
            "record": dict(record),
        },
    )
    if answer.get("error"):
        raise TaskFailed(f"serve_vllm: {answer['error']}", {"argv": list(argv)})
    return answer


def model_missing(conn: ScopedConnection, model: str) -> str | None:
    """``model X is not on the host (why)``, or None when it is there or is a hub id."""
    if not model.startswith("/"):
        return None  # a hub id: vLLM resolves it
    info = conn.run_probe("path_info", {"paths": [model]})["paths"][model]
    if info.get("exists"):
        return None
    return f"model {model} is not on the host ({info.get('error') or 'no such file or directory'})"
