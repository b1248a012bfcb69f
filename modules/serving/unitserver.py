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
from dataclasses import dataclass
from typing import Any

from engine.module_api import Diff, ScopedConnection, TaskContext, TaskFailed, content_digest
from modules.serving.spec import CRASH_REPORT_ENV, LaunchSpec, recorded_model
from modules.serving.unitfile import UnitSpec, render_env_file, render_unit
from modules.system import units

SYSTEM_UNIT_DIR = "/etc/systemd/system"
USER_UNIT_DIR = "~/.config/systemd/user"  # where a user manager reads units when XDG_CONFIG_HOME is unset
WANTED_BY = {"system": "multi-user.target", "user": "default.target"}


def unit_name(args: Mapping[str, Any]) -> str:
    return f"rigger-vllm-{args['name']}.service"


@dataclass(frozen=True)
class Placement:
    """Where a server's unit lives and which manager runs it; kept in its state record."""

    unit: str
    scope: str  # system | user
    unit_path: str
    env_path: str  # the EnvironmentFile, beside the state file

    def as_record(self) -> dict[str, str]:
        return {
            "unit": self.unit,
            "unit_scope": self.scope,
            "unit_path": self.unit_path,
            "unit_env_path": self.env_path,
        }


def placement(ctx: TaskContext, args: Mapping[str, Any]) -> Placement:
    name = unit_name(args)
    return Placement(
        name,
        str(args["unit_scope"]),
        posixpath.join(_unit_dir(ctx, args), name),
        posixpath.join(args["state_dir"], f"{args['name']}.env"),
    )


def placement_of(record: Mapping[str, Any]) -> Placement:
    """The placement a state record written by ``start`` names."""
    return Placement(
        str(record["unit"]), str(record["unit_scope"]), str(record["unit_path"]), str(record["unit_env_path"])
    )


def _unit_dir(ctx: TaskContext, args: Mapping[str, Any]) -> str:
    if args.get("unit_dir"):
        return str(args["unit_dir"])
    if args["unit_scope"] == "system":
        return SYSTEM_UNIT_DIR
    return str(ctx.conn.run_probe("expand_paths", {"paths": [USER_UNIT_DIR]})["paths"][0])


def unit_spec(
    place: Placement,
    name: str,
    argv: tuple[str, ...],
    log_path: str,
    spec_hash: str,
    restart: tuple[str, float],
    stop_s: float,
) -> UnitSpec:
    """The unit for a server; ``restart``: Restart= and RestartSec=."""
    model = recorded_model(argv) or ""
    return UnitSpec(
        name=name,
        argv=argv,
        environment_file=place.env_path,
        log_path=log_path,
        spec_hash=spec_hash,
        restart=restart[0],
        restart_sec=restart[1],
        stop_timeout_s=stop_s,
        mounts=(model,) if model.startswith("/") else (),
        wanted_by=WANTED_BY[place.scope],
    )


def _wanted(ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec, log_path: str) -> tuple[Placement, UnitSpec]:
    place = placement(ctx, args)
    restart = (str(args["unit_restart"]), float(args["unit_restart_sec"]))
    stop_s = float(args["stop_timeout_s"])
    return place, unit_spec(place, str(args["name"]), spec.argv, log_path, spec.spec_hash(), restart, stop_s)


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
    place, wanted_spec = _wanted(ctx, args, spec, log_path)
    current = ctx.conn.read_file(place.unit_path)
    wanted = render_unit(wanted_spec)
    before = current.decode("utf-8", "replace") if current is not None else ""
    if before == wanted and enabled(ctx, place.as_record()):
        return None
    return Diff(place.unit_path, before, wanted), {f"file:{place.unit_path}": content_digest(current)}


def enabled(ctx: TaskContext, record: Mapping[str, Any]) -> bool:
    """Whether the unit a state record names is enabled (starts at boot)."""
    tool = units.systemctl(ctx, {"scope": record.get("unit_scope", "system")})
    return units.read_unit(ctx, tool, str(record["unit"])).enabled


def _act(ctx: TaskContext, scope: str, verb: str, name: str | None = None) -> None:
    done = units.systemctl(ctx, {"scope": scope}).act(ctx, verb, name)
    if done.rc != 0:
        what = f"systemctl {verb} {name or ''}".strip()
        raise TaskFailed(f"serve_vllm: {what} failed (rc {done.rc}): {(done.stderr or done.stdout).strip()}")


