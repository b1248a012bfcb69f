"""serve_vllm's `manager: systemd`: the server as a systemd unit instead of a detached process.

rigger writes the unit (modules/serving/unitfile.py renders it) and its EnvironmentFile
(0600, beside the state file: it may hold the API key) through the connection's file
transport, then drives it with the systemctl of modules/system/units.py (daemon-reload,
enable, restart, stop, disable). The state file is the detached server's: pid, start time
and boot id of the unit's MainPID, the spec hash, the log path, plus the ``unit`` and its
``unit_scope``, so every reader of it (readiness, wedge checks, rollouts, watch) finds
the server the same way; the vllm_state probe takes the unit's MainPID as the leader when
systemd started another process (a restart on failure, a reboot).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from engine.module_api import Diff, ScopedConnection, TaskContext, TaskFailed, content_digest
from modules.serving.spec import CRASH_REPORT_ENV, LaunchSpec
from modules.serving.unitfile import UnitSpec, render_env_file, render_unit, spec_hash_of
from modules.system import units

SYSTEM_UNIT_DIR = "/etc/systemd/system"
USER_UNIT_DIR = "~/.config/systemd/user"  # where a user manager reads units when XDG_CONFIG_HOME is unset
WANTED_BY = {"system": "multi-user.target", "user": "default.target"}


def unit_name(args: Mapping[str, Any]) -> str:
    return f"rigger-vllm-{args['name']}.service"


def _tool_args(args: Mapping[str, Any]) -> dict[str, Any]:
    return {"scope": args["unit_scope"]}


def unit_dir(ctx: TaskContext, args: Mapping[str, Any]) -> str:
    if args.get("unit_dir"):
        return str(args["unit_dir"])
    if args["unit_scope"] == "system":
        return SYSTEM_UNIT_DIR
    return str(ctx.conn.run_probe("expand_paths", {"paths": [USER_UNIT_DIR]})["paths"][0])


def unit_path(ctx: TaskContext, args: Mapping[str, Any]) -> str:
    return posixpath.join(unit_dir(ctx, args), unit_name(args))


def env_path(args: Mapping[str, Any]) -> str:
    return posixpath.join(args["state_dir"], f"{args['name']}.env")


def rendered(args: Mapping[str, Any], spec: LaunchSpec, log_path: str) -> str:
    model = str(args["model"])
    return render_unit(
        UnitSpec(
            name=str(args["name"]),
            argv=spec.argv,
            environment_file=env_path(args),
            log_path=log_path,
            spec_hash=spec.spec_hash(),
            restart=str(args["unit_restart"]),
            stop_timeout_s=float(args["stop_timeout_s"]),
            mounts=(model,) if model.startswith("/") else (),
            wanted_by=WANTED_BY[str(args["unit_scope"])],
        )
    )


def environment(spec: LaunchSpec) -> dict[str, str]:
    """What the detached launch puts in the server's environment (the API key included)."""
    return {**CRASH_REPORT_ENV, **spec.env, **spec.secret_env}


def unit_drift(
    ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec, log_path: str
) -> tuple[Diff, dict[str, str]] | None:
    """The unit file as it is against as it would be written, and the fingerprint of the
    file as it is; None when it is current and enabled. Read only: check mode shows this
    diff and writes nothing."""
    units.require_systemd(ctx, "serve_vllm (manager: systemd)")
    path = unit_path(ctx, args)
    current = ctx.conn.read_file(path)
    wanted = rendered(args, spec, log_path)
    before = current.decode("utf-8", "replace") if current is not None else ""
    if before == wanted and _enabled(ctx, args):
        return None
    return Diff(path, before, wanted), {f"file:{path}": content_digest(current)}


def _enabled(ctx: TaskContext, args: Mapping[str, Any]) -> bool:
    tool = units.systemctl(ctx, _tool_args(args))
    return units.read_unit(ctx, tool, unit_name(args)).enabled


def enabled(ctx: TaskContext, record: Mapping[str, Any]) -> bool:
    """Whether the unit a state record names is enabled (starts at boot)."""
    tool = units.systemctl(ctx, {"scope": record.get("unit_scope", "system")})
    return units.read_unit(ctx, tool, str(record["unit"])).enabled


