"""Keep one vLLM model served by several hosts as one gang (or stopped).

Run it once for the group (`run_once: true` in a play over the group's hosts): the task's
host is the head (rank 0: the API server), `nodes` lists the hosts in rank order (default:
the play's hosts). rigger reaches the other hosts itself, with their own inventory
variables. Layout: `tensor_parallel_size` GPUs per node, `pipeline_parallel_size` stages
across the nodes. Backend `mp` (vLLM's own multi-node mode, no Ray): every node runs
`vllm serve` with `--nnodes`, `--node-rank`, `--master-addr` (the head's address),
`--master-port`; the others `--headless`. Backend `ray`: only the head runs vLLM, with
`--distributed-executor-backend ray`, on a Ray cluster that is already up (the
`ray_cluster` module's job; checked with `ray status`, a missing node fails clearly).
Every node gets `VLLM_HOST_IP` (its `rigger_node_ip`, else `ansible_host`) and, when
known (`rigger_node_interface`), `GLOO_SOCKET_IFNAME` / `NCCL_SOCKET_IFNAME`.

One spec hash covers the whole group: every rank's argv and environment, the model's
config files on each node, the rank-to-host map, the vLLM version on each node (and Ray's
for `ray`); it is recorded in a state file on every node. A run is `ok` only when every
rank's recorded process is alive (pid + start time) with that hash, each node has all its
vLLM worker processes, and the head answers `/health` and lists the model. Anything else
(one rank dead, one node's config changed) tears the WHOLE group down - head first, then
the other ranks - and starts it again in rank order, then waits in stages (`/health`,
`/v1/models`, a completion) while watching every rank: a rank that dies fails the task
quoting the fatal line of its log, and what was started is stopped again.

Before anything is stopped: the model is present on every node and identical (config
files and ensure_model's manifest compared across nodes), the API port and the master
port are not held by a process rigger did not start. `stopped` ends every rank's session
(by recorded identity only), removes the /dev/shm segments the group's processes had mapped
if they outlived them, and waits for GPU memory to return to its level before the launch.

A python `launcher` (the vLLM CPU build, whose `vllm` script does not run) runs `vllm
serve`'s own entry point with `python -c` (see modules/serving/spec.py SERVE_CODE).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    ProbeError,
    Result,
    ScopedConnection,
    TaskContext,
    TaskFailed,
    Unchanged,
    content_digest,
)
from modules.checkpoints.manifest import MANIFEST_NAME
from modules.serving import group_status, group_teardown
from modules.serving import session as sessions
from modules.serving.group import GroupSpec, Layout, Node, connection, rank_spec, resolve_layout, versions_of
from modules.serving.group_status import RankState, base_url, paths
from modules.serving.packages import vllm_info
from modules.serving.readiness import FATAL_PATTERNS
from modules.serving.serve_vllm import SCHEMA as SINGLE_SCHEMA
from modules.serving.spec import CRASH_REPORT_ENV, config_paths, read_config_files, served_name
from modules.serving.specdiff import spec_diffs
from modules.serving.waiting import WaitTarget, Watch, wait_ready

SHARED_OPTIONS = (
    "name", "model", "served_model_name", "host", "port", "dtype", "kv_cache_dtype", "gpu_memory_utilization",
    "max_model_len", "trust_remote_code", "attention_backend", "extra_args", "env", "api_key_env", "launcher",
    "ready_timeout_s", "stop_timeout_s", "state_dir",
)  # fmt: skip
HOST_MAP = {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}, "default": {}}

# path arguments Ansible would expand on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("state_dir",)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "model"],
    "properties": {
        **{key: SINGLE_SCHEMA["properties"][key] for key in SHARED_OPTIONS},
        "head": {
            "type": ["string", "null"],
            "default": None,
            "description": "Inventory name of the head (rank 0, the API server); default: the task's host.",
        },
        "nodes": {
            "type": ["array", "null"],
            "items": {"type": "string", "minLength": 1},
            "default": None,
            "description": "Inventory names of the group's hosts in rank order (the head is rank 0 "
            "wherever it is listed); default: the play's hosts.",
        },
        "backend": {
            "type": "string",
            "enum": ["mp", "ray"],
            "default": "mp",
            "description": "`mp`: vLLM's own multi-node mode (every node runs vLLM, no Ray); "
            "`ray`: --distributed-executor-backend ray on a Ray cluster already up.",
        },
        "tensor_parallel_size": {
            "type": "integer",
            "minimum": 1,
            "default": 1,
            "description": "GPUs per node working on each layer (--tensor-parallel-size).",
        },
        "pipeline_parallel_size": {
            "type": "integer",
            "minimum": 1,
            "default": 1,
            "description": "Pipeline stages across the nodes (--pipeline-parallel-size), usually the node count.",
        },
        "master_port": {
            "type": "integer",
            "minimum": 1,
            "maximum": 65535,
            "default": 29501,
            "description": "Port of the torch distributed master on the head (mp backend, --master-port).",
        },
        "addresses": {
            **HOST_MAP,
            "description": "Node name -> the IP it uses for the group (VLLM_HOST_IP; the head's is "
            "--master-addr); default: the node's `rigger_node_ip`, else `ansible_host`.",
        },
        "interfaces": {
            **HOST_MAP,
            "description": "Node name -> network interface for Gloo/NCCL (GLOO_SOCKET_IFNAME, "
            "NCCL_SOCKET_IFNAME); default: the node's `rigger_node_interface`, else `interface`.",
        },
        "interface": {
            "type": ["string", "null"],
            "default": None,
            "description": "Interface for every node without its own (`lo` for nodes on one machine).",
        },
        "node_env": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            },
            "default": {},
            "description": "Node name -> more environment for that node's vLLM (after `env` and "
            "the node's `rigger_node_env` inventory variable).",
        },
        "ray_address": {
            "type": ["string", "null"],
            "default": None,
            "description": "The Ray cluster's GCS address (ray backend); default: HEAD_ADDRESS:6379.",
        },
        "state": {
            "type": "string",
            "enum": ["started", "stopped", "restarted", "inspected"],
            "default": "started",
            "description": "`started`: the whole group serves with this spec; `stopped`: no rank runs; "
            "`restarted`: tear down and start again now; `inspected`: change nothing, only report "
            "(`data.healthy`: every rank alive with this spec and the head serving; `data.problems`) "
            "so a play can skip its GPU clean-up while the group is healthy.",
        },
    },
}


def _info(conn: ScopedConnection, launcher: str) -> Mapping[str, Any] | None:
    try:
        return vllm_info(conn, launcher)
    except ProbeError as exc:
        return {"distribution": "vllm", "version": f"unreadable ({exc})"}


def build_group(ctx: TaskContext, args: Mapping[str, Any], layout: Layout) -> GroupSpec:
    ranks, infos = {}, {}
    for node in layout.launching:
        conn = connection(ctx, node)
        ranks[node.name] = rank_spec(args, layout, node, read_config_files(conn, str(args["model"])))
        infos[node.name] = _info(conn, str(args["launcher"]))
    return GroupSpec(layout, ranks, versions_of(layout, infos))


def _read(ctx: TaskContext, args: Mapping[str, Any], layout: Layout) -> tuple[RankState, ...]:
    return group_status.read_group(ctx, layout, args, served_name(args), group_status.api_key(args))


# ---- plan --------------------------------------------------------------------------------


def _plan_stop(states: Sequence[RankState]) -> Change | Unchanged:
    running = [s for s in states if s.server.session]
    if not running:
        return Unchanged(f"not running ({len(states)} node(s) checked)")
    diffs = tuple(
        Diff(f"{s.node.label} processes", "".join(sessions.describe_process(p) + "\n" for p in s.server.session), "")
        for s in running
    )
    count = sum(len(s.server.session) for s in running)
    return Change(
        summary=f"stop the vLLM group ({count} processes on {', '.join(s.node.name for s in running)})",
        diffs=diffs,
        fingerprint=_process_fingerprint(states),
    )


def _process_fingerprint(states: Sequence[RankState]) -> dict[str, str]:
    return {
        f"process:{s.node.name}:{p['pid']}": f"start_time {p.get('start_time')}"
        for s in states
        for p in s.server.session
    }


def _rank_diffs(states: Sequence[RankState], group: GroupSpec, found: Mapping[str, str]) -> tuple[Diff, ...]:
    wanted = group.group_hash()
    diffs: list[Diff] = []
    for state in states:
        if state.node.name not in found:
            continue
        diffs.append(Diff(state.node.label, found[state.node.name] + "\n", f"running group spec {wanted[:12]}\n"))
        if state.record.get("group_hash") != wanted:
            diffs += spec_diffs(state.server.record, group.ranks[state.node.name], f"{state.node.label}: ")
    return tuple(diffs)


def _model_problems(ctx: TaskContext, args: Mapping[str, Any], layout: Layout) -> list[str]:
    """The model missing on a node, or different between nodes (config files + manifest)."""
    model = str(args["model"])
    seen: dict[str, list[str]] = {}
    missing = []
    for node in layout.nodes:
        conn = connection(ctx, node)
        absent = sessions.model_missing(conn, model)
        if absent:
            missing.append(f"{node.name}: {absent}")
            continue
        seen.setdefault(_model_identity(conn, model), []).append(node.name)
    if len(seen) > 1:
        groups = "; ".join(f"{', '.join(names)}: {key}" for key, names in seen.items())
        missing.append(f"the model differs between nodes ({groups})")
    return missing


def _model_identity(conn: ScopedConnection, model: str) -> str:
    if not model.startswith("/"):
        return "hub id"
    files = {**config_paths(model), MANIFEST_NAME: f"{model}/{MANIFEST_NAME}"}
    return ", ".join(f"{name} {content_digest(conn.read_file(path))[:19]}" for name, path in sorted(files.items()))


def _port_problems(ctx: TaskContext, args: Mapping[str, Any], layout: Layout, states: Sequence[RankState]) -> None:
    """A port of the head held by a process that is not of our recorded session fails now."""
    head = next((s for s in states if s.node.rank == 0), None)
    ours = head.server.session_pids if head else ()
    conn = connection(ctx, layout.head)
    for port in _ports(args, layout):
        strict = head is None or head.server.record is None
        taken = sessions.foreign_listener(conn, port, ours, strict)
        if taken is not None:
            raise TaskFailed(f"serve_vllm_group: {sessions.port_taken_message(port, taken)}", {"port": port})


def _ports(args: Mapping[str, Any], layout: Layout) -> list[int]:
    """The head's ports: the API, and the torch distributed master (mp)."""
    return [int(args["port"])] + ([layout.master_port] if layout.backend == "mp" else [])


