"""Remove leaked shared-memory segments from /dev/shm that no live process uses.

Only a tmpfs is cleaned (checked on the host, on the resolved directory): any other
`path` fails the task. Nothing outside the directory is touched: subdirectories are not
entered and symlinks are not followed.

Candidates are entries directly in `path` whose name matches one of `patterns` (shell
globs; by default CPython's `psm_` + 8 hex, multiprocessing's `sem.mp-*`, NCCL's
`nccl-*`, PyTorch's `torch_*` and vLLM's `vllm_offload_*` / `VLLM_OBJECT_STORAGE_SHM_BUFFER_*`).
A segment still open or mapped by any live process (checked through /proc/*/fd and
/proc/*/maps by device and inode) is never removed. Where rigger cannot see every process
(it runs in a PID namespace that is not the host's, as in a container, or /proc shows
another one) no segment is proven unused, so none is removed: each is kept with that
reason. Nor is anything that is not a regular
file (symlinks are not followed), nor anything younger than `min_age_s`, nor, with
`owners` set, anything owned by another user. Run it after `ensure_gpus_idle`: dead
processes release their mappings. Never run it while a vLLM/NCCL job is starting: a
removed name cannot be attached to later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Diff, ProbeError, Removes, Result, TaskContext, TaskFailed, Unchanged

DEFAULT_PATTERNS = [
    "psm_" + "[0-9a-f]" * 8,
    "sem.mp-*",
    "nccl-*",
    "torch_*",
    "vllm_offload_*",
    "VLLM_OBJECT_STORAGE_SHM_BUFFER_*",
]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "path": {
            "description": "Absolute path of the shared-memory directory to clean.",
            "type": "string",
            "pattern": "^/",
            "default": "/dev/shm",
        },
        "patterns": {
            "description": "Shell globs for segment names that may be removed (replaces the defaults).",
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "default": DEFAULT_PATTERNS,
        },
        "min_age_s": {
            "description": "Leave segments modified less than this many seconds ago "
            "(a process may have created one and not mapped it yet).",
            "type": "number",
            "minimum": 0,
            "default": 60,
        },
        "owners": {
            "description": "Only remove segments owned by these users (names or uids); empty means any owner.",
            "type": "array",
            "items": {"type": ["string", "integer"]},
            "default": [],
        },
        "min_free_mib": {
            "description": "Fail if the directory's filesystem has less free space than "
            "this after cleaning (vLLM needs hundreds of MiB); 0 disables.",
            "type": "integer",
            "minimum": 0,
            "default": 0,
        },
    },
}


def _probe_args(args: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "path": args["path"],
        "patterns": list(args["patterns"]),
        "min_age_s": float(args["min_age_s"]),
        "owners": [str(o) for o in args["owners"]],
    }


def _inspect(ctx: TaskContext, args: Mapping[str, Any]) -> Mapping[str, Any]:
    path = args["path"]
    if not path.startswith("/"):
        raise TaskFailed(f"path must be absolute: {path!r}")
    try:
        return ctx.conn.run_probe("shm", _probe_args(args))
    except ProbeError as exc:  # e.g. the directory does not exist, or is not a tmpfs
        reason = str(exc).removeprefix("probe shm failed: ").removeprefix("ValueError: ")
        raise TaskFailed(f"cannot inspect {path}: {reason}") from None


def _kept(entries: list[Mapping[str, Any]]) -> list[str]:
    return [f"{e['name']}: {e['reason']}" for e in entries if e["reason"] and e["reason"] != "does not match patterns"]


def _check_free(path: str, free_mib: int, args: Mapping[str, Any], kept: list[str]) -> None:
    need = int(args["min_free_mib"])
    if need and free_mib < need:
        detail = ("\nleft in place: " + "; ".join(kept)) if kept else ""
        raise TaskFailed(
            f"{path} has {free_mib} MiB free, need at least {need} MiB{detail}", {"free_mib": free_mib, "kept": kept}
        )


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    seen = _inspect(ctx, args)
    path = seen["path"] if seen["resolved"] == seen["path"] else f"{seen['path']} ({seen['resolved']})"
    entries = list(seen["entries"])
    kept = _kept(entries)
    leaked = [e for e in entries if e["candidate"]]
    if not leaked:
        _check_free(path, seen["free_mib"], args, kept)
        extra = f" ({len(kept)} left: {'; '.join(kept)})" if kept else ""
        return Unchanged(
            f"no leaked segments in {path}{extra}; {seen['free_mib']} MiB free",
            {
                "removed": [],
                "bytes_freed": 0,
                "kept": kept,
                "free_mib": seen["free_mib"],
                "uninspected_pids": [u["pid"] for u in seen["unreadable_pids"]],
            },
        )
    total = sum(e["size"] for e in leaked)
    names = [e["name"] for e in leaked]
    return Change(
        summary=f"remove {len(leaked)} leaked segments from {path} ({total} bytes): " + ", ".join(names),
        diffs=(Diff(f"{path} leaked segments", "\n".join(names) + "\n", ""),),
        payload={
            "names": [{"name": e["name"], "dev": e["dev"], "ino": e["ino"], "ctime_ns": e["ctime_ns"]} for e in leaked],
            "kept": kept,
        },
        fingerprint={
            f"segment:{path}/{e['name']}": f"dev {e['dev']} ino {e['ino']} ctime_ns {e['ctime_ns']} size {e['size']}"
            for e in leaked
        },
        effects=tuple(Removes(f"{seen['path']}/{name}") for name in names),
    )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    done = ctx.conn.run_probe("shm_clean", {**_probe_args(args), "names": list(change.payload["names"])})
    path = args["path"]
    removed = [r["name"] for r in done["removed"]]
    freed = sum(int(r["bytes"]) for r in done["removed"])
    kept = list(change.payload["kept"]) + [f"{s['name']}: {s['reason']}" for s in done["skipped"]]
    _check_free(path, done["free_mib"], args, kept)
    return Result(
        changed=bool(removed),
        msg=f"removed {len(removed)} segments from {path}, freed {freed} bytes; {done['free_mib']} MiB free",
        diffs=change.diffs,
        data={
            "removed": removed,
            "bytes_freed": freed,
            "skipped": done["skipped"],
            "kept": kept,
            "free_mib": done["free_mib"],
        },
    )
