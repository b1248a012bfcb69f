"""Keep a Ray cluster over a group of hosts running (or stopped), started by rigger.

Run it once for the group (`run_once: true` in a play over the group's hosts): the task's
host is the head (or `head`), the play's hosts are the nodes (or `nodes`); rigger reaches
the others as `delegate_to` does. Each node's address is its `rigger_node_ip` (else its
`ansible_host`; `addresses` overrides), and must be an IP address; its interface
`rigger_node_interface` (`interfaces` overrides) becomes `GLOO_SOCKET_IFNAME` and
`NCCL_SOCKET_IFNAME`, and `VLLM_HOST_IP` is the node's address. Ray registers a node
under another address when it thinks better of it (127.0.0.1 becomes the host's routable
address): the task then warns. Ray's token authentication is the same on every node:
`auth_token_path`, else off (`RAY_AUTH_MODE=disabled`), never left to whichever node has
a `~/.ray/auth_token`.

`started`: every node runs `ray start --block` (head first, then the workers, each in its
own session with its log and a state file on the node), then rigger waits until the
head's GCS lists every node alive with the declared resources (`num_cpus`, `num_gpus`,
and the totals `min_cpus`, `min_gpus`), or fails at `wait_timeout_s` naming what is
missing. A node is this cluster's when its state file, its running `ray start` and raylet
(pid and start time) and its node id in the head's view all agree; a node that differs
is restarted, and a head that differs restarts the whole cluster (workers belong to the
head's GCS). A second run on a healthy cluster changes nothing on any host.

Another Ray node (a raylet or GCS rigger did not start for this cluster) on a node's
address, or on the head's port, fails the task naming it; rigger never stops it.

`stopped`: workers first, then the head. A node's processes are stopped with
`ray stop --force` only when every Ray process on its host is that node's (it would stop
them all); otherwise rigger signals the node's recorded processes only (raylet first,
SIGTERM, then SIGKILL). Then it checks that nothing of the node runs, the head's port is
free, and removes the socket files Ray leaves behind; anything left is reported.
Ray does not stop programs its actors started in their own sessions (vLLM servers): stop
those first.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from engine.module_api import Change, Diff, Result, ScopedConnection, TaskContext, TaskFailed, Unchanged
from modules.serving import ray_actions, ray_status
from modules.serving.ray_nodes import ClusterSpec, cluster_spec
from modules.serving.ray_status import NO_VIEW, ClusterView, NodeStatus
from modules.serving.session import describe_process

_NODE_MAP = {"type": "object", "default": {}}
_COUNT = {"type": ["integer", "null"], "minimum": 0, "default": None}

# path arguments Ansible would expand on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("state_dir",)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "python"],
    "properties": {
        "name": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
            "description": "Name of the cluster; names each node's state and log files.",
        },
        "python": {
            "type": "string",
            "minLength": 1,
            "description": "The python on every node that has Ray installed (e.g. the vLLM venv's "
            "`bin/python`); Ray runs as `PYTHON -m ray.scripts.scripts`.",
        },
        "head": {
            "type": ["string", "null"],
            "default": None,
            "description": "Inventory name of the head node; default: the task's host.",
        },
        "nodes": {
            "type": ["array", "null"],
            "items": {"type": "string"},
            "default": None,
            "description": "Inventory names of every node (head included); default: the play's hosts.",
        },
        "addresses": {
            **_NODE_MAP,
            "additionalProperties": {"type": "string"},
            "description": "Node name -> IP address, overriding its rigger_node_ip / ansible_host.",
        },
        "interfaces": {
            **_NODE_MAP,
            "additionalProperties": {"type": "string"},
            "description": "Node name -> network interface (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME), "
            "overriding its rigger_node_interface.",
        },
        "port": {
            "type": "integer",
            "minimum": 1,
            "maximum": 65535,
            "default": 6379,
            "description": "The head's GCS port (--port).",
        },
        "num_cpus": {**_COUNT, "description": "CPUs each node offers (--num-cpus); default: Ray's count."},
        "num_gpus": {**_COUNT, "description": "GPUs each node offers (--num-gpus); default: Ray's count."},
        "object_store_memory": {
            **_COUNT,
            "description": "Bytes of each node's object store (--object-store-memory).",
        },
        "min_cpus": {**_COUNT, "description": "CPUs the whole cluster must show before the task is done."},
        "min_gpus": {**_COUNT, "description": "GPUs the whole cluster must show before the task is done."},
        "temp_dir": {
            "type": ["string", "null"],
            "default": None,
            "description": "Ray's temp dir on the head (--temp-dir; workers use the head's); "
            "default /tmp/rigger-ray/NAME, so clusters never share /tmp/ray.",
        },
        "include_dashboard": {
            "type": "boolean",
            "default": False,
            "description": "Start Ray's dashboard on the head (--include-dashboard).",
        },
        "extra_args": {
            "type": "array",
            "items": {"type": ["string", "number"]},
            "default": [],
            "description": "More `ray start` flags, appended on every node.",
        },
        "env": {
            "type": "object",
            "additionalProperties": {"type": ["string", "number", "boolean"]},
            "default": {},
            "description": "Environment for every node's Ray (and the workers it starts).",
        },
        "node_env": {
            **_NODE_MAP,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": {"type": ["string", "number", "boolean"]},
            },
            "description": "Node name -> more environment for that node only.",
        },
        "auth_token_path": {
            "type": ["string", "null"],
            "default": None,
            "description": "A file holding the cluster's token, on every node (Ray's token "
            "authentication: RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH); rigger's own queries use it "
            "too. Default: authentication off on every node (RAY_AUTH_MODE=disabled), never left "
            "to a ~/.ray/auth_token one node happens to have.",
        },
        "state": {
            "type": "string",
            "enum": ["started", "stopped"],
            "default": "started",
            "description": "`started`: every node up in one cluster; `stopped`: no node of it running.",
        },
        "wait_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 180,
            "description": "Seconds to wait for the nodes to start and show in the head's view.",
        },
        "stop_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 30,
            "description": "Seconds between SIGTERM and SIGKILL, and to wait for a node to be gone.",
        },
        "state_dir": {
            "type": "string",
            "default": "~/.local/state/rigger/ray",
            "description": "Directory on each node for NAME-NODE.json (its state file) and NAME-NODE.log.",
        },
    },
}


def _read(
    ctx: TaskContext, args: Mapping[str, Any]
) -> tuple[ClusterSpec, dict[str, ScopedConnection], tuple[NodeStatus, ...]]:
    cluster = cluster_spec(ctx, args)
    conns = ray_status.connections(ctx, cluster)
    return cluster, conns, ray_status.read_nodes(conns, args["python"], cluster, int(args["port"]))


def _view(
    conns: Mapping[str, ScopedConnection], cluster: ClusterSpec, statuses: Sequence[NodeStatus], python: str
) -> ClusterView:
    return ray_status.read_view(conns[cluster.head.name], python, cluster) if statuses[0].running else NO_VIEW


def _problems(
    statuses: Sequence[NodeStatus], cluster: ClusterSpec, view: ClusterView, args: Mapping[str, Any]
) -> dict[str, str]:
    found = {s.spec.name: ray_status.node_problem(s, cluster, view, args) for s in statuses}
    return {name: problem for name, problem in found.items() if problem}


def _fingerprint(statuses: Sequence[NodeStatus]) -> dict[str, str]:
    found = {f"spec:{s.spec.name}": s.spec.spec_hash() for s in statuses}
    for status in statuses:
        for proc in status.session:
            found[f"process:{status.spec.name}:{proc['pid']}"] = (
                f"start_time {proc['start_time']}: {describe_process(proc)}"
            )
    return found


def _records(statuses: Sequence[NodeStatus]) -> dict[str, Mapping[str, Any]]:
    return {s.spec.name: dict(s.record or {}) for s in statuses}


def _data(cluster: ClusterSpec, records: Mapping[str, Mapping[str, Any]], view: ClusterView) -> dict[str, Any]:
    return {
        "name": cluster.name,
        "gcs_address": cluster.gcs_address,
        "temp_dir": cluster.temp_dir,
        "nodes": [
            {
                "name": node.name,
                "ip": node.ip,
                "head": node.is_head,
                "node_id": records[node.name].get("node_id"),
                "registered_address": records[node.name].get("registered_address"),
                "pid": records[node.name].get("pid"),
                "state_path": node.state_path,
                "log_path": node.log_path,
            }
            for node in cluster.nodes
        ],
        "cpus": view.total("CPU"),
        "gpus": view.total("GPU"),
    }


def _plan_stop(cluster: ClusterSpec, statuses: Sequence[NodeStatus]) -> Change | Unchanged:
    running = [s for s in reversed(statuses) if s.running]
    if not running:
        return Unchanged(
            f"Ray cluster {cluster.name}: not running on any node", _data(cluster, _records(statuses), NO_VIEW)
        )
    diffs = tuple(
        Diff(f"ray node {s.spec.name}", "".join(describe_process(p) + "\n" for p in s.session), "") for s in running
    )
    return Change(
        summary=f"stop Ray cluster {cluster.name} on {', '.join(s.spec.name for s in running)}",
        diffs=diffs,
        fingerprint=_fingerprint(statuses),
    )


def _to_start(cluster: ClusterSpec, problems: Mapping[str, str]) -> list[str]:
    """A head that differs takes every worker with it: they belong to its GCS."""
    if cluster.head.name in problems:
        return [node.name for node in cluster.nodes]
    return [node.name for node in cluster.nodes if node.name in problems]


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    cluster, conns, statuses = _read(ctx, args)
    if args["state"] == "stopped":
        return _plan_stop(cluster, statuses)
    ray_status.refuse_foreign(statuses, int(args["port"]))
    view = _view(conns, cluster, statuses, args["python"])
    problems = _problems(statuses, cluster, view, args)
    if not problems:
        short = ray_status.totals_problem(view, args)
        if short:
            raise TaskFailed(f"ray_cluster: every node of {cluster.name} runs, but {short}")
        return Unchanged(
            f"Ray cluster {cluster.name}: {len(statuses)} nodes alive at {cluster.gcs_address} "
            f"({view.total('CPU'):g} CPU, {view.total('GPU'):g} GPU)",
            _data(cluster, _records(statuses), view),
            warnings=_address_warnings(cluster, _records(statuses)),
        )
    starting = _to_start(cluster, problems)
    why = "; ".join(f"{name}: {problems.get(name, 'restarts with its head')}" for name in starting)
    by_name = {s.spec.name: s for s in statuses}
    return Change(
        summary=f"start Ray cluster {cluster.name} on {', '.join(starting)} ({why})",
        diffs=tuple(
            Diff(
                f"ray node {name}",
                ray_status.describe_node(by_name[name], view),
                ray_status.wanted_node(by_name[name].spec),
            )
            for name in starting
        ),
        payload={"start": starting},
        fingerprint=_fingerprint(statuses),
    )


def _address_warnings(cluster: ClusterSpec, records: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """A node Ray registered under another address than the one it was given (and that
    VLLM_HOST_IP names)."""
    return tuple(
        f"{node.name}: Ray registered the node as {records[node.name]['registered_address']}, not {node.ip} "
        f"(VLLM_HOST_IP={node.ip}); set rigger_node_ip to the address the other nodes reach it on"
        for node in cluster.nodes
        if records[node.name].get("registered_address") not in (None, node.ip)
    )


def _stop_nodes(
    conns: Mapping[str, ScopedConnection], args: Mapping[str, Any], statuses: Sequence[NodeStatus], progress: Any
) -> tuple[list[str], list[str]]:
    """Stop these nodes, workers first and the head last; (what was done, what remains)."""
    done: list[str] = []
    left: list[str] = []
    term_s = float(args["stop_timeout_s"])
    for status in sorted(statuses, key=lambda s: s.spec.is_head):
        conn = conns[status.spec.name]
        if not status.running:  # died on its own: only its socket files are left
            left += ray_actions.remove_sockets(conn, status)
            continue
        progress(f"stopping the Ray node on {status.spec.name}")
        done.append(ray_actions.stop_node(conn, args["python"], status, term_s))
        deadline = time.monotonic() + term_s
        left += ray_actions.verify_stopped(conn, args["python"], status, int(args["port"]), deadline)
    return done, left


def _foreign_notes(statuses: Sequence[NodeStatus]) -> list[str]:
    ours = {int(p["pid"]) for s in statuses for p in s.session}
    return [
        f"{s.spec.name}: left alone (rigger did not start it): {describe_process(p)}"
        for s in statuses
        for p in ray_status.foreign_daemons(s, ours)
    ]


def _apply_stop(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    cluster, conns, statuses = _read(ctx, args)
    done, left = _stop_nodes(conns, args, statuses, ctx.progress)
    if left:
        raise TaskFailed(f"ray_cluster: {cluster.name} did not stop cleanly:\n  " + "\n  ".join(left), {"left": left})
    return Result(
        changed=bool(done),
        msg=f"Ray cluster {cluster.name} stopped: " + "; ".join(done),
        diffs=change.diffs,
        data=_data(cluster, _records(statuses), NO_VIEW),
        warnings=tuple(_foreign_notes(statuses)),
    )


def _ready(cluster: ClusterSpec, records: Mapping[str, Mapping[str, Any]], args: Mapping[str, Any]) -> Any:
    def missing(view: ClusterView) -> str | None:
        gone = []
        for node in cluster.nodes:
            alive = view.alive(str(records[node.name].get("node_id")))
            problem = "not alive" if alive is None else ray_status.resources_problem(alive, args)
            if problem:
                gone.append(f"{node.name} ({node.ip}): {problem}")
        return "; ".join(gone) or ray_status.totals_problem(view, args)

    return missing


def _start(
    ctx: TaskContext,
    conns: Mapping[str, ScopedConnection],
    cluster: ClusterSpec,
    args: Mapping[str, Any],
    starting: Sequence[str],
    deadline: float,
) -> dict[str, Mapping[str, Any]]:
    """The head first (workers join its GCS), then every worker at once; their records."""
    python, port, head = args["python"], int(args["port"]), conns[cluster.head.name]
    records: dict[str, Mapping[str, Any]] = {}
    for group in ([cluster.head], list(cluster.workers)):
        launching = [node for node in group if node.name in starting]
        for node in launching:
            ctx.progress(f"starting the Ray {'head' if node.is_head else 'worker'} on {node.name} ({node.ip})")
            ray_actions.launch_node(conns[node.name], node, cluster)
        for node in launching:
            records[node.name] = ray_actions.settle_node(conns[node.name], head, python, node, cluster, port, deadline)
    return records


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    if args["state"] == "stopped":
        return _apply_stop(ctx, args, change)
    cluster, conns, statuses = _read(ctx, args)
    ray_status.refuse_foreign(statuses, int(args["port"]))
    problems = _problems(statuses, cluster, _view(conns, cluster, statuses, args["python"]), args)
    starting = _to_start(cluster, problems)
    started_at = time.monotonic()
    _, left = _stop_nodes(conns, args, [s for s in statuses if s.spec.name in starting], ctx.progress)
    if left:
        raise TaskFailed("ray_cluster: could not stop the old nodes first:\n  " + "\n  ".join(left))
    deadline = time.monotonic() + float(args["wait_timeout_s"])
    records = {**_records(statuses), **_start(ctx, conns, cluster, args, starting, deadline)}
    head = conns[cluster.head.name]
    view = ray_actions.wait_view(head, args["python"], cluster, _ready(cluster, records, args), deadline)
    elapsed = time.monotonic() - started_at
    return Result(
        changed=True,
        msg=f"Ray cluster {cluster.name}: started {', '.join(starting)}; {len(cluster.nodes)} nodes alive "
        f"({view.total('CPU'):g} CPU, {view.total('GPU'):g} GPU) in {elapsed:.0f}s",
        diffs=change.diffs,
        data={**_data(cluster, records, view), "started_s": round(elapsed, 1)},
        warnings=_address_warnings(cluster, records),
    )
