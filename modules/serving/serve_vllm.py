"""Keep a vLLM OpenAI-compatible server running (or stopped) with exactly the declared spec.

The server runs detached in its own session (setsid), stdin from /dev/null, output to a
log file, so it survives the SSH connection and rigger exiting. A state file on the host
records pid, process start time, boot id, session id, spec hash, argv, port and log path;
once the server is ready, the identities (pid + start time) of its processes too.

The spec hash covers the argv, the environment (the API key only as a hash) and the
contents of the model's `config.json` and `hf_quant_config.json`: running, healthy and
the same hash is `ok`; anything else restarts it, with the old and new argv/env as diffs.
After a start, readiness is checked ON the host in stages (`/health` 200, `/v1/models`
lists the served name, a one-token completion) with the phase read from the log; a
fatal log line or the process exiting fails the task within seconds, quoting the line;
a line whose cause is known (modules/serving/loglines.py: no valid attention backend with
each backend's reason, FP8 KV on a TRITON_MLA before vLLM PR #34597, a bf16 KV override on
an FP8 checkpoint, FP8 below SM 8.9, an SM 10.x kernel on SM 12.x, a KV cache smaller than
max_model_len) adds its named cause and fix (`data.log_cause`). What the start logged about
itself is `data.log_facts` (attention and NvFp4 MoE backend, `kv_cache_tokens`, custom
all-reduce off on PCIe, AOT compile / FlashInfer autotune cache hits, the Marlin FP4
fallback) and the message's tail; they are kept in the state file (`log_facts`), so a
later run that finds the server running reports them too.

The state file is written "starting" (with the server's identity and spec hash) before the
wait for readiness begins and "ready" once it answered. A run interrupted in between leaves
the server loading, detached by design; the next run that finds it still loading with the
same spec waits for it (up to `ready_timeout_s` counted from the server's own start)
instead of restarting it; one that finds it dead, or another spec wanted, says so and
starts anew.

Before a multi-GPU start on a PCIe-only host (NVML: no NVLink link up), a 2-rank all-reduce
with torch.distributed, run by the launcher's interpreter with the serve env, must finish
within `collective_smoke_timeout_s` (modules/serving/collective.py): NCCL has hung on the
first all-reduce there unless `NCCL_P2P_DISABLE=1`, so a hang or a failure refuses the start
with that remedy (`data.collective_smoke`).

Every check that can fail (the spec, the model path on the host, who holds the port, the
collective smoke test) runs before an old server is stopped: a start that cannot succeed leaves the running
server as it was. A model, served name or other flag value starting with `-` is refused
(vLLM would read it as a flag).

`stopped` ends the server's processes, found by identity (the recorded API server,
EngineCore and workers, orphans included, and their descendants: SIGTERM, then SIGKILL;
never a process that merely has the recorded session id) and waits until the port is
free. A port held by a process rigger did not start is a clear failure naming it; rigger never kills it.
The API key travels only in the launch environment (`VLLM_API_KEY`), named by
`api_key_env` (a variable of the environment rigger runs in): never in argv or output.
`manager: systemd` runs the same server as a systemd unit instead (modules/serving/
unitserver.py; the unit rendered by modules/serving/unitfile.py): `Restart=`
(`unit_restart`), ordered after nvidia-persistenced and the model's mount, enabled so it
starts at boot, its environment in an EnvironmentFile written 0600, its output appended to
the same log file. The state file records the unit's MainPID (pid + start time + boot id)
as the detached path records its leader, so the spec hash, identity, wedge and readiness
checks are the same; a server systemd started again by itself (a reboot) is found by the
unit's MainPID and waited for, not restarted. A changed spec rewrites the unit, reloads
and restarts it; a unit file that differs only in what the spec hash does not cover
(`unit_restart`) is rewritten and reloaded without a restart (a change of kind `unit`, for
`rigger watch`). `stopped` stops and disables the unit. The output goes to the log file
(`StandardOutput=append:`), not the journal: the readiness watch and the crash-log readers
read that file the same way for both managers, and no journald runs where rigger's tests
drive a real systemd (PID 1 is not systemd there, so /run/systemd/journal is absent and
output sent to the journal is lost). The EnvironmentFile holds the API key at rest (0600,
in the 0700 state_dir): the detached server keeps it only in its process environment, a
unit that starts at boot needs it on disk.
`inspected` changes nothing: registered, it tells later tasks (`when:`) whether the
server already runs healthy with this spec, so a play can skip its GPU clean-up then
(playbooks/kimi_k25_nvfp4.yml does).
"""

