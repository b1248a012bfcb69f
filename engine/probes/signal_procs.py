"""Terminate processes safely: SIGTERM, wait, then SIGKILL the survivors.

Args: ``targets`` [{"pid", "start_time", "gpu_holder", "devices"}], ``term_timeout_s``
(wait after SIGTERM), ``kill_after_term`` (send SIGKILL to survivors), ``kill_timeout_s``
(wait after SIGKILL). Before every signal the process start time is read again: a pid
whose start time changed is another process now (PID reuse) and is skipped; a
``gpu_holder`` target must also still have an NVIDIA GPU device open (/proc/PID/fd ->
/dev/nvidiaN), one of its ``devices`` (the selected GPUs' nodes) when given, or it is
skipped. Never signals PID 1 nor any of rigger's own processes on the host (this probe,
the remote interpreters, the run-lock holder) or their ancestors (the SSH session that
runs them). A zombie counts as exited (it holds nothing but its process-table slot).

Answer: ``terminated`` (exited after SIGTERM), ``killed`` (exited after SIGKILL),
``gone`` (already gone), ``skipped`` [{"pid", "reason"}], ``alive`` [{"pid", "state",
"reason"}] (still there when the waits ran out).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

MUTATES = True
USES = ("procs",)

import os
import signal
import time

POLL_S = 0.05


def _current(pid: int, gpu_devices: bool = False) -> dict[str, Any] | None:
    answer = call("procs", {"pids": [pid], "gpu_devices": gpu_devices})
    return answer["processes"][0] if answer["processes"] else None


def _same(target: dict[str, Any], proc: dict[str, Any] | None) -> bool:
    return proc is not None and proc["start_time"] == int(target["start_time"])


def _exited(target: dict[str, Any]) -> bool:
    proc = _current(target["pid"])
    return proc is None or not _same(target, proc) or proc["state"] in ("Z", "X")


def _protected_reason(pid: int, protected: dict[int, str]) -> str | None:
    if pid <= 1:
        return "never signals PID 1 (init)" if pid == 1 else "invalid pid"
    if pid in protected:
        return protected[pid]
    return None


def _send(target: dict[str, Any], signum: int, protected: dict[int, str]) -> str | None:
    """Signal one target after re-checking it; returns a skip reason or None."""
    pid = int(target["pid"])
    reason = _protected_reason(pid, protected)
    if reason:
        return reason
    proc = _current(pid, gpu_devices=bool(target.get("gpu_holder")))
    if proc is None:
        return "gone"
    if not _same(target, proc):
        return f"pid reused: start time is {proc['start_time']}, expected {target['start_time']} (now {proc['name']!r})"
    if proc["state"] in ("Z", "X"):
        return "gone"
    if target.get("gpu_holder") and not proc["gpu_devices"]:
        return "has no NVIDIA device open (/proc/PID/fd -> /dev/nvidia*): not proven a GPU holder here"
    wanted = target.get("devices") or []
    if target.get("gpu_holder") and wanted and not set(wanted) & set(proc["gpu_devices"]):
        return f"has {', '.join(proc['gpu_devices'])} open, none of {', '.join(wanted)}: not a holder of those GPUs"
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return f"permission denied: owned by {proc['user']} (uid {proc['uid']})"
    return None


def _wait(targets: list[dict[str, Any]], timeout_s: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + max(0.0, float(timeout_s))
    pending = list(targets)
    while pending:
        pending = [t for t in pending if not _exited(t)]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(POLL_S)
    return pending


def _protected() -> dict[int, str]:
    own = call("procs", {"pids": [], "own": True})
    table = {int(pid): f"never signals {why}" for pid, why in own["rigger_pids"].items()}
    table[1] = "never signals PID 1 (init)"
    return table


def _signal_all(
    targets: list[dict[str, Any]],
    signum: int,
    protected: dict[int, str],
    result: dict[str, Any],
    gone_key: str = "gone",
) -> list[dict[str, Any]]:
    sent = []
    for target in targets:
        reason = _send(target, signum, protected)
        if reason == "gone":
            result[gone_key].append(int(target["pid"]))
        elif reason:
            result["skipped"].append({"pid": int(target["pid"]), "reason": reason})
        else:
            sent.append(target)
    return sent


def main(args: dict[str, Any]) -> dict[str, Any]:
    protected = _protected()
    result: dict[str, Any] = {"terminated": [], "killed": [], "gone": [], "skipped": [], "alive": []}
    targets = [
        {
            "pid": int(t["pid"]),
            "start_time": int(t["start_time"]),
            "gpu_holder": bool(t.get("gpu_holder")),
            "devices": [str(d) for d in t.get("devices") or []],
        }
        for t in args["targets"]
    ]
    termed = _signal_all(targets, signal.SIGTERM, protected, result)
    survivors = _wait(termed, args.get("term_timeout_s", 10.0))
    surviving_pids = {t["pid"] for t in survivors}
    result["terminated"] = [t["pid"] for t in termed if t["pid"] not in surviving_pids]
    if survivors and args.get("kill_after_term", True):
        killed = _signal_all(survivors, signal.SIGKILL, protected, result, "terminated")
        left = _wait(killed, args.get("kill_timeout_s", 10.0))
        left_pids = {t["pid"] for t in left}
        result["killed"] = [t["pid"] for t in killed if t["pid"] not in left_pids]
        survivors = left
    for target in survivors:
        proc = _current(target["pid"])
        state = proc["state"] if proc else "?"
        reason = "uninterruptible sleep (D state)" if state == "D" else "did not exit"
        result["alive"].append({"pid": target["pid"], "state": state, "reason": reason})
    return result