def install(ctx: TaskContext, place: Placement, spec: UnitSpec, env: Mapping[str, str]) -> None:
    """The EnvironmentFile (0600) and the unit (0644) written, the manager reloaded, the unit
    enabled (it starts at boot)."""
    unit_text = render_unit(spec)  # refuses an unrenderable value before any write
    env_text = render_env_file(env)
    for directory, mode in (
        (posixpath.dirname(place.env_path), 0o700),
        (posixpath.dirname(spec.log_path), 0o755),
        (posixpath.dirname(place.unit_path), 0o755),
    ):
        ctx.conn.run_probe("fileio", {"op": "mkdir", "path": directory, "mode": mode})
    ctx.conn.write_file(place.env_path, env_text.encode(), mode=0o600)
    ctx.conn.write_file(place.unit_path, unit_text.encode(), mode=0o644)
    _act(ctx, place.scope, "daemon-reload")
    _act(ctx, place.scope, "enable", place.unit)


def write_unit(ctx: TaskContext, args: Mapping[str, Any], spec: LaunchSpec, log_path: str) -> None:
    """The task's unit and environment written and enabled, the server left running."""
    place, wanted = _wanted(ctx, args, spec, log_path)
    install(ctx, place, wanted, environment(spec))


def start(
    ctx: TaskContext,
    place: Placement,
    spec: UnitSpec,
    env: Mapping[str, str],
    state_path: str,
    record: Mapping[str, Any],
) -> dict[str, Any]:
    """Install and (re)start the unit; record its MainPID's identity in the state file."""
    install(ctx, place, spec, env)
    # the previous start's log is kept as LOG.prev, as the detached launch keeps it
    rotated = posixpath.basename(spec.log_path) + ".prev"
    ctx.conn.run_probe("fileio", {"op": "rename", "path": spec.log_path, "new_name": rotated})
    _act(ctx, place.scope, "restart", place.unit)
    shown = units.read_unit(ctx, units.systemctl(ctx, {"scope": place.scope}), place.unit).status
    pid = int(shown.get("MainPID") or 0)
    procs = ctx.conn.run_probe("procs", {"pids": [pid]}) if pid else {"processes": []}
    if not procs["processes"]:
        raise TaskFailed(
            f"serve_vllm: {place.unit} started but has no running main process (ActiveState "
            f"{shown.get('ActiveState')}, SubState {shown.get('SubState')}); see {spec.log_path}"
        )
    full = {
        **dict(record),
        **place.as_record(),
        "pid": pid,
        "start_time": procs["processes"][0]["start_time"],
        "boot_id": procs["boot_id"],
        "sid": None,
        "argv": list(spec.argv),
        "log_path": spec.log_path,
        "state_path": state_path,
        "detached": False,
        "unit_restart": spec.restart,
        "unit_restart_sec": spec.restart_sec,
    }
    ctx.conn.write_file(state_path, json.dumps(full, indent=2, sort_keys=True).encode(), mode=0o600)
    return full


def launch(
    ctx: TaskContext,
    args: Mapping[str, Any],
    spec: LaunchSpec,
    log_path: str,
    state_path: str,
    record: Mapping[str, Any],
) -> dict[str, Any]:
    """serve_vllm's start under systemd."""
    place, wanted = _wanted(ctx, args, spec, log_path)
    return start(ctx, place, wanted, environment(spec), state_path, record)


def main_pid(conn: ScopedConnection, record: Mapping[str, Any]) -> int:
    """The MainPID of the unit a state record names, as its manager says now (0: none)."""
    tool = units.systemctl_on(conn, {"scope": record.get("unit_scope", "system")})
    shown = tool.ask_on(conn, "show", str(record["unit"]))
    values = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
    return int(values.get("MainPID") or 0) if shown.rc == 0 else 0


def stop(ctx: TaskContext, record: Mapping[str, Any], disable: bool) -> None:
    """Stop the recorded unit (systemd ends its whole cgroup); disable it when asked, so a
    reboot does not start it again."""
    scope = str(record.get("unit_scope", "system"))
    _act(ctx, scope, "stop", str(record["unit"]))
    if disable:
        _act(ctx, scope, "disable", str(record["unit"]))