from __future__ import annotations

import os
import posixpath
import shlex
from collections.abc import Mapping
from typing import Any

from engine.module_api import (
    Change,
    Diff,
    Result,
    ScopedConnection,
    Starts,
    Stops,
    TaskContext,
    TaskFailed,
    Unchanged,
    content_digest,
)
from modules.serving import loglines, unitserver
from modules.serving import session as sessions
from modules.serving.collective import run_smoke
from modules.serving.packages import package_fingerprint
from modules.serving.readiness import liveness
from modules.serving.spec import (
    CRASH_REPORT_ENV,
    LaunchSpec,
    build_spec,
    config_paths,
    read_config_files,
    served_name,
)
from modules.serving.specdiff import spec_diffs
from modules.serving.waiting import WaitTarget, wait_ready

ANY_ADDRESS = ("0.0.0.0", "::", "")
# a value that starts with "-" would be read by vLLM's parser as a flag of its own
NOT_A_FLAG = "^[^-]"

# path arguments Ansible would expand on the host (~, $VAR): expanded there before plan()
HOST_PATHS = ("state_dir", "log_path", "unit_dir")
MANAGERS = ("detached", "systemd")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "model"],
    "properties": {
        "name": {
            "type": "string",
            "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
            "description": "Name of this server on the host; names its state and log files.",
        },
        "model": {
            "type": "string",
            "minLength": 1,
            "pattern": NOT_A_FLAG,
            "description": "Model directory on the host (absolute path: it must exist, and "
            "its config files are part of the spec hash) or a hub id.",
        },
        "served_model_name": {
            "type": ["string", "null"],
            "pattern": NOT_A_FLAG,
            "default": None,
            "description": "Model id clients use (--served-model-name); default: `model`.",
        },
        "host": {
            "type": "string",
            "pattern": NOT_A_FLAG,
            "default": "127.0.0.1",
            "description": "Address to bind (--host). 0.0.0.0 exposes the server to every "
            "network the host is on and warns.",
        },
        "port": {
            "type": "integer",
            "minimum": 1,
            "maximum": 65535,
            "default": 8000,
            "description": "TCP port (--port).",
        },
        "tensor_parallel_size": {
            "type": ["integer", "null"],
            "minimum": 1,
            "default": None,
            "description": "GPUs per model replica (--tensor-parallel-size).",
        },
        "pipeline_parallel_size": {
            "type": ["integer", "null"],
            "minimum": 1,
            "default": None,
            "description": "Pipeline stages (--pipeline-parallel-size).",
        },
        "dtype": {
            "type": ["string", "null"],
            "pattern": NOT_A_FLAG,
            "default": None,
            "description": "Weights/activations dtype (--dtype): auto, bfloat16, float16...",
        },
        "kv_cache_dtype": {
            "type": ["string", "null"],
            "pattern": NOT_A_FLAG,
            "default": None,
            "description": "KV cache dtype (--kv-cache-dtype): auto, fp8, bfloat16...",
        },
        "gpu_memory_utilization": {
            "type": ["number", "null"],
            "exclusiveMinimum": 0,
            "maximum": 1,
            "default": None,
            "description": "Fraction of GPU memory vLLM may use (--gpu-memory-utilization); "
            "on the CPU build, the fraction of RAM for the KV cache.",
        },
        "max_model_len": {
            "type": ["integer", "null"],
            "minimum": 1,
            "default": None,
            "description": "Context length (--max-model-len).",
        },
        "trust_remote_code": {
            "type": "boolean",
            "default": False,
            "description": "Allow the checkpoint's own Python code (--trust-remote-code).",
        },
        "attention_backend": {
            "type": ["string", "null"],
            "pattern": NOT_A_FLAG,
            "default": None,
            "description": "Force an attention backend (--attention-backend), e.g. TRITON_MLA.",
        },
        "extra_args": {
            "type": "array",
            "items": {"type": ["string", "number"]},
            "default": [],
            "description": "More vLLM flags, appended as given (never --api-key or --hf-token, in any spelling).",
        },
        "env": {
            "type": "object",
            "additionalProperties": {"type": ["string", "number", "boolean"]},
            "default": {},
            "description": "Environment variables for the server (shown in diffs).",
        },
        "api_key_env": {
            "type": ["string", "null"],
            "default": None,
            "description": "Name of a variable in rigger's environment holding the API key; "
            "passed to vLLM as VLLM_API_KEY, never in argv or output.",
        },
        "launcher": {
            "type": "string",
            "default": "vllm",
            "description": "`vllm` (runs `vllm serve MODEL`), a path to a vllm executable, "
            "or a python interpreter (runs `PYTHON -m vllm.entrypoints.openai.api_server "
            "--model MODEL`; chosen when the file name starts with `python`).",
        },
        "state": {
            "type": "string",
            "enum": ["started", "stopped", "restarted", "inspected"],
            "default": "started",
            "description": "`started`: running with this spec; `stopped`: not running; "
            "`restarted`: restart now; `inspected`: change nothing, only report (for "
            "`register` and `when`) whether the recorded server runs, is healthy and runs "
            "this spec (`data.healthy`, `data.same_spec`).",
        },
        "wedge_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 30,
            "description": "A running server with this spec whose /health says 200 is still checked "
            "for progress: a process of it stopped (T) or stuck (D), or a 1-token completion not back "
            "within this many seconds, is wedged, and is restarted (spec unchanged) as a down server is.",
        },
        "collective_smoke": {
            "type": "string",
            "enum": ["auto", "always", "never"],
            "default": "auto",
            "description": "A bounded 2-rank all-reduce (torch.distributed, run by the launcher's interpreter "
            "with the serve env) before the start; a hang or a failure refuses it, before anything is stopped, "
            "with the NCCL_P2P_DISABLE=1 remedy. `auto`: on a multi-GPU start (tensor x pipeline parallel > 1) "
            "on a host whose NVML shows no NVLink link up (PCIe only, where NCCL has hung on the first "
            "all-reduce); `always`: before every start (gloo on a host without CUDA); `never`.",
        },
        "collective_smoke_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 60,
            "description": "Seconds the smoke test may take, torch's import included; past them its ranks are "
            "killed and the start is refused as hung.",
        },
        "ready_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 1800,
            "description": "Seconds to wait for the three readiness stages after a start.",
        },
        "stop_timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 30,
            "description": "Seconds between SIGTERM and SIGKILL when stopping.",
        },
        "state_dir": {
            "type": "string",
            "default": "~/.local/state/rigger/vllm",
            "description": "Directory on the host for NAME.json (the state file) and, "
            "unless log_path is set, NAME.log.",
        },
        "log_path": {
            "type": ["string", "null"],
            "default": None,
            "description": "The server's log file on the host; default STATE_DIR/NAME.log.",
        },
        "manager": {
            "type": "string",
            "enum": list(MANAGERS),
            "default": "detached",
            "description": "`detached`: rigger starts the server in a session of its own; `systemd`: as the "
            "unit rigger-vllm-NAME.service (Restart=, started at boot, after nvidia-persistenced and the model's "
            "mount; the launcher must be an absolute path). Switching restarts the server under the other.",
        },
        "unit_scope": {
            "type": "string",
            "enum": ["system", "user"],
            "default": "system",
            "description": "With manager systemd: the system manager (units in /etc/systemd/system) or the "
            "connecting user's own manager (systemctl --user; units in ~/.config/systemd/user).",
        },
        "unit_dir": {
            "type": ["string", "null"],
            "default": None,
            "description": "With manager systemd: the directory the unit is written to, when not the scope's "
            "default (a user manager with XDG_CONFIG_HOME set reads $XDG_CONFIG_HOME/systemd/user).",
        },
        "unit_restart": {
            "type": "string",
            "enum": ["no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always"],
            "default": "on-failure",
            "description": "With manager systemd: the unit's Restart= policy (systemd.service(5)).",
        },
        "unit_restart_sec": {
            "type": "number",
            "exclusiveMinimum": 0,
            "default": 5,
            "description": "With manager systemd: seconds systemd waits before it restarts the server (RestartSec=).",
        },
    },
}


