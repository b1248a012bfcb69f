"""What `systemd_service` (alias `systemd`) and `service` share: reading a unit through
systemctl and deciding, as ansible-core 2.19's systemd_service does, what to run.

Order and rules are Ansible's: `masked` first (`systemctl is-enabled` says `masked`), then
`enabled` (is-enabled exits 0, except `indirect` and `alias`, which Ansible enables
anyway), then `state` (`started` when ActiveState is not active or activating, `stopped`
when it is, or is deactivating; `restarted` and `reloaded` always act, and start a unit
that is not running). `daemon_reload` and `daemon_reexec` run first and are not changes.
The unit name is an operand after `--`, never an option; systemctl runs
from an argv list, never a shell.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.module_api import (
    Change,
    CommandResult,
    Diff,
    Result,
    ScopedConnection,
    TaskContext,
    TaskFailed,
    Unchanged,
    command_line,
    operand,
)

# sd_booted(3): a systemd manager runs here (systemctl, and Ansible's service, test this)
SYSTEMD_MARK = "/run/systemd/system"
_GLOBS = ("*", "?", "[")
# is-enabled answers that exit 0 but that Ansible still enables (its systemd_service)
_ENABLE_ANYWAY = ("indirect", "alias")
STATES = ["started", "stopped", "restarted", "reloaded"]


@dataclass(frozen=True)
class Unit:
    """One unit as `systemctl show` and `systemctl is-enabled` report it."""

    name: str
    status: dict[str, str]
    enablement: str
    enabled_rc: int

    @property
    def found(self) -> bool:
        return self.status.get("LoadState", "not-found") != "not-found"

    @property
    def running(self) -> bool:
        return self.status.get("ActiveState") in ("active", "activating")

    @property
    def enabled(self) -> bool:
        return self.enabled_rc == 0 and self.enablement not in _ENABLE_ANYWAY


def unit_name(args: Mapping[str, Any]) -> str | None:
    """name, or Ansible's aliases service and unit; never an option, never a glob."""
    raw = args.get("name", args.get("service", args.get("unit")))
    if raw is None:
        return None
    name = operand(raw, "name")
    for glob in _GLOBS:
        if glob in name:
            raise TaskFailed(
                f"This module does not currently support using glob patterns, found '{glob}' in service name: {name}"
            )
    return name


@dataclass(frozen=True)
class Systemctl:
    """systemctl with the task's scope and options, and the environment it runs in."""

    head: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def ask(self, ctx: TaskContext, verb: str, name: str) -> CommandResult:
        return self.ask_on(ctx.conn, verb, name)

    def ask_on(self, conn: ScopedConnection, verb: str, name: str) -> CommandResult:
        return conn.run(command_line([*self.head, verb], [name]), env=self.env, read_only=True, check=False)

    def act(self, ctx: TaskContext, verb: str, name: str | None = None) -> CommandResult:
        return ctx.conn.run(command_line([*self.head, verb], [name] if name else []), env=self.env, check=False)


def systemctl(ctx: TaskContext, args: Mapping[str, Any]) -> Systemctl:
    return systemctl_on(ctx.conn, args)


def systemctl_on(conn: ScopedConnection, args: Mapping[str, Any]) -> Systemctl:
    """As Ansible runs it: where XDG_RUNTIME_DIR is unset, /run/user/EUID (where a user's
    manager listens); only user and global scope read it."""
    scope = args.get("scope", "system")
    head = (
        "systemctl",
        *([] if scope == "system" else [f"--{scope}"]),
        *(["--no-block"] if args.get("no_block") else []),
        *(["--force"] if args.get("force") else []),
    )
    if scope == "system" or conn.run(["printenv", "XDG_RUNTIME_DIR"], read_only=True, check=False).rc == 0:
        return Systemctl(head)
    uid = conn.run(["id", "-u"], read_only=True).stdout.strip()
    return Systemctl(head, {"XDG_RUNTIME_DIR": f"/run/user/{uid}"})


def require_systemd(ctx: TaskContext, module: str) -> None:
    done = ctx.conn.run(["test", "-d", SYSTEMD_MARK], read_only=True, check=False)
    if done.rc != 0:
        raise TaskFailed(
            f"{module}: this host does not run systemd ({SYSTEMD_MARK} is missing), so no systemd manager "
            "answers systemctl; rigger's systemd, systemd_service and service drive systemd only"
        )


