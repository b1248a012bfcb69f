"""Start again exactly the server a state file recorded: the rollout's way back.

serve_vllm's state record keeps what a server was launched with (argv, the environment
shown in diffs, the names of the secret variables, the config files' digests, the port,
the log). ``relaunch`` stops whatever runs in that server's place now (by recorded
identity), launches the recorded argv and environment again, records it under the same
spec hash, and waits for it in the same stages as a start. The vLLM build is the one the
recorded argv names (a venv ensure_vllm kept). The model's config files are not written
here: the caller puts their previous bytes back first (the rollout keeps them before its
change, modules/rollout/checkpoint.py); the ones whose digest still is not the recorded one
are named in the answer (``config_differs``), since the record would claim other bytes.
A server recorded as a systemd unit comes back as that unit: its unit file and
EnvironmentFile written again from the record, the unit restarted (modules/serving/unitserver.py).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed
from modules.serving import session as sessions
from modules.serving import unitserver
from modules.serving.spec import API_KEY_VAR, CRASH_REPORT_ENV, config_digests, read_config_files, recorded_model
from modules.serving.waiting import WaitTarget, wait_ready

RECORD_KEPT = ("name", "spec_hash", "port", "host", "served_model_name", "env", "secret_env_names", "config_sha256")


def _probe_url(record: Mapping[str, Any]) -> str:
    host = str(record.get("host") or "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{f'[{host}]' if ':' in host else host}:{record['port']}"


def config_differs(ctx: TaskContext, record: Mapping[str, Any]) -> list[str]:
    """The config files the record names whose contents are not the recorded ones now."""
    model = recorded_model(record.get("argv") or ())
    recorded: Mapping[str, str] = record.get("config_sha256") or {}
    now = config_digests(read_config_files(ctx.conn, model)) if model else {}
    return sorted(name for name, digest in recorded.items() if now.get(name) != digest)


def relaunch(
    ctx: TaskContext,
    record: Mapping[str, Any],
    *,
    api_key: str | None,
    ready_timeout_s: float,
    stop_timeout_s: float,
) -> dict[str, Any]:
    """The recorded server running and ready again; its readiness evidence as data."""
    state_path = str(record["state_path"])
    status = sessions.read_status(ctx.conn, state_path, "")
    if (status.record or {}).get("unit"):  # Restart= would bring back the server being replaced
        unitserver.stop(ctx, status.record or {}, disable=False)
        status = sessions.read_status(ctx.conn, state_path, "")
    if status.session:
        sessions.stop_session(ctx.conn, status.session, stop_timeout_s)
    sessions.ensure_port_free(ctx.conn, int(record["port"]), stop_timeout_s)
    secret = {API_KEY_VAR: api_key} if api_key and API_KEY_VAR in (record.get("secret_env_names") or []) else {}
    argv = [str(a) for a in record["argv"]]
    differs = config_differs(ctx, record)  # what the relaunched server reads, against its record
    ctx.progress(f"rolling back: launching the recorded {posixpath.basename(argv[0])} server again")
    env = {**CRASH_REPORT_ENV, **dict(record.get("env") or {}), **secret}
    kept = {key: record[key] for key in RECORD_KEPT if key in record}
    if record.get("unit"):
        place = unitserver.placement_of(record)
        restart = (str(record.get("unit_restart") or "on-failure"), float(record.get("unit_restart_sec") or 5))
        spec = unitserver.unit_spec(
            place,
            str(record["name"]),
            tuple(argv),
            str(record["log_path"]),
            str(record["spec_hash"]),
            restart,
            stop_timeout_s,
        )
        launched = unitserver.start(ctx, place, spec, env, state_path, kept)
    else:
        launched = sessions.launch(
            ctx.conn, argv=argv, env=env, log_path=str(record["log_path"]), state_path=state_path, record=kept
        )
    target = WaitTarget(
        pid=int(launched["pid"]),
        start_time=launched.get("start_time"),
        log_path=str(launched["log_path"]),
        base_url=_probe_url(record),
        served_name=str(record.get("served_model_name")),
        api_key=next(iter(secret.values()), None),
        timeout_s=ready_timeout_s,
    )
    ready = wait_ready(ctx.conn, target, ctx.progress)
    if not ready.ready:
        raise TaskFailed("the previous server did not come back: " + ready.failure_message(target.log_path))
    return {
        "pid": launched["pid"],
        "spec_hash": record.get("spec_hash"),
        "ready_s": round(ready.elapsed_s, 1),
        "config_differs": differs,
    }