def _state_path(args: Mapping[str, Any]) -> str:
    return posixpath.join(args["state_dir"], f"{args['name']}.json")


def _log_path(args: Mapping[str, Any]) -> str:
    return args["log_path"] or posixpath.join(args["state_dir"], f"{args['name']}.log")


def state_path(args: Mapping[str, Any]) -> str:
    """The state file of the server these (defaults-filled) arguments declare."""
    return _state_path(args)


def base_url(args: Mapping[str, Any]) -> str:
    """Where the declared server answers, as seen from its host."""
    return _base_url(args)


def _probe_host(args: Mapping[str, Any]) -> str:
    host = str(args["host"])
    return "127.0.0.1" if host in ANY_ADDRESS else host


def _base_url(args: Mapping[str, Any]) -> str:
    host = _probe_host(args)
    return f"http://{f'[{host}]' if ':' in host else host}:{args['port']}"


def _read_spec(conn: ScopedConnection, args: Mapping[str, Any]) -> LaunchSpec:
    return build_spec(args, read_config_files(conn, args["model"]), os.environ)


def _check_port(conn: ScopedConnection, args: Mapping[str, Any], status: sessions.ServerStatus) -> None:
    # an invisible holder may be our own dying server only on the port that server used
    strict = status.record is None or status.record.get("port") != args["port"]
    taken = sessions.foreign_listener(conn, int(args["port"]), status.session_pids, strict)
    if taken is not None:
        raise TaskFailed(sessions.port_taken_message(int(args["port"]), taken), {"port": args["port"]})


