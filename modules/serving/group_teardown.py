"""Stop a serving group and prove it is gone, node by node.

Order: the head (API server, engine core, its workers) first, then the other ranks: a
headless rank does not notice the head leaving (it stays up; SIGTERM then takes it ~14 s
on the CPU build), while stopping a worker rank first makes the head fail requests.
Each node is then verified: no process of the recorded session left (the session is
proven ours by pid + start time; nothing else is signalled), the shared-memory segments
the group's processes mapped before the stop and nobody maps any more removed (the GPU
room's ``shm`` / ``shm_clean`` probes, by device + inode + ctime), and, where the node
has GPUs, their memory back to what it was before the launch.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from engine.module_api import ScopedConnection, TaskContext, TaskFailed
from modules.serving import session as sessions
from modules.serving.group import connection
from modules.serving.group_status import RankState

# what vLLM, torch and multiprocessing leave in /dev/shm when a process dies uncleanly
SHM_PATTERNS = ("psm_*", "sem.mp-*", "vllm_dist_*", "torch_*", "nccl-*", "VLLM_OBJECT_STORAGE_SHM_BUFFER_*")
SHM_DIR = "/dev/shm"
GPU_SLACK_MIB = 256
POLL_S = 1.0


def stop_ranks(ctx: TaskContext, states: Sequence[RankState], term_s: float) -> list[str]:
    """Head first, then the others; one line per rank that had processes."""
    done = []
    for state in sorted(states, key=lambda s: s.node.rank):
        if not state.server.session:
            continue
        ctx.progress(f"stopping {state.node.label} ({len(state.server.session)} processes)")
        answer = sessions.stop_session(connection(ctx, state.node), state.server.session, term_s)
        killed = len(answer["killed"])
        how = f"{killed} needed SIGKILL" if killed else "all on SIGTERM"
        done.append(f"{state.node.label}: {len(state.server.session)} process(es) ended, {how}")
    return done


def _shm_args() -> dict[str, Any]:
    return {"path": SHM_DIR, "patterns": list(SHM_PATTERNS), "min_age_s": 0.0, "owners": []}


def mapped_segments(conn: ScopedConnection, pids: Sequence[int]) -> list[dict[str, Any]]:
    """The /dev/shm segments these processes map now: proven ours by who maps them, so
    they can be removed after the processes are gone (only if then unused and unchanged)."""
    if not pids:
        return []
    seen = conn.run_probe("shm", _shm_args())
    ours = set(pids)
    return [
        {"name": e["name"], "dev": e["dev"], "ino": e["ino"], "ctime_ns": e["ctime_ns"]}
        for e in seen["entries"]
        if ours & set(e["in_use_by"])
    ]


def clean_shm(conn: ScopedConnection, segments: Sequence[Mapping[str, Any]]) -> list[str]:
    """Remove those of ``segments`` that no live process uses any more."""
    if not segments:
        return []
    done = conn.run_probe("shm_clean", {**_shm_args(), "names": [dict(s) for s in segments]})
    return [str(r["name"]) for r in done["removed"]]


def gpu_used(conn: ScopedConnection) -> dict[str, int]:
    """uuid -> MiB used, for the node's GPUs (empty without GPUs)."""
    answer = conn.run_probe("gpus", {})
    if answer.get("backend") == "error":
        raise TaskFailed(f"cannot read the GPUs: {'; '.join(answer.get('errors') or [])}")
    return {str(g["uuid"]): int(g["memory_used_mib"] or 0) for g in answer.get("gpus") or []}


def wait_gpu_baseline(conn: ScopedConnection, baseline: Mapping[str, int] | None, timeout_s: float) -> None:
    if not baseline:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        over = {u: m for u, m in gpu_used(conn).items() if m > int(baseline.get(u, 0)) + GPU_SLACK_MIB}
        if not over:
            return
        if time.monotonic() >= deadline:
            detail = ", ".join(f"{u}: {m} MiB (was {baseline.get(u, 0)})" for u, m in sorted(over.items()))
            raise TaskFailed(f"GPU memory not back to its level before the launch: {detail}")
        time.sleep(POLL_S)


def verify_gone(
    ctx: TaskContext, states: Sequence[RankState], segments: Mapping[str, Sequence[Mapping[str, Any]]], timeout_s: float
) -> list[str]:
    """After stop_ranks: per node, the shm segments its ranks mapped removed (``segments``,
    from ``mapped_segments`` before the stop) and GPU memory back to its launch level."""
    notes = []
    for state in states:
        conn = connection(ctx, state.node)
        removed = clean_shm(conn, segments.get(state.node.name, ()))
        if removed:
            notes.append(f"{state.node.name}: removed {len(removed)} leaked /dev/shm segment(s): {', '.join(removed)}")
        wait_gpu_baseline(conn, state.record.get("gpu_used_mib"), timeout_s)
    return notes
