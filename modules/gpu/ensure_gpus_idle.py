"""Make sure no compute process runs on the selected GPUs and their memory reads idle.

Reads the GPUs through NVML (nvidia-ml-py) or nvidia-smi on the host. A GPU holder is a
process the driver reports AND that has an NVIDIA device open (/proc/PID/fd ->
/dev/nvidia*), checked again on the host just before each signal. Holders are terminated
(SIGTERM, then SIGKILL after `term_timeout_s`) together with their vLLM relatives: the
vLLM-shaped processes (API server, `VLLM::EngineCore`, `VLLM::Worker*`, their
multiprocessing resource tracker) tied to a holder by ancestry: its vLLM-shaped ancestors
and their vLLM-shaped descendants. A session is never a tie: another server orphaned in
the same session (on another GPU) is not a relative, and a shell, an editor or a
`tail -f vllm.log` in the same session is never touched. Processes matching `kill_patterns` go too, with their vLLM
relatives. Then it waits until the GPUs read idle or `timeout_s` passes.

Never signals PID 1 nor rigger's own processes on the host (the remote interpreter, the
run-lock holder, their ancestors), whatever the patterns, nor processes matching
`protect_patterns`; with `only_patterns` set, a holder that does not match is refused.
Another user's process that is not vLLM-shaped fails the task unless
`signal_other_users` is true. The start time of every process is checked again before
each signal, so a reused pid is never hit. Fails, naming GPU, pid, user, command and MiB,
when the GPUs cannot be made idle: a refused holder, a pid with no NVIDIA device open here
(a process of another PID namespace), a zombie or a process stuck in uninterruptible
sleep, memory held with no process visible (another container), memory the driver does
not report (`[N/A]`), or a driver that cannot be read (its error quoted).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import Change, Diff, Result, Stops, TaskContext, TaskFailed, Unchanged, UserRegex
from modules.gpu.holders import family, vllm_shaped

PATTERN_LIST = {"type": "array", "items": {"type": "string", "minLength": 1}}

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "gpus": {
            "description": "Which GPUs must be idle: `all`, or a list of indexes and/or UUIDs.",
            "default": "all",
            "type": ["string", "array"],
            # if/then/else rather than oneOf: a bad item is then reported at its own line
            "if": {"type": "string"},
            "then": {"const": "all"},
            "else": {"minItems": 1, "items": {"type": ["integer", "string"], "minimum": 0, "minLength": 1}},
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
            "type": "array",
            "items": {"type": "string", "minLength": 1, "killPattern": True},
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
            "description": "Also terminate a holder's vLLM relatives: vLLM-shaped processes "
            "(API server, EngineCore, workers, multiprocessing helpers) tied to it by ancestry.",
            "type": "boolean",
            "default": True,
        },
        "signal_other_users": {
            "description": "Also end processes of other users that are not vLLM-shaped "
            "(by default such a holder fails the task, naming pid, user and command).",
            "type": "boolean",
            "default": False,
        },
    },
}

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
    kill: tuple[UserRegex, ...]
    protect: tuple[UserRegex, ...]
    only: tuple[UserRegex, ...]
    other_users: bool = False


def _compile(patterns: Iterable[str], arg: str) -> tuple[UserRegex, ...]:
    return tuple(UserRegex(p, arg) for p in patterns)


def _matches(patterns: Sequence[UserRegex], proc: Mapping[str, Any], unknown: bool = False) -> bool:
    """Does a pattern find the process's name or command line? Searched bounded
    (UserRegex): a command line over the bound whose head does not match counts as
    ``unknown`` (True for protect_patterns, False for kill_patterns and only_patterns)."""
    for pattern in patterns:
        for text in (proc["name"], proc["cmdline"]):
            found = pattern.search(text)
            if found or (found is None and unknown):
                return True
    return False


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
    if answer.get("errors"):
        raise TaskFailed("cannot read the GPUs on this host: " + "; ".join(answer["errors"]))
    if answer["backend"] == "none" and wanted != "all":
        notes = "; ".join(answer.get("notes", []))
        raise TaskFailed(f"no NVIDIA GPUs readable on this host ({notes})")
    return answer, _select(answer, wanted)


def _unknown_memory(gpus: Iterable[Mapping[str, Any]]) -> list[str]:
    return [
        f"GPU {g['index']} ({g['uuid']}): memory use unknown (the driver reports [N/A]): cannot be judged idle"
        for g in gpus
        if g["memory_used_mib"] is None
    ]


def _with_devices(ctx: TaskContext, procs: list[Mapping[str, Any]], pids: Iterable[int]) -> dict[int, Any]:
    """The process table by pid, the given pids with the NVIDIA devices they have open."""
    table = {p["pid"]: p for p in procs}
    wanted = sorted(set(pids) & set(table))
    if wanted:
        for proc in ctx.conn.run_probe("procs", {"pids": wanted, "gpu_devices": True})["processes"]:
            table[proc["pid"]] = proc
    return table


def _holders(gpus: Iterable[Mapping[str, Any]], table: Mapping[int, Any]) -> list[Holder]:
    return [
        Holder(gpu=g, pid=p["pid"], used_mib=p.get("used_mib"), proc=table.get(p["pid"]))
        for g in gpus
        for p in g["processes"]
    ]


# ---- deciding what to signal ----------------------------------------------------------


OTHER_USER = "not vLLM-shaped and owned by another user"


def _refusal(proc: Mapping[str, Any], own: Mapping[str, Any], rules: Rules) -> str | None:
    pid = proc["pid"]
    if pid == 1:
        return "never signals PID 1 (init)"
    why = own["rigger_pids"].get(str(pid))
    if why:
        return f"never signals {why}"
    if _matches(rules.protect, proc, unknown=True):
        return "matches protect_patterns"
    if rules.only and not _matches(rules.only, proc):
        return "does not match only_patterns"
    if own["self_uid"] != 0 and proc["uid"] != own["self_uid"]:
        return f"owned by {proc['user']}, and rigger runs as uid {own['self_uid']} (not root)"
    if proc["uid"] != own["self_uid"] and not rules.other_users and not vllm_shaped(proc):
        return f"{OTHER_USER} ({proc['user']}): set signal_other_users to end it"
    if proc["state"] == "Z":
        return f"zombie (defunct): its parent {proc['ppid']} has not reaped it"
    return None


def _extras(
    holders: list[Holder], procs: list[Mapping[str, Any]], own: Mapping[str, Any], rules: Rules, vllm_tree: bool
) -> set[int]:
    """Processes to terminate besides the holders: kill_patterns matches and, with
    vllm_tree, the vLLM families (modules/gpu/holders.py) of the holders and of the
    matches. A refused process seeds no family: the children of PID 1, of rigger's own
    processes or of a protected process are never pulled in."""
    held = {h.pid for h in holders if h.proc}
    matched = [p for p in procs if rules.kill and _matches(rules.kill, p)]
    seeds = [p for p in procs if p["pid"] in held] + [p for p in matched if _refusal(p, own, rules) is None]
    extra = {p["pid"] for p in matched}
    if vllm_tree:
        for seed in seeds:
            extra |= family(seed, procs)
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


NO_DEVICE = (
    "reported by the driver but has no NVIDIA device open here (/proc/PID/fd -> /dev/nvidia*): "
    "a process of another PID namespace (container) with the same pid, never signalled"
)


def _device_problem(h: Holder) -> str | None:
    """None when the holder has this GPU's device node open (any /dev/nvidiaN when the
    driver does not give the GPU's node)."""
    opened = h.proc.get("gpu_devices") if h.proc else None
    if not opened:
        return NO_DEVICE
    node = h.gpu.get("device_node")
    if node and node not in opened:
        return f"has {', '.join(opened)} open, not {node} (GPU {h.gpu['index']}): not proven to hold this GPU"
    return None