def _processes_fingerprint(status: sessions.ServerStatus) -> dict[str, str]:
    return {
        f"process:{p['pid']}": f"start_time {p.get('start_time')}: {sessions.describe_process(p)}"
        for p in status.session
    }


def _start_fingerprint(
    ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec, status: sessions.ServerStatus
) -> dict[str, str]:
    files = config_paths(args["model"])
    return {
        "spec_hash": spec.spec_hash(),
        "argv": content_digest("\0".join(spec.argv).encode()),
        **{f"file:{files[name]}": digest for name, digest in spec.config_digests.items() if name in files},
        **_processes_fingerprint(status),
        **package_fingerprint(ctx.conn, str(args["launcher"])),
    }


def _stops(status: sessions.ServerStatus) -> tuple[Stops, ...]:
    """The running server's processes, said as the review reads them."""
    record = status.record or {}
    serving = f" serving {record.get('served_model_name')} on :{record.get('port')}" if record.get("port") else ""
    return tuple(
        Stops(
            int(p["pid"]),
            p.get("start_time"),
            f"vLLM pid {p['pid']}{serving}" if p["pid"] == record.get("pid") else sessions.describe_process(p),
        )
        for p in status.session
    )


def _plan_stop(ctx: TaskContext, status: sessions.ServerStatus) -> Change | Unchanged:
    unit = (status.record or {}).get("unit")
    if unit and not status.session and unitserver.enabled(ctx, status.record or {}):
        return Change(summary=f"disable {unit} (not running)", kind="stop")
    if not status.session:
        return Unchanged(f"not running ({status.describe()})")
    procs = "\n".join(sessions.describe_process(p) for p in status.session) + "\n"
    return Change(
        summary=f"stop vLLM ({len(status.session)} processes; {status.describe()})",
        kind="stop",
        diffs=(Diff("vLLM processes", procs, ""),),
        fingerprint=_processes_fingerprint(status),
        effects=_stops(status),
    )