def unit_spec_hash(ctx: TaskContext, args: Mapping[str, Any]) -> str | None:
    current = ctx.conn.read_file(unit_path(ctx, args))
    return spec_hash_of(current.decode("utf-8", "replace") if current is not None else None)


def _act(ctx: TaskContext, args: Mapping[str, Any], verb: str, name: str | None = None) -> None:
    done = units.systemctl(ctx, _tool_args(args)).act(ctx, verb, name)
    if done.rc != 0:
        what = f"systemctl {verb} {name or ''}".strip()
        raise TaskFailed(f"serve_vllm: {what} failed (rc {done.rc}): {(done.stderr or done.stdout).strip()}")


def write_unit(ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec, log_path: str) -> str:
    """The EnvironmentFile (0600) and the unit (0644) written, the manager reloaded, the unit
    enabled (it starts at boot). Returns the unit's path."""
    unit_text = rendered(args, spec, log_path)  # refuses an unrenderable value before any write
    env_text = render_env_file(environment(spec))
    for directory, mode in ((args["state_dir"], 0o700), (posixpath.dirname(log_path), 0o755)):
        ctx.conn.run_probe("fileio", {"op": "mkdir", "path": directory, "mode": mode})
    path = unit_path(ctx, args)
    ctx.conn.run_probe("fileio", {"op": "mkdir", "path": posixpath.dirname(path), "mode": 0o755})
    ctx.conn.write_file(env_path(args), env_text.encode(), mode=0o600)
    ctx.conn.write_file(path, unit_text.encode(), mode=0o644)
    _act(ctx, args, "daemon-reload")
    _act(ctx, args, "enable", unit_name(args))
    return path


def launch(
    ctx: TaskContext,
    args: Mapping[str, Any],
    spec: LaunchSpec,
    log_path: str,
    state_path: str,
    record: Mapping[str, Any],
) -> dict[str, Any]:
    """Write and (re)start the unit; record its MainPID's identity in the state file."""
    path = write_unit(ctx, args, spec, log_path)
    # the previous start's log is kept as LOG.prev, as the detached launch keeps it
    ctx.conn.run_probe("fileio", {"op": "rename", "path": log_path, "new_name": posixpath.basename(log_path) + ".prev"})
    _act(ctx, args, "restart", unit_name(args))
    tool = units.systemctl(ctx, _tool_args(args))
    shown = units.read_unit(ctx, tool, unit_name(args)).status
    main_pid = int(shown.get("MainPID") or 0)
    procs = ctx.conn.run_probe("procs", {"pids": [main_pid]}) if main_pid else {"processes": []}
    if not procs["processes"]:
        raise TaskFailed(
            f"serve_vllm: {unit_name(args)} started but has no running main process (ActiveState "
            f"{shown.get('ActiveState')}, SubState {shown.get('SubState')}); see {log_path}"
        )
    full = {
        **dict(record),
        "pid": main_pid,
        "start_time": procs["processes"][0]["start_time"],
        "boot_id": procs["boot_id"],
        "sid": None,
        "argv": list(spec.argv),
        "log_path": log_path,
        "state_path": state_path,
        "detached": False,
        "unit": unit_name(args),
        "unit_scope": args["unit_scope"],
        "unit_path": path,
    }
    ctx.conn.write_file(state_path, json.dumps(full, indent=2, sort_keys=True).encode(), mode=0o600)
    return full


def main_pid(conn: ScopedConnection, record: Mapping[str, Any]) -> int:
    """The MainPID of the unit a state record names, as its manager says now (0: none)."""
    tool = units.systemctl_on(conn, {"scope": record.get("unit_scope", "system")})
    shown = tool.ask_on(conn, "show", str(record["unit"]))
    values = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
    return int(values.get("MainPID") or 0) if shown.rc == 0 else 0


def stop(ctx: TaskContext, record: Mapping[str, Any], disable: bool) -> None:
    """Stop the recorded unit (systemd ends its whole cgroup); disable it when asked, so a
    reboot does not start it again."""
    scoped = {"unit_scope": record.get("unit_scope", "system")}
    _act(ctx, scoped, "stop", str(record["unit"]))
    if disable:
        _act(ctx, scoped, "disable", str(record["unit"]))