def quarantine_skips(args: Mapping[str, Any]) -> bool:
    """A host quarantined on the controller (a refused GPU health verdict) is not started
    on; inspecting or stopping a server there still runs (engine/run/quarantine.py)."""
    return bool(args["state"] in ("started", "restarted"))


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    layout = resolve_layout(ctx, args)
    states = _read(ctx, args, layout)
    if args["state"] == "stopped":
        return _plan_stop(states)
    group = build_group(ctx, args, layout)
    wanted = group.group_hash()
    found = dict((node.name, why) for node, why in group_status.problems(states, wanted, layout))
    if args["state"] == "inspected":
        problems = [f"{node.label}: {why}" for node, why in group_status.problems(states, wanted, layout)]
        data = {**_data(args, layout, wanted, states), "healthy": not found, "problems": problems}
        return Unchanged("; ".join(problems) or f"every rank alive, same spec ({wanted[:12]})", data)
    if not found and args["state"] == "started":
        return Unchanged(
            f"vLLM group of {len(layout.nodes)} nodes serving on {base_url(args)}, every rank alive, "
            f"same spec ({wanted[:12]})",
            _data(args, layout, wanted, states),
        )
    _port_problems(ctx, args, layout, states)
    reason = "restart the vLLM group (state: restarted)" if not found else _start_reason(layout, found)
    blockers = [*_model_problems(ctx, args, layout), *filter(None, [group_status.ray_problem(ctx, args, layout)])]
    return Change(
        # in check mode an earlier task may create the model or the Ray cluster; apply refuses
        summary=f"{reason}; now: {'; '.join(blockers)}" if blockers else reason,
        diffs=_rank_diffs(states, group, found),
        payload={"group_hash": wanted},
        fingerprint={"group_hash": wanted, **_process_fingerprint(states)},
    )