def _start_reason(
    status: sessions.ServerStatus, spec_hash: str, state: str, ready_timeout_s: float
) -> tuple[str, str] | None:
    """What must be done and why (a verb first: output says "would ..."), with the kind of
    change (Change.kind) it is, or None. Policies such as `rigger watch`'s self-healing allow
    some kinds ("down": the recorded server died or stopped answering, its spec unchanged)
    and leave others to a person ("spec": a restart for a changed spec; "new"; "requested")."""
    if state == "restarted":
        return "requested", "restart vLLM (state: restarted)"
    if status.record is None:
        return "new", "start vLLM (no server recorded)"
    same_spec = status.record.get("spec_hash") == spec_hash
    if same_spec and status.start_unfinished and status.leader_alive:
        return _still_starting(status, ready_timeout_s)
    if not status.healthy:
        # down with its spec unchanged is a repair; with a changed spec it is a rollout
        return "down" if same_spec else "spec", f"start vLLM ({status.describe()})"
    if not same_spec:
        return "spec", f"restart vLLM: the spec changed (pid {status.record.get('pid')} runs an older one)"
    return None


def _still_starting(status: sessions.ServerStatus, ready_timeout_s: float) -> tuple[str, str]:
    """A server an interrupted run launched, still loading with the spec wanted now: waited
    for ("starting"), within ready_timeout_s counted from its own start; past that it is
    down ("down": restarted). Restarting it would throw away the load so far (20 minutes
    for a 540 GB checkpoint)."""
    age = status.leader_age_s or 0.0
    pid = (status.record or {}).get("pid")
    if status.healthy:  # it got ready after its run was interrupted: its processes are recorded now
        return "starting", f"finish the start of vLLM pid {pid}: ready now, same spec (its start was interrupted)"
    if age >= ready_timeout_s:
        return (
            "down",
            f"start vLLM: pid {pid} still not ready {age:.0f}s after its start (ready_timeout_s {ready_timeout_s:g})",
        )
    return "starting", (
        f"wait for vLLM pid {pid}: {status.describe()}; same spec, up to {ready_timeout_s - age:.0f}s more "
        f"(ready_timeout_s {ready_timeout_s:g} from its start)"
    )


def _manager_reason(status: sessions.ServerStatus, args: Mapping[str, Any]) -> tuple[str, str] | None:
    """A running server under the other manager than the one wanted is restarted under it."""
    record = status.record
    if record is None or not status.session:
        return None
    running = "systemd" if record.get("unit") else "detached"
    if running == args["manager"]:
        return None
    return "spec", f"restart vLLM under {args['manager']} (pid {record.get('pid')} runs {running})"


def _inspected(status: sessions.ServerStatus, spec_hash: str, args: Mapping[str, Any]) -> Unchanged:
    record = status.record or {}
    same = record.get("spec_hash") == spec_hash
    data = {
        **_data(args, record),
        "running": status.leader_alive,
        "healthy": status.healthy,
        "same_spec": same,
        "wanted_spec_hash": spec_hash,
        "session_pids": list(status.session_pids),
    }
    spec_note = "same spec" if same else "a different spec" if record else "no spec recorded"
    return Unchanged(f"{status.describe()}; {spec_note}", data)


def _status(conn: ScopedConnection, args: Mapping[str, Any]) -> sessions.ServerStatus:
    """The recorded server's status, its health asked where it runs: after a port change
    the new port has no server yet, the running one answers on the port it was started on."""
    status = sessions.read_status(conn, _state_path(args), _base_url(args) + "/health")
    record = status.record or {}
    if status.leader_alive and record.get("port") not in (None, args["port"]):
        running = {**args, "port": record["port"], "host": record.get("host", args["host"])}
        status = sessions.read_status(conn, _state_path(args), _base_url(running) + "/health")
    return status


def _wedged_reason(
    ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec, status: sessions.ServerStatus
) -> tuple[str, str] | None:
    """A healthy-looking server with our spec that makes no progress is down ("down": a repair)."""
    key = next(iter(spec.secret_env.values()), None)
    answer = liveness(
        ctx.conn, status.session_pids, _base_url(args), served_name(args), key, float(args["wedge_timeout_s"])
    )
    if not answer["wedged"]:
        return None
    return "down", f"restart vLLM, spec unchanged: it is wedged ({answer['why']}; /health answers {answer['health']})"


