"""Read-only: the live processes a state record names, by identity, never by session id.

A server rigger started is recorded (vllm_launch) with the ``pid`` and ``start_time``
(/proc/PID/stat field 22) of the process it started and the host's ``boot_id``; once it
runs, the module adds ``members`` [{pid, start_time}]: the processes it saw running under
it (vLLM's EngineCore and workers, Ray's daemons), so they stay identified once their parent
is gone and they are re-parented to init.

Args: ``record`` (the state file's content). Answer: ``processes`` (procs entries, by pid):
every live process whose pid AND start time match the record's leader or one of its
members, and their descendants (children started no earlier than their parent); nothing at
all when the record was written on another boot (start times count from boot).
``leader_alive``: the recorded leader is one of them. ``note``: why nothing is ours, if so.

A session id alone identifies nothing: once every process of rigger's server is gone the
kernel may hand the same id to anyone's new session, and that session's processes are
not descendants of anything recorded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("procs",)


def _anchors(record: dict[str, Any]) -> set[tuple[int, int]]:
    identities = [record, *(record.get("members") or [])]
    found = set()
    for item in identities:
        if isinstance(item, dict) and item.get("pid") is not None and item.get("start_time") is not None:
            found.add((int(item["pid"]), int(item["start_time"])))
    return found


def _tree(live: list[dict[str, Any]], anchors: set[tuple[int, int]]) -> dict[int, dict[str, Any]]:
    children: dict[int, list[dict[str, Any]]] = {}
    for proc in live:
        children.setdefault(int(proc["ppid"]), []).append(proc)
    ours: dict[int, dict[str, Any]] = {}
    pending = [p for p in live if (int(p["pid"]), int(p["start_time"])) in anchors]
    while pending:
        proc = pending.pop()
        if proc["pid"] in ours:
            continue
        ours[proc["pid"]] = proc
        pending.extend(c for c in children.get(int(proc["pid"]), []) if c["start_time"] >= proc["start_time"])
    return ours


def main(args: dict[str, Any]) -> dict[str, Any]:
    record = args.get("record") or {}
    answer: dict[str, Any] = {"processes": [], "leader_alive": False, "note": None}
    anchors = _anchors(record)
    if not anchors:
        answer["note"] = "the record names no process identity (pid and start time)"
        return answer
    table = call("procs", {})
    recorded_boot = record.get("boot_id")
    if recorded_boot and recorded_boot != table["boot_id"]:
        answer["note"] = f"recorded on another boot ({recorded_boot}): none of its processes can still run"
        return answer
    live = [p for p in table["processes"] if p["state"] not in ("Z", "X")]
    ours = _tree(live, anchors)
    answer["processes"] = [ours[pid] for pid in sorted(ours)]
    leader = (record.get("pid"), record.get("start_time"))
    answer["leader_alive"] = any((p["pid"], p["start_time"]) == leader for p in ours.values())
    return answer