def _start_reason(layout: Layout, found: Mapping[str, str]) -> str:
    if len(found) == len(layout.launching) and all("nothing recorded" in why for why in found.values()):
        return f"start the vLLM group on {len(layout.nodes)} nodes"
    labels = {node.name: node.label for node in layout.nodes}
    return "restart the whole vLLM group: " + "; ".join(f"{labels[name]}: {why}" for name, why in found.items())


def _data(args: Mapping[str, Any], layout: Layout, group_hash: str, states: Sequence[RankState]) -> dict[str, Any]:
    return {
        "url": base_url(args),
        "served_model_name": served_name(args),
        "group_hash": group_hash,
        "backend": layout.backend,
        "nodes": [
            {
                "name": s.node.name,
                "rank": s.node.rank,
                "address": s.node.address,
                "pid": s.record.get("pid"),
                "log_path": s.record.get("log_path"),
                "workers": list(s.workers),
            }
            for s in states
        ],
    }


# ---- apply -------------------------------------------------------------------------------


def _stop(ctx: TaskContext, args: Mapping[str, Any], layout: Layout, states: Sequence[RankState]) -> list[str]:
    term_s = float(args["stop_timeout_s"])
    segments = {
        s.node.name: group_teardown.mapped_segments(connection(ctx, s.node), s.server.session_pids) for s in states
    }
    lines = group_teardown.stop_ranks(ctx, states, term_s)
    for port in _ports(args, layout):
        sessions.ensure_port_free(connection(ctx, layout.head), port, term_s)
    left = [s.describe() for s in _read(ctx, args, layout) if s.server.session]
    if left:
        raise TaskFailed("serve_vllm_group: processes of the group are still running: " + "; ".join(left))
    return lines + group_teardown.verify_gone(ctx, states, segments, term_s)