def quarantine_skips(args: Mapping[str, Any]) -> bool:
    """A host quarantined on the controller (a refused GPU health verdict) is not started
    on; inspecting or stopping a server there still runs (engine/run/quarantine.py)."""
    return bool(args["state"] in ("started", "restarted"))


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    status = _status(ctx.conn, args)
    if args["state"] == "stopped":
        return _plan_stop(ctx, status)
    spec = _read_spec(ctx.conn, args)
    spec_hash = spec.spec_hash()
    if args["state"] == "inspected":
        return _inspected(status, spec_hash, args)
    start = _start_reason(status, spec_hash, args["state"], float(args["ready_timeout_s"]))
    start = start or _manager_reason(status, args) or _wedged_reason(ctx, args, spec, status)
    drift = unitserver.unit_drift(ctx, args, spec, _log_path(args)) if args["manager"] == "systemd" else None
    unit_diff, unit_print = drift or (None, {})
    if start is None and unit_diff is not None:
        return Change(
            summary=f"rewrite {unit_diff.label}, reload systemd and enable {unitserver.unit_name(args)} "
            "(the server keeps running: its spec is unchanged)",
            kind="unit",
            diffs=(unit_diff,),
            payload={"spec_hash": spec_hash},
            fingerprint=unit_print,
        )
    if start is None:
        record = status.record or {}
        return Unchanged(
            f"vLLM pid {record.get('pid')} running and healthy on port {args['port']}, same spec ({spec_hash[:12]})"
            + loglines.summary(record.get("log_facts") or {}),
            _data(args, record),
        )
    kind, reason = start
    if kind == "starting":
        return Change(
            summary=reason, kind=kind, payload={"spec_hash": spec_hash}, fingerprint=_processes_fingerprint(status)
        )
    missing = sessions.model_missing(ctx.conn, str(args["model"]))
    _check_port(ctx.conn, args, status)
    return Change(
        # In check mode an earlier task (a download, make_tiny_model) may be what creates the
        # model, so the plan says so; apply refuses before it stops anything.
        summary=f"{reason}; {missing} now, an earlier task must create it" if missing else reason,
        diffs=(*spec_diffs(status.record, spec), *((unit_diff,) if unit_diff else ())),
        payload={"spec_hash": spec_hash, "argv": list(spec.argv)},
        fingerprint={
            **_start_fingerprint(ctx, args, spec, status),
            **unit_print,
        },
        effects=(*_stops(status), Starts(str(args["name"]), tuple(spec.argv), int(args["port"]), _state_path(args))),
        kind=kind,
    )


def _data(args: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "pid": record.get("pid"),
        "sid": record.get("sid"),
        "port": args["port"],
        "url": _base_url(args),
        "served_model_name": served_name(args),
        "spec_hash": record.get("spec_hash"),
        "log_path": record.get("log_path"),
        "state_path": record.get("state_path"),
        "argv": record.get("argv"),
        # what the start logged about itself, as recorded once it was ready
        "log_facts": record.get("log_facts") or {},
        "manager": "systemd" if record.get("unit") else "detached",
        "unit": record.get("unit"),
    }


def _stop(ctx: TaskContext, args: Mapping[str, Any], status: sessions.ServerStatus, disable: bool = False) -> str:
    """Stop what the state file records; a unit through systemd (disabled too when asked),
    then whatever of its processes is left, by identity, as a detached server."""
    unit = (status.record or {}).get("unit")
    if unit and (status.session or disable):
        ctx.progress(f"stopping {unit}")
        unitserver.stop(ctx, status.record or {}, disable)
        left = sessions.read_status(ctx.conn, _state_path(args), "").session
        if left:
            sessions.stop_session(ctx.conn, left, float(args["stop_timeout_s"]))
        sessions.ensure_port_free(ctx.conn, int(args["port"]), float(args["stop_timeout_s"]))
        ended = f"{len(status.session)} process(es) ended" if status.session else "it was not running"
        return f"stopped {unit}{' and disabled it' if disable else ''}: {ended}; port {args['port']} is free"
    if not status.session:
        return "nothing running"
    ctx.progress(f"stopping vLLM session {status.record.get('sid') if status.record else '?'}")
    answer = sessions.stop_session(ctx.conn, status.session, float(args["stop_timeout_s"]))
    sessions.ensure_port_free(ctx.conn, int(args["port"]), float(args["stop_timeout_s"]))
    killed = len(answer["killed"])
    return (
        f"stopped vLLM session {status.record.get('sid') if status.record else '?'}: "
        f"{len(status.session)} process(es) ended, "
        f"{f'{killed} needed SIGKILL' if killed else 'all on SIGTERM'}; port {args['port']} is free"
    )


