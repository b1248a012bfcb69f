"""Is a vLLM server making progress, not just answering? Read-only, in bounded time.

vLLM's ``/health`` can answer 200 while its EngineCore is stopped, hung or dead (vLLM
#16259), so this looks at the engine itself: every process of the server (``pids`` and
their descendants: the API server, ``VLLM::EngineCore``, ``VLLM::Worker*``) is read from
``/proc/PID/stat`` ``samples`` times, ``sample_interval_s`` apart; one stopped (``T``/``t``)
in any read, or in uninterruptible sleep (``D``) in every read, is stuck. Only when none is
stuck, ``/health`` is asked and a 1-token completion must come back within ``timeout_s``.

Args: ``pids``, ``base_url``, ``model``, ``api_key`` (never echoed), ``timeout_s``,
``samples``, ``sample_interval_s``, ``processes_only`` (no HTTP: a group's non-head rank).
Answer: ``processes`` [{pid, name, state}], ``stuck``
[{pid, name, state, why}], ``health`` (HTTP status or None), ``completion`` {ok, answered,
elapsed_s, error} (None when not sent), ``wedged`` (bool) and ``why``. A completion that
gets an HTTP error back is an answer: the engine failed, it is not wedged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("vllm_http",)

import os
import time

STATES = {"T": "stopped (SIGSTOP)", "t": "stopped by a tracer", "D": "in uninterruptible sleep"}


def _stat(pid: int) -> tuple[int, str] | None:
    """(ppid, state) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0]


def _name(pid: int) -> str:
    """argv[0] (vLLM retitles its processes ``VLLM::EngineCore``), else comm."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            first = handle.read().split(b"\0")[0].decode("utf-8", "replace")
        if first:
            return first[:80]
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "?"


def _tree(roots: list[int]) -> list[int]:
    """The roots and all their descendants that are alive now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None:
                children.setdefault(stat[0], []).append(int(entry))
    seen: list[int] = []
    todo = [pid for pid in roots if _stat(pid) is not None]
    while todo:
        pid = todo.pop(0)
        if pid not in seen:
            seen.append(pid)
            todo.extend(children.get(pid, []))
    return seen


def _stuck(pids: list[int], samples: int, interval_s: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    states: dict[int, list[str]] = {pid: [] for pid in pids}
    for attempt in range(max(1, samples)):
        if attempt:
            time.sleep(interval_s)
        for pid in pids:
            stat = _stat(pid)
            states[pid].append(stat[1] if stat else "gone")
    processes, stuck = [], []
    for pid, seen in states.items():
        name = _name(pid)
        processes.append({"pid": pid, "name": name, "state": seen[-1]})
        stopped = next((s for s in seen if s in ("T", "t")), None)
        state = stopped or ("D" if all(s == "D" for s in seen) else None)
        if state:
            stuck.append({"pid": pid, "name": name, "state": state, "why": STATES[state]})
    return processes, stuck


def _completion(args: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    answer = call(
        "vllm_http",
        {
            "url": args["base_url"] + "/v1/completions",
            "method": "POST",
            "json": {"model": args["model"], "prompt": "ping", "max_tokens": 1, "temperature": 0},
            "api_key": args.get("api_key"),
            "timeout_s": float(args.get("timeout_s", 60)),
        },
    )
    elapsed = round(time.monotonic() - started, 2)
    if answer["status"] == 200:
        return {"ok": True, "answered": True, "elapsed_s": elapsed, "error": None}
    error = answer["error"] or f"HTTP {answer['status']}: {answer['body'][:200]}"
    # an HTTP error is an answer: the engine failed (died, raised), it is not stuck
    return {"ok": False, "answered": answer["status"] is not None, "elapsed_s": elapsed, "error": error}


def main(args: dict[str, Any]) -> dict[str, Any]:
    pids = _tree([int(pid) for pid in args.get("pids") or []])
    processes, stuck = _stuck(pids, int(args.get("samples", 3)), float(args.get("sample_interval_s", 0.2)))
    if args.get("processes_only"):  # a rank of a group that serves no HTTP itself
        first = stuck[0] if stuck else None
        why = f"{first['name']} (pid {first['pid']}) is {first['why']} (state {first['state']})" if first else ""
        return {"processes": processes, "stuck": stuck, "wedged": bool(stuck), "why": why}
    health = call("vllm_http", {"url": args["base_url"] + "/health", "timeout_s": 5})
    answer: dict[str, Any] = {"processes": processes, "stuck": stuck, "health": health["status"], "completion": None}
    if stuck:  # no completion: it would only hang until its timeout
        first = stuck[0]
        answer["wedged"] = True
        answer["why"] = f"{first['name']} (pid {first['pid']}) is {first['why']} (state {first['state']})"
    elif health["status"] != 200:
        answer["wedged"] = False
        answer["why"] = f"/health answers {health['status'] or health['error']}: down, not wedged"
    else:
        completion = answer["completion"] = _completion(args)
        answer["wedged"] = not completion["answered"]
        if completion["ok"]:
            answer["why"] = f"a 1-token completion came back in {completion['elapsed_s']:.1f}s"
        elif completion["answered"]:
            answer["why"] = f"a 1-token completion failed ({completion['error']}): it answers, not wedged"
        else:
            answer["why"] = (
                f"/health answers 200 but a 1-token completion did not come back within "
                f"{float(args.get('timeout_s', 60)):g}s ({completion['error']})"
            )
    return answer