def _launch(ctx: TaskContext, args: Mapping[str, Any], group: GroupSpec, node: Node) -> Mapping[str, Any]:
    conn = connection(ctx, node)
    spec = group.ranks[node.name]
    ctx.progress(f"launching {node.label}: {shlex.join(spec.argv)[:300]}")
    where = paths(args, node)
    record = {
        "name": args["name"],
        "group_hash": group.group_hash(),
        "rank": node.rank,
        "node": node.name,
        "ranks": group.layout.rank_map(),
        "port": args["port"] if node.rank == 0 else None,
        "env": dict(spec.env),
        "secret_env_names": sorted(spec.secret_env),
        "config_sha256": dict(spec.config_digests),
        "gpu_used_mib": group_teardown.gpu_used(conn),
    }
    env = {**CRASH_REPORT_ENV, **spec.env, **spec.secret_env}
    return sessions.launch(conn, argv=spec.argv, env=env, log_path=where.log, state_path=where.state, record=record)


def _fatal_line(conn: ScopedConnection, log_path: str) -> str | None:
    answer = conn.run_probe("vllm_log_scan", {"log_path": log_path, "patterns": [p.pattern for p in FATAL_PATTERNS]})
    return str(answer["line"]).strip() if answer.get("line") else None


def _watch_ranks(ctx: TaskContext, args: Mapping[str, Any], layout: Layout) -> Watch:
    """Each poll: is every non-head rank's launcher still alive? If not, why (its log)."""
    others = [n for n in layout.launching if n.rank]

    def watch() -> tuple[str, str | None] | None:
        for node in others:
            conn = connection(ctx, node)
            server = sessions.read_status(conn, paths(args, node).state, "")
            if not server.leader_alive:
                log = str((server.record or {}).get("log_path") or paths(args, node).log)
                return f"{node.label} exited (log {log})", _fatal_line(conn, log)
        return None

    return watch


def _start(ctx: TaskContext, args: Mapping[str, Any], layout: Layout, group: GroupSpec) -> Result:
    head_record: Mapping[str, Any] = {}
    for node in layout.launching:  # head first: the master the other ranks connect to
        launched = _launch(ctx, args, group, node)
        head_record = launched if node.rank == 0 else head_record
    target = WaitTarget(
        pid=int(head_record["pid"]),
        start_time=head_record.get("start_time"),
        log_path=str(head_record["log_path"]),
        base_url=base_url(args),
        served_name=served_name(args),
        api_key=group_status.api_key(args),
        timeout_s=float(args["ready_timeout_s"]),
    )
    head = connection(ctx, layout.head)
    ready = wait_ready(head, target, ctx.progress, watch=_watch_ranks(ctx, args, layout))
    data = {
        **_data(args, layout, group.group_hash(), _read(ctx, args, layout)),
        "ready_s": round(ready.elapsed_s, 1),
        "phases": [{"phase": name, "at_s": at} for name, at in ready.phases],
    }
    if not ready.ready:
        _stop(ctx, args, layout, _read(ctx, args, layout))
        raise TaskFailed(
            ready.failure_message(target.log_path) + "\n(every rank that was started was stopped again)",
            {**data, "fatal_line": ready.fatal_line, "log_tail": list(ready.log_tail)},
        )
    for node in layout.launching:  # each rank's processes by identity, for a later stop
        conn, state = connection(ctx, node), paths(args, node).state
        sessions.record_members(conn, state, sessions.read_status(conn, state, ""))
    return Result(
        changed=True,
        msg=f"vLLM group of {len(layout.nodes)} nodes ready in {ready.elapsed_s:.0f}s on {base_url(args)}",
        data=data,
    )


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    layout = resolve_layout(ctx, args)
    states = _read(ctx, args, layout)
    if args["state"] == "stopped":
        lines = _stop(ctx, args, layout, states)
        return Result(changed=True, msg="stopped the vLLM group: " + "; ".join(lines), diffs=change.diffs)
    group = build_group(ctx, args, layout)  # everything that can fail, before anything is stopped
    blockers = [*_model_problems(ctx, args, layout), *filter(None, [group_status.ray_problem(ctx, args, layout)])]
    if blockers:
        raise TaskFailed("serve_vllm_group: " + "; ".join(blockers))
    _port_problems(ctx, args, layout, states)
    stopped = _stop(ctx, args, layout, states)
    result = _start(ctx, args, layout, group)
    return Result(
        changed=True,
        msg=f"{change.summary}: {result.msg}" + (f" (stopped first: {'; '.join(stopped)})" if stopped else ""),
        diffs=change.diffs,
        data=result.data,
    )