def _launch_record(args: Mapping[str, Any], spec: LaunchSpec) -> dict[str, Any]:
    return {
        "name": args["name"],
        "spec_hash": spec.spec_hash(),
        "port": args["port"],
        "host": args["host"],
        "served_model_name": served_name(args),
        "env": dict(spec.env),
        "secret_env_names": sorted(spec.secret_env),
        "config_sha256": dict(spec.config_digests),
        # detached by design: it outlives rigger, and a run interrupted while it loads leaves
        # it "starting" here (with its identity and spec hash) for the next run to wait for
        "detached": True,
        "state": sessions.STARTING,
    }


def _launch(ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec) -> dict[str, Any]:
    """Start the server under the manager the task names; its record, as the state file has it."""
    if args["manager"] == "systemd":
        return unitserver.launch(ctx, args, spec, _log_path(args), _state_path(args), _launch_record(args, spec))
    return sessions.launch(
        ctx.conn,
        argv=spec.argv,
        env={**CRASH_REPORT_ENV, **spec.env, **spec.secret_env},
        log_path=_log_path(args),
        state_path=_state_path(args),
        record=_launch_record(args, spec),
    )


def _start(ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec) -> Result:
    ctx.progress(f"launching {shlex.join(spec.argv)}")
    try:
        record = _launch(ctx, args, spec)
    except KeyboardInterrupt:
        _left_starting(ctx, args, None)
        raise
    data = _until_ready(ctx, args, spec, record, float(args["ready_timeout_s"]))
    return Result(
        changed=True,
        msg=f"vLLM pid {record['pid']} ready in {data['ready_s']:.0f}s on {_base_url(args)}"
        + loglines.summary(data["log_facts"]),
        data=data,
        warnings=tuple(loglines.warnings_for(data["log_facts"])),
    )


def _until_ready(
    ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec, record: Mapping[str, Any], timeout_s: float
) -> dict[str, Any]:
    """Wait for the recorded server to answer; stop what is left of it when it cannot. An
    interrupt leaves it loading, detached by design: its state file says "starting"."""
    target = WaitTarget(
        pid=int(record["pid"]),
        start_time=record.get("start_time"),
        log_path=str(record["log_path"]),
        base_url=_base_url(args),
        served_name=served_name(args),
        api_key=next(iter(spec.secret_env.values()), None),
        timeout_s=timeout_s,
    )
    try:
        ready = wait_ready(ctx.conn, target, ctx.progress)
    except KeyboardInterrupt:
        _left_starting(ctx, args, record)
        raise
    data = {
        **_data(args, record),
        "ready_s": round(ready.elapsed_s, 1),
        "phase": ready.phase,
        "phases": [{"phase": name, "at_s": at} for name, at in ready.phases],
        "log_facts": dict(ready.log_facts),
        # the start's proof that a seeded compile cache was used, or why not (engine_cache)
        "engine_cache": ready.log_facts.get("engine_cache") or str(loglines.CacheProof(False, loglines.NO_CACHE_LINE)),
    }
    if not ready.ready:
        _cleanup_failed(ctx, args)
        raise TaskFailed(
            ready.failure_message(target.log_path) + "\n(what was left of it was stopped)",
            {
                **data,
                "fatal_line": ready.fatal_line,
                "log_cause": ready.hint,
                "healthy_at_s": ready.healthy_at_s,
                "log_tail": list(ready.log_tail),
            },
        )
    status = sessions.read_status(ctx.conn, _state_path(args), "")
    sessions.record_members(ctx.conn, _state_path(args), status, ready.log_facts)
    return data


