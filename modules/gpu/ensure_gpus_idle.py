"""Make sure no compute process runs on the selected GPUs and their memory reads idle.

Reads the GPUs through NVML (nvidia-ml-py) or nvidia-smi on the host. Processes holding
GPU memory are terminated (SIGTERM, then SIGKILL after `term_timeout_s`) together with
their vLLM process tree: the API server, `VLLM::EngineCore` and `VLLM::Worker*` share a
session id even after being orphaned to PID 1, so the whole session's vLLM processes go
(plus descendants of any holder, and processes matching `kill_patterns`). Then it waits
until the GPUs read idle or `timeout_s` passes.

Never signals PID 1, rigger itself or its ancestors (its SSH session), nor processes
matching `protect_patterns`; with `only_patterns` set, a holder that does not match is
refused. The start time of every process is checked again before each signal, so a
reused pid is never hit. Fails, naming GPU, pid, user, command and MiB, when the GPUs
cannot be made idle: a holder owned by another user, a zombie or a process stuck in
uninterruptible sleep, or memory held with no process visible (another container).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import Change, Diff, Result, TaskContext, TaskFailed, Unchanged

PATTERN_LIST = {"type": "array", "items": {"type": "string", "minLength": 1}}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "gpus": {
            "description": "Which GPUs must be idle: `all`, or a list of indexes and/or UUIDs.",
            "default": "all",
            "oneOf": [
                {"const": "all"},
                {
                    "type": "array",
                    "minItems": 1,
                    "items": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}]},
                },
            ],
        },
        "max_used_mib": {
            "description": "Memory a GPU may use and still count as idle (an idle GPU never reads exactly 0).",
            "type": "integer",
            "minimum": 0,
            "default": 512,
        },
        "term_timeout_s": {
            "description": "Seconds to wait after SIGTERM before sending SIGKILL.",
            "type": "number",
            "minimum": 0,
            "default": 15,
        },
        "timeout_s": {
            "description": "Seconds to wait, after signalling, for the GPUs to read idle.",
            "type": "number",
            "minimum": 0,
            "default": 60,
        },
        "kill_patterns": {
            **PATTERN_LIST,
            "default": [],
            "description": "Regexes (searched in process name and command line): matching "
            "processes are terminated too, even before they hold GPU memory.",
        },
        "protect_patterns": {
            **PATTERN_LIST,
            "default": [],
            "description": "Regexes for processes never to signal; a GPU held by one fails.",
        },
        "only_patterns": {
            **PATTERN_LIST,
            "default": [],
            "description": "When set, only processes matching one of these regexes may be "
            "signalled; a holder that does not match fails the task.",
        },
        "vllm_tree": {
            "description": "Also terminate the vLLM processes sharing a holder's session "
            "(API server, EngineCore, workers, multiprocessing helpers).",
            "type": "boolean",
            "default": True,
        },
    },
}

VLLM_PATTERN = re.compile(r"VLLM::|vllm")
MP_HELPER_PATTERN = re.compile(r"multiprocessing\.(resource_tracker|spawn|forkserver)")
POLL_S = 0.5


@dataclass(frozen=True)
class Holder:
    """A process NVML reports on one GPU, with what /proc says about it (or None)."""

    gpu: Mapping[str, Any]
    pid: int
    used_mib: int | None
    proc: Mapping[str, Any] | None


@dataclass(frozen=True)
class Rules:
    kill: tuple[re.Pattern[str], ...]
    protect: tuple[re.Pattern[str], ...]
    only: tuple[re.Pattern[str], ...]


def _compile(patterns: Iterable[str], arg: str) -> tuple[re.Pattern[str], ...]:
    try:
        return tuple(re.compile(p) for p in patterns)
    except re.error as exc:
        raise TaskFailed(f"{arg}: invalid regex {exc.pattern!r}: {exc}") from None


def _matches(patterns: Sequence[re.Pattern[str]], proc: Mapping[str, Any]) -> bool:
    return any(p.search(proc["name"]) or p.search(proc["cmdline"]) for p in patterns)


# ---- reading the host --------------------------------------------------------------


def _select(answer: Mapping[str, Any], wanted: Any) -> list[Mapping[str, Any]]:
    gpus = list(answer["gpus"])
    if wanted == "all":
        return gpus
    chosen: list[Mapping[str, Any]] = []
    for key in wanted:
        found = [g for g in gpus if g["index"] == key or g["uuid"] == key]
        if not found:
            known = ", ".join(f"{g['index']} ({g['uuid']})" for g in gpus) or "none"
            raise TaskFailed(f"no GPU {key!r} on this host; GPUs: {known}")
        chosen.extend(g for g in found if g not in chosen)
    return chosen


def _read_gpus(ctx: TaskContext, wanted: Any) -> tuple[Mapping[str, Any], list[Mapping[str, Any]]]:
    answer = ctx.conn.run_probe("gpus", {})
    if answer["backend"] == "none" and wanted != "all":
        notes = "; ".join(answer.get("notes", []))
        raise TaskFailed(f"no NVIDIA GPUs readable on this host ({notes})")
    return answer, _select(answer, wanted)


def _holders(gpus: Iterable[Mapping[str, Any]], table: Mapping[int, Any]) -> list[Holder]:
    return [
        Holder(gpu=g, pid=p["pid"], used_mib=p.get("used_mib"), proc=table.get(p["pid"]))
        for g in gpus
        for p in g["processes"]
    ]


# ---- deciding what to signal ----------------------------------------------------------


def _refusal(proc: Mapping[str, Any], own: Mapping[str, Any], rules: Rules) -> str | None:
    pid = proc["pid"]
    if pid == 1:
        return "never signals PID 1 (init)"
    if pid == own["self_pid"]:
        return "never signals rigger itself"
    if pid in own["self_ancestors"]:
        return "never signals rigger's own session (an ancestor of rigger)"
    if _matches(rules.protect, proc):
        return "matches protect_patterns"
    if rules.only and not _matches(rules.only, proc):
        return "does not match only_patterns"
    if own["self_uid"] != 0 and proc["uid"] != own["self_uid"]:
        return f"owned by {proc['user']}, and rigger runs as uid {own['self_uid']} (not root)"
    if proc["state"] == "Z":
        return f"zombie (defunct): its parent {proc['ppid']} has not reaped it"
    return None


def _descendants(roots: set[int], procs: Iterable[Mapping[str, Any]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for proc in procs:
        children.setdefault(proc["ppid"], []).append(proc["pid"])
    found: set[int] = set()
    pending = list(roots)
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _vllm_session_members(seeds: Iterable[Mapping[str, Any]], procs: Iterable[Mapping[str, Any]]) -> set[int]:
    """vLLM processes (and multiprocessing helpers) in the session of a vLLM seed process."""
    sessions = {s["sid"] for s in seeds if s["sid"] > 1 and _matches((VLLM_PATTERN,), s)}
    return {p["pid"] for p in procs if p["sid"] in sessions and _matches((VLLM_PATTERN, MP_HELPER_PATTERN), p)}


def _extras(
    holders: list[Holder], procs: list[Mapping[str, Any]], own: Mapping[str, Any], rules: Rules, vllm_tree: bool
) -> set[int]:
    """Processes to terminate besides the holders. Only processes that may themselves be
    signalled seed the expansion: the children of PID 1, of rigger's own ancestors or of a
    protected process are never pulled in."""
    held = {h.pid for h in holders if h.proc}
    matched = [p for p in procs if rules.kill and _matches(rules.kill, p)]
    seeds = [p for p in procs if p["pid"] in held] + [p for p in matched if _refusal(p, own, rules) is None]
    extra = {p["pid"] for p in matched}
    grow = {p["pid"] for p in seeds}
    if vllm_tree:
        members = _vllm_session_members(seeds, procs)
        extra |= members
        grow |= {p["pid"] for p in procs if p["pid"] in members and _refusal(p, own, rules) is None}
    extra |= _descendants(grow, procs)
    return extra - held


COMMAND_SHOWN = 160


def _describe(pid: int, proc: Mapping[str, Any] | None) -> str:
    if proc is None:
        return f"pid {pid}"
    command = proc["cmdline"] or proc["name"]
    if len(command) > COMMAND_SHOWN:
        command = command[: COMMAND_SHOWN - 3] + "..."
    return f"pid {pid} user {proc['user']} command {command!r}"


def _holder_line(h: Holder, why: str) -> str:
    mib = "?" if h.used_mib is None else h.used_mib
    return f"GPU {h.gpu['index']} ({h.gpu['uuid']}): {_describe(h.pid, h.proc)}, {mib} MiB: {why}"


def _holder_problems(holders: list[Holder], own: Mapping[str, Any], rules: Rules) -> list[str]:
    problems = []
    for h in holders:
        if h.proc is None:
            problems.append(_holder_line(h, "no such process visible here (another container or PID namespace?)"))
            continue
        why = _refusal(h.proc, own, rules)
        if why:
            problems.append(_holder_line(h, why))
    return problems


def _invisible_memory(gpus: Iterable[Mapping[str, Any]], max_used_mib: int) -> list[str]:
    return [
        f"GPU {g['index']} ({g['uuid']}): {g['memory_used_mib']} MiB used (idle means at most "
        f"{max_used_mib}) with no process visible (another container, or the driver has not "
        "released it)"
        for g in gpus
        if not g["processes"] and (g["memory_used_mib"] or 0) > max_used_mib
    ]


@dataclass(frozen=True)
class Target:
    pid: int
    start_time: int
    line: str
    described: str


def _targets(
    holders: list[Holder], procs: list[Mapping[str, Any]], own: Mapping[str, Any], rules: Rules, vllm_tree: bool
) -> tuple[list[Target], list[str]]:
    by_pid = {p["pid"]: p for p in procs}
    held: dict[int, int] = {}
    for h in holders:
        held[h.pid] = held.get(h.pid, 0) + (h.used_mib or 0)
    targets, spared = [], []
    for pid in sorted(set(held) | _extras(holders, procs, own, rules, vllm_tree)):
        proc = by_pid.get(pid)
        if proc is None:
            continue
        why = _refusal(proc, own, rules) if pid not in held else None
        if why:
            if proc["state"] != "Z":
                spared.append(f"{_describe(pid, proc)}: {why}")
            continue
        mib = f", holds {held[pid]} MiB" if pid in held else ""
        described = _describe(pid, proc)
        targets.append(Target(pid, proc["start_time"], f"{described}{mib}", described))
    return targets, spared


# ---- plan / apply ---------------------------------------------------------------------


def _rules(args: Mapping[str, Any]) -> Rules:
    return Rules(
        kill=_compile(args["kill_patterns"], "kill_patterns"),
        protect=_compile(args["protect_patterns"], "protect_patterns"),
        only=_compile(args["only_patterns"], "only_patterns"),
    )


def _idle_summary(gpus: list[Mapping[str, Any]], answer: Mapping[str, Any]) -> str:
    if not gpus:
        notes = "; ".join(answer.get("notes", [])) or answer["backend"]
        return f"no GPUs on this host (backend {answer['backend']}: {notes})"
    procs = sum(len(g["processes"]) for g in gpus)
    top = max((g["memory_used_mib"] or 0) for g in gpus)
    noun = "GPU" if len(gpus) == 1 else "GPUs"
    return f"{len(gpus)} {noun} idle: {procs} processes, max {top} MiB used"


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _is_idle(gpus: list[Mapping[str, Any]], max_used_mib: int) -> bool:
    return all(not g["processes"] and (g["memory_used_mib"] or 0) <= max_used_mib for g in gpus)


def _gpu_data(gpus: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "index": g["index"],
            "uuid": g["uuid"],
            "memory_used_mib": g["memory_used_mib"],
            "processes": [p["pid"] for p in g["processes"]],
        }
        for g in gpus
    ]


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    rules = _rules(args)
    answer, gpus = _read_gpus(ctx, args["gpus"])
    table = ctx.conn.run_probe("procs", {})
    procs = table["processes"]
    holders = _holders(gpus, {p["pid"]: p for p in procs})
    problems = _holder_problems(holders, table, rules)
    if problems:
        raise TaskFailed("GPUs cannot be made idle:\n" + "\n".join(problems), {"problems": problems})
    max_used = int(args["max_used_mib"])
    targets, spared = _targets(holders, procs, table, rules, bool(args["vllm_tree"]))
    if not targets:
        invisible = _invisible_memory(gpus, max_used)
        if invisible:
            raise TaskFailed("GPUs cannot be made idle:\n" + "\n".join(invisible), {"problems": invisible})
        return Unchanged(
            _idle_summary(gpus, answer),
            {
                "gpus": _gpu_data(gpus),
                "killed_pids": [],
                "mib_freed": 0,
                "seconds_waited": 0.0,
                "backend": answer["backend"],
            },
        )
    lines = [t.line for t in targets]
    return Change(
        summary=f"terminate {_count(len(targets), 'process', 'processes')}: " + "; ".join(lines),
        diffs=(Diff("processes to signal (SIGTERM, then SIGKILL)", "\n".join(lines) + "\n", ""),),
        payload={
            "targets": [{"pid": t.pid, "start_time": t.start_time} for t in targets],
            "lines": lines,
            "spared": spared,
            "used_mib_before": sum((g["memory_used_mib"] or 0) for g in gpus),
        },
        fingerprint={f"process:{t.pid}": f"start_time {t.start_time}: {t.described}" for t in targets},
    )


def _wait_idle(ctx: TaskContext, args: Mapping[str, Any]) -> tuple[list[Mapping[str, Any]], float, bool]:
    started = time.monotonic()
    deadline = started + float(args["timeout_s"])
    max_used = int(args["max_used_mib"])
    while True:
        _, gpus = _read_gpus(ctx, args["gpus"])
        idle = _is_idle(gpus, max_used)
        if idle or time.monotonic() >= deadline:
            return gpus, time.monotonic() - started, idle
        ctx.progress(f"waiting for GPUs to read idle: {_busy_text(gpus, max_used)}")
        time.sleep(POLL_S)


def _busy_text(gpus: list[Mapping[str, Any]], max_used_mib: int) -> str:
    busy = [g for g in gpus if g["processes"] or (g["memory_used_mib"] or 0) > max_used_mib]
    return ", ".join(
        f"GPU {g['index']} {g['memory_used_mib']} MiB, pids {[p['pid'] for p in g['processes']]}" for g in busy
    )


def _still_busy(
    ctx: TaskContext, gpus: list[Mapping[str, Any]], signalled: Mapping[str, Any], max_used_mib: int
) -> list[str]:
    table = ctx.conn.run_probe("procs", {"pids": sorted({p["pid"] for g in gpus for p in g["processes"]})})
    holders = _holders(gpus, {p["pid"]: p for p in table["processes"]})
    notes = {s["pid"]: s["reason"] for s in signalled["skipped"]}
    notes.update({a["pid"]: a["reason"] for a in signalled["alive"]})
    lines = [_holder_line(h, notes.get(h.pid, _state_reason(h))) for h in holders]
    lines += _invisible_memory(gpus, max_used_mib)
    return lines


def _state_reason(h: Holder) -> str:
    if h.proc is None:
        return "no such process visible here"
    if h.proc["state"] == "D":
        return "uninterruptible sleep (D state)"
    return f"still running (state {h.proc['state']})"


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    payload = change.payload
    ctx.progress(f"signalling {len(payload['targets'])} processes")
    signalled = ctx.conn.run_probe(
        "signal_procs",
        {
            "targets": payload["targets"],
            "term_timeout_s": float(args["term_timeout_s"]),
            "kill_after_term": True,
        },
    )
    gpus, waited_s, idle = _wait_idle(ctx, args)
    ended = sorted(signalled["terminated"] + signalled["killed"])
    data = {
        "killed_pids": ended,
        "sigkilled_pids": sorted(signalled["killed"]),
        "already_gone_pids": sorted(signalled["gone"]),
        "skipped": signalled["skipped"],
        "spared": payload["spared"],
        "mib_freed": max(0, payload["used_mib_before"] - sum((g["memory_used_mib"] or 0) for g in gpus)),
        "seconds_waited": round(waited_s, 2),
        "gpus": _gpu_data(gpus),
    }
    if not idle:
        lines = _still_busy(ctx, gpus, signalled, int(args["max_used_mib"]))
        lines += [f"pid {s['pid']} not signalled: {s['reason']}" for s in signalled["skipped"]]
        raise TaskFailed(f"GPUs not idle after {waited_s:.1f}s:\n" + "\n".join(dict.fromkeys(lines)), data)
    return Result(
        changed=bool(ended),
        msg=(
            f"terminated {_count(len(ended), 'process', 'processes')} "
            f"({len(signalled['killed'])} needed SIGKILL), "
            f"freed {data['mib_freed']} MiB, waited {waited_s:.1f}s; "
            + _idle_summary(gpus, {"backend": "", "notes": []})
        ),
        diffs=change.diffs,
        data=data,
    )