def read_unit(ctx: TaskContext, tool: Systemctl, name: str) -> Unit:
    shown = tool.ask(ctx, "show", name)
    if shown.rc != 0:
        raise TaskFailed(f"systemctl show {name} failed (rc {shown.rc}): {(shown.stderr or shown.stdout).strip()}")
    status = dict(line.split("=", 1) for line in shown.stdout.splitlines() if "=" in line)
    if status.get("LoadState") not in ("not-found", "masked") and status.get("LoadError"):
        raise TaskFailed(f"Error loading unit file '{name}': {status['LoadError']}")
    asked = tool.ask(ctx, "is-enabled", name)
    return Unit(name, status, asked.stdout.strip(), asked.rc)


def _found(unit: Unit) -> None:
    if not unit.found:
        raise TaskFailed(f"Could not find the requested service {unit.name}: host")


def steps(args: Mapping[str, Any], unit: Unit) -> tuple[list[str], dict[str, Any]]:
    """The systemctl verbs to run, in order, and the values Ansible returns for them."""
    verbs: list[str] = []
    data: dict[str, Any] = {"name": unit.name, "status": unit.status}
    if args.get("masked") is not None and (unit.enablement == "masked") != args["masked"]:
        verbs.append("mask" if args["masked"] else "unmask")
    if args.get("enabled") is not None:
        _found(unit)
        if unit.enabled != args["enabled"]:
            verbs.append("enable" if args["enabled"] else "disable")
        data["enabled"] = args["enabled"]
    state = args.get("state")
    if state is not None:
        _found(unit)
        if "ActiveState" not in unit.status:
            raise TaskFailed(f"Service is in unknown state: {unit.name}")
        data["state"] = "stopped" if state == "stopped" else "started"
        if state == "started" and not unit.running:
            verbs.append("start")
        elif state == "stopped" and (unit.running or unit.status["ActiveState"] == "deactivating"):
            verbs.append("stop")
        elif state in ("restarted", "reloaded"):
            verbs.append(state[:-2] if unit.running else "start")
    return verbs, data


def _diff(unit: Unit, verbs: list[str]) -> Diff:
    before = f"ActiveState={unit.status.get('ActiveState', '')}\nis-enabled={unit.enablement}\n"
    return Diff(f"unit {unit.name}", before, "".join(f"systemctl {verb}\n" for verb in verbs))


def plan_units(ctx: TaskContext, args: Mapping[str, Any], module: str) -> Change | Unchanged:
    require_systemd(ctx, module)
    name, tool = unit_name(args), systemctl(ctx, args)
    reloads = [verb for verb in ("daemon-reload", "daemon-reexec") if args.get(verb.replace("-", "_"))]
    if name is None:
        return Change("; ".join(f"systemctl {verb}" for verb in reloads), payload={"reloads": reloads})
    unit = read_unit(ctx, tool, name)
    verbs, data = steps(args, unit)
    if not verbs and not reloads:
        return Unchanged(f"{name}: {unit.status.get('ActiveState', '')}, is-enabled {unit.enablement}", data)
    fingerprint = {f"unit:{name}": f"{unit.status.get('LoadState')}/{unit.status.get('ActiveState')}/{unit.enablement}"}
    summary = "; ".join([*(f"systemctl {verb}" for verb in reloads), *(f"{verb} {name}" for verb in verbs)])
    diffs = (_diff(unit, verbs),) if verbs else ()
    return Change(summary, diffs, {"reloads": reloads, **data}, fingerprint)


def apply_units(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    """Reloads first, then the unit read again (a reload may change it) and acted on."""
    tool = systemctl(ctx, args)
    for verb in change.payload["reloads"]:
        done = tool.act(ctx, verb)
        if done.rc != 0:
            raise TaskFailed(f"failure {done.rc} during {verb}: {done.stderr.strip()}")
    name = unit_name(args)
    if name is None:
        return Result(changed=False, msg=change.summary)
    unit = read_unit(ctx, tool, name)
    verbs, data = steps(args, unit)
    for verb in verbs:
        done = tool.act(ctx, verb, name)
        if done.rc != 0:
            raise TaskFailed(f"Unable to {verb} service {name}: {(done.stdout + done.stderr).strip()}")
    msg = "; ".join(f"{verb} {name}" for verb in verbs) or f"{name}: nothing to change"
    return Result(changed=bool(verbs), msg=msg, diffs=(_diff(unit, verbs),) if verbs else (), data=data)