def _left_starting(ctx: TaskContext, args: Mapping[str, Any], record: Mapping[str, Any] | None) -> None:
    """For the run's ``interrupted`` event: the server this task leaves loading on purpose."""
    which = f"vLLM pid {record['pid']}" if record else "the vLLM launched as the signal came"
    how = f"run by systemd as {unitserver.unit_name(args)}" if args["manager"] == "systemd" else "detached by design"
    ctx.conn.left_running.append(
        f"{which} on port {args['port']}, still starting ({how}; {_state_path(args)} "
        "records it as 'starting': the next run waits for it)"
    )


def _await_starting(
    ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec, status: sessions.ServerStatus
) -> Result:
    """The server an interrupted run launched finishes loading: this run only waits (what
    is left of ready_timeout_s, counted from the server's start); nothing is changed."""
    assert status.record is not None
    age = status.leader_age_s or 0.0
    ctx.progress(f"vLLM pid {status.record['pid']} is still starting ({age:.0f}s in): waiting for it")
    data = _until_ready(ctx, args, spec, status.record, max(1.0, float(args["ready_timeout_s"]) - age))
    msg = (
        f"vLLM pid {status.record['pid']} (launched by an interrupted run, same spec) ready on {_base_url(args)} "
        f"after waiting {data['ready_s']:.0f}s, {age + data['ready_s']:.0f}s after its start"
    )
    return Result(changed=False, msg=msg, data=data, warnings=_warnings(args))


def _cleanup_failed(ctx: TaskContext, args: Mapping[str, Any]) -> None:
    status = sessions.read_status(ctx.conn, _state_path(args), "")
    if (status.record or {}).get("unit"):  # systemd would start it again (Restart=): stopped as a unit
        unitserver.stop(ctx, status.record or {}, disable=False)
        status = sessions.read_status(ctx.conn, _state_path(args), "")
    if status.session:
        sessions.stop_session(ctx.conn, status.session, float(args["stop_timeout_s"]))


def _warnings(args: Mapping[str, Any]) -> tuple[str, ...]:
    if str(args["host"]) in ANY_ADDRESS:
        return (
            f"serve_vllm binds {args['host']}: the server answers on every network of the host; "
            "set api_key_env or bind 127.0.0.1 behind a proxy",
        )
    return ()


def _check_model(conn: ScopedConnection, args: Mapping[str, Any]) -> None:
    missing = sessions.model_missing(conn, str(args["model"]))
    if missing:
        raise TaskFailed(f"serve_vllm: {missing}", {"model": str(args["model"])})


def _leaves_the_unit(args: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """The recorded unit is not the one this start uses (another manager or scope): disabled
    when stopped, so a reboot does not start it beside the new server."""
    return bool(args["manager"] != "systemd" or record.get("unit_scope") != args["unit_scope"])


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    status = sessions.read_status(ctx.conn, _state_path(args), _base_url(args) + "/health")
    if args["state"] == "stopped":
        stopped = _stop(ctx, args, status, disable=True)
        return Result(changed=True, msg=stopped, diffs=change.diffs, data={"port": args["port"]})
    spec = _read_spec(ctx.conn, args)  # everything that can fail, before anything is stopped
    record = status.record or {}
    if change.kind == "unit":
        unitserver.write_unit(ctx, args, spec, _log_path(args))
        return Result(changed=True, msg=change.summary, diffs=change.diffs, data=_data(args, record))
    unfinished = status.start_unfinished and status.leader_alive
    if change.kind == "starting" and unfinished and record.get("spec_hash") == spec.spec_hash():
        return _await_starting(ctx, args, spec, status)
    _check_model(ctx.conn, args)
    _check_port(ctx.conn, args, status)
    smoke = run_smoke(ctx, args, spec.env)
    _stop(ctx, args, status, disable=_leaves_the_unit(args, record))
    sessions.ensure_port_free(ctx.conn, int(args["port"]), float(args["stop_timeout_s"]))
    result = _start(ctx, args, spec)
    return Result(
        changed=True,
        msg=f"{change.summary}: {result.msg}",
        diffs=change.diffs,
        data={**result.data, "collective_smoke": smoke},
        warnings=(*_warnings(args), *result.warnings),
    )