def _holder_problems(holders: list[Holder], own: Mapping[str, Any], rules: Rules) -> list[str]:
    problems = []
    for h in holders:
        if h.proc is None:
            problems.append(_holder_line(h, "no such process visible here (another container or PID namespace?)"))
            continue
        why = _refusal(h.proc, own, rules) or _device_problem(h)
        if why:
            problems.append(_holder_line(h, why))
    return problems


def _refused_matches(procs: list[Mapping[str, Any]], own: Mapping[str, Any], rules: Rules) -> list[str]:
    """kill_patterns matches that may not be ended because another user owns them."""
    matched = [p for p in procs if rules.kill and _matches(rules.kill, p)]
    return [
        f"{_describe(p['pid'], p)}: matches kill_patterns but is {why}"
        for p in matched
        if (why := _refusal(p, own, rules)) and why.startswith(OTHER_USER)
    ]


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
    gpu_holder: bool
    described: str
    devices: tuple[str, ...] = ()  # the selected GPUs' /dev/nvidiaN it holds (empty: unknown)


def _targets(
    holders: list[Holder], procs: list[Mapping[str, Any]], own: Mapping[str, Any], rules: Rules, vllm_tree: bool
) -> tuple[list[Target], list[str]]:
    by_pid = {p["pid"]: p for p in procs}
    held: dict[int, int] = {}
    nodes: dict[int, set[str | None]] = {}
    for h in holders:
        held[h.pid] = held.get(h.pid, 0) + (h.used_mib or 0)
        nodes.setdefault(h.pid, set()).add(h.gpu.get("device_node"))
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
        known = nodes.get(pid, {None})  # a node the driver did not give: any /dev/nvidiaN proves it
        devices = () if None in known else tuple(sorted(str(n) for n in known))
        targets.append(Target(pid, proc["start_time"], f"{described}{mib}", pid in held, described, devices))
    return targets, spared


# ---- plan / apply ---------------------------------------------------------------------


def _rules(args: Mapping[str, Any]) -> Rules:
    return Rules(
        kill=_compile(args["kill_patterns"], "kill_patterns"),
        protect=_compile(args["protect_patterns"], "protect_patterns"),
        only=_compile(args["only_patterns"], "only_patterns"),
        other_users=bool(args["signal_other_users"]),
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
    return all(
        not g["processes"] and g["memory_used_mib"] is not None and g["memory_used_mib"] <= max_used_mib for g in gpus
    )


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
    table = ctx.conn.run_probe("procs", {"own": True})
    procs = table["processes"]
    reported = [p["pid"] for g in gpus for p in g["processes"]]
    holders = _holders(gpus, _with_devices(ctx, procs, reported))
    problems = _unknown_memory(gpus) + _holder_problems(holders, table, rules) + _refused_matches(procs, table, rules)
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
            "targets": [
                {"pid": t.pid, "start_time": t.start_time, "gpu_holder": t.gpu_holder, "devices": list(t.devices)}
                for t in targets
            ],
            "lines": lines,
            "spared": spared,
            "used_mib_before": sum((g["memory_used_mib"] or 0) for g in gpus),
        },
        fingerprint={f"process:{t.pid}": f"start_time {t.start_time}: {t.described}" for t in targets},
        effects=tuple(Stops(t.pid, t.start_time, t.line) for t in targets),
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
