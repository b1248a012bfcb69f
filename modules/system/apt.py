"""Install, upgrade or remove Debian/Ubuntu packages with apt, versions pinned with `name=version`.

Ansible's `apt`. Plan reads dpkg's state and asks apt for a simulation (`apt-get -s`),
so the diff lists every package that would be installed, upgraded or removed, with
versions, dependencies included; nothing is changed in check mode. `update_cache` runs
`apt-get update` first unless the last successful update is younger than
`cache_valid_time` seconds (the stamp is /var/lib/apt/periodic/update-success-stamp);
a `cache_valid_time` above 0 asks for the update by itself, as in Ansible since 2.4.
`autoremove` is Ansible's: with names, `--auto-remove` goes on the install or remove
command (run only when a named package needs it); without names, `apt-get autoremove`
(with `purge`: `--purge`) removes the packages nothing needs any more, listed from
`apt-get -s autoremove`, changed only when one goes. As in Ansible, a task with
`update_cache` (or `cache_valid_time`) and no name updates the cache and stops there:
its `autoremove` does nothing. `state: absent` with `purge` also purges a package that an
earlier removal left as configuration files only (dpkg status `rc`), as Ansible's does.
Each name must be a Debian package name (optionally `:arch`, `=version` or `/release`) and
goes after `--`: a name that starts with `-` (`-oDPkg::Pre-Invoke::=CMD`) is refused.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import (
    APT_PACKAGE,
    Change,
    Diff,
    Fills,
    Result,
    TaskContext,
    TaskFailed,
    Unchanged,
    command_line,
    operand,
)

STAMP = "/var/lib/apt/periodic/update-success-stamp"
LISTS = "/var/lib/apt/lists"
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
LOCK_WAIT = ("-o", "DPkg::Lock::Timeout=300")
DPKG_OPTIONS = ("-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold")

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {
            "type": ["string", "array"],
            "items": {"type": "string"},
            "description": "Package name(s), each optionally pinned: `sl=5.02-1+b1`.",
        },
        "pkg": {"type": ["string", "array"], "items": {"type": "string"}, "description": "Another name for name."},
        "state": {
            "type": "string",
            "enum": ["present", "absent", "latest"],
            "default": "present",
            "description": "present: installed (at the pinned version if given); latest: at the "
            "candidate version; absent: not installed.",
        },
        "update_cache": {"type": "boolean", "default": False, "description": "Run apt-get update first."},
        "cache_valid_time": {
            "type": "integer",
            "minimum": 0,
            "default": 0,
            "description": "Skip the cache update when the last one is younger than this many seconds; "
            "above 0 it asks for the update by itself (Ansible 2.4 on).",
        },
        "install_recommends": {
            "type": ["boolean", "null"],
            "default": None,
            "description": "Install recommended packages too (null: apt's configured default).",
        },
        "allow_downgrade": {
            "type": "boolean",
            "default": False,
            "description": "Allow a pinned version lower than the installed one.",
        },
        "purge": {
            "type": "boolean",
            "default": False,
            "description": "With absent or autoremove: remove configuration files too.",
        },
        "autoremove": {
            "type": "boolean",
            "default": False,
            "description": "Remove the packages installed as dependencies that nothing needs any more "
            "(alone: apt-get autoremove; with names: --auto-remove on their command).",
        },
    },
}

_SIMULATED = re.compile(r"^(Inst|Remv|Purg) (\S+)(?: \[([^\]]+)\])?(?: \((\S+))?")


@dataclass(frozen=True)
class Wanted:
    name: str
    version: str | None

    @property
    def spec(self) -> str:
        return f"{self.name}={self.version}" if self.version else self.name


def _wanted(args: Mapping[str, Any]) -> list[Wanted]:
    names = args.get("name", args.get("pkg"))
    if names is None:
        return []
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    found = []
    for item in names:
        name, _, version = operand(item, "name", APT_PACKAGE).partition("=")
        found.append(Wanted(name, version or None))
    return found


def dpkg_states(ctx: TaskContext, names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """name -> (dpkg's status abbreviation, version) for the names dpkg knows, one query."""
    if not names:
        return {}
    result = ctx.conn.run(
        command_line(["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Version}\n"], names),
        check=False,
        read_only=True,
        env=APT_ENV,
    )
    states: dict[str, tuple[str, str]] = {}
    for line in result.stdout.splitlines():
        package, status, version = [*line.split("\t"), "", ""][:3]
        if package in names:
            states[package] = (status, version)
    return states


def installed(ctx: TaskContext, names: Sequence[str]) -> dict[str, str | None]:
    """name -> installed version (None when not installed), from dpkg's database."""
    return _versions(names, dpkg_states(ctx, names))


def _versions(names: Sequence[str], states: Mapping[str, tuple[str, str]]) -> dict[str, str | None]:
    versions: dict[str, str | None] = dict.fromkeys(names)
    for package, (status, version) in states.items():
        if status.startswith("ii"):
            versions[package] = version
    return versions


def _configs_left(states: Mapping[str, tuple[str, str]]) -> set[str]:
    """Packages removed with their configuration files kept (dpkg status ``rc``): what a
    purge still removes, as Ansible's apt purges them."""
    return {package for package, (status, _) in states.items() if status.startswith("rc")}


def _candidates(ctx: TaskContext, names: Sequence[str]) -> dict[str, str | None]:
    result = ctx.conn.run(command_line(["apt-cache", "policy"], names), check=False, read_only=True, env=APT_ENV)
    found: dict[str, str | None] = dict.fromkeys(names)
    current = None
    for line in result.stdout.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
        elif current in found and line.strip().startswith("Candidate:"):
            candidate = line.split(":", 1)[1].strip()
            found[current] = None if candidate == "(none)" else candidate
    return found


def _cache_age_s(ctx: TaskContext) -> float | None:
    facts = ctx.conn.run_probe("file_facts", {"paths": [STAMP, LISTS]})["paths"]
    stamp = facts[STAMP] if facts[STAMP].get("exists") else facts[LISTS]
    return time.time() - stamp["mtime"] if stamp.get("exists") else None


def _cache_asked(args: Mapping[str, Any]) -> bool:
    """Ansible's `update_cache or cache_valid_time`: a validity above 0 asks for the update."""
    return bool(args["update_cache"] or args["cache_valid_time"])


def _cache_due(ctx: TaskContext, args: Mapping[str, Any]) -> bool:
    if not _cache_asked(args):
        return False
    age = _cache_age_s(ctx)
    return age is None or args["cache_valid_time"] == 0 or age > args["cache_valid_time"]


def _flags(args: Mapping[str, Any]) -> list[str]:
    flags = [*LOCK_WAIT, *DPKG_OPTIONS]
    if args["install_recommends"] is True:
        flags.append("--install-recommends")
    elif args["install_recommends"] is False:
        flags.append("--no-install-recommends")
    if args["allow_downgrade"]:
        flags.append("--allow-downgrades")
    if args["autoremove"]:
        flags.append("--auto-remove")
    return flags


def _autoremove_flags(args: Mapping[str, Any]) -> list[str]:
    """Ansible's cleanup(): the dpkg options and --purge, nothing about installing."""
    return [*LOCK_WAIT, *DPKG_OPTIONS, *(["--purge"] if args["purge"] else [])]


def _todo(
    ctx: TaskContext,
    args: Mapping[str, Any],
    wanted: list[Wanted],
    versions: Mapping[str, str | None],
    configs_left: set[str],
) -> tuple[str, list[str]]:
    """The apt-get action and the package specs it needs, from dpkg's state."""
    if args["state"] == "absent" and args["purge"]:
        return "purge", [w.name for w in wanted if versions[w.name] or w.name in configs_left]
    if args["state"] == "absent":
        return "remove", [w.name for w in wanted if versions[w.name]]
    if args["state"] == "latest":
        candidates = _candidates(ctx, [w.name for w in wanted])
        return "install", [w.name for w in wanted if versions[w.name] is None or versions[w.name] != candidates[w.name]]
    return "install", [
        w.spec for w in wanted if versions[w.name] is None or (w.version and versions[w.name] != w.version)
    ]


def _fingerprint(versions: Mapping[str, str | None]) -> dict[str, str]:
    """The installed version of each named package: a saved plan is refused once one moved."""
    return {f"apt:{name}": version or "absent" for name, version in versions.items()}


def _simulate(ctx: TaskContext, action: str, specs: list[str], flags: list[str]) -> list[tuple[str, str, str]]:
    """(verb, package, version change) lines from apt's own simulation."""
    argv = command_line(["apt-get", "-s", "-y", *flags, action], specs)
    result = ctx.conn.run(argv, check=False, read_only=True, env=APT_ENV)
    if result.rc != 0:
        raise TaskFailed(f"apt cannot {action} {' '.join(specs)}:\n{result.tail()}".rstrip())
    lines = []
    for line in result.stdout.splitlines():
        match = _SIMULATED.match(line)
        if match:
            verb, package, old, new = match.groups()
            lines.append((verb, package, f"{old or '(not installed)'} -> {new or '(removed)'}"))
    return lines


def _diff(simulated: list[tuple[str, str, str]]) -> Diff:
    before = "".join(f"{pkg} {change.split(' -> ')[0]}\n" for _, pkg, change in simulated)
    after = "".join(f"{pkg} {change.split(' -> ')[1]}\n" for _, pkg, change in simulated)
    return Diff("packages", before, after)


def _plan_autoremove(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    """`autoremove` without names: what `apt-get -s autoremove` would remove, if anything."""
    simulated = _simulate(ctx, "autoremove", [], _autoremove_flags(args))
    if not simulated:
        return Unchanged("no package to autoremove", {"cache_updated": False})
    names = [package for _, package, _ in simulated]
    payload = {"update": False, "action": "autoremove", "specs": []}
    fingerprint = _fingerprint(installed(ctx, names))
    effects = (Fills("/var/lib/dpkg", "apt packages"),)
    return Change(f"autoremove {' '.join(names)}", (_diff(simulated),), payload, fingerprint, effects)


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    wanted = _wanted(args)
    if not wanted and args["autoremove"] and not _cache_asked(args):
        return _plan_autoremove(ctx, args)
    update = _cache_due(ctx, args)
    states = dpkg_states(ctx, [w.name for w in wanted])
    versions = _versions([w.name for w in wanted], states)
    action, specs = _todo(ctx, args, wanted, versions, _configs_left(states)) if wanted else ("install", [])
    if not update and not specs:
        names = ", ".join(w.spec for w in wanted) or "nothing asked"
        return Unchanged(f"packages already {args['state']}: {names}", {"cache_updated": False})
    diffs: list[Diff] = []
    if update:
        diffs.append(Diff("apt cache", "stale\n", "updated\n"))
    if specs and not update:
        simulated = _simulate(ctx, action, specs, _flags(args))
        diffs.append(_diff(simulated))
    elif specs:  # the simulation would use the stale cache: name what is asked
        diffs.append(Diff("packages", "", "".join(f"{action} {s}\n" for s in specs)))
    command = f"{action} {' '.join(specs)}" + (" with --auto-remove" if args["autoremove"] else "")
    parts = (["update the apt cache"] if update else []) + ([command] if specs else [])
    payload = {"update": update, "action": action, "specs": specs}
    # what the packages install is known after apply (dpkg's database included)
    effects = (Fills("/var/lib/dpkg", "apt packages"),) if specs else ()
    return Change(" and ".join(parts), tuple(diffs), payload, _fingerprint(versions), effects)


def update_cache(ctx: TaskContext) -> None:
    """apt-get update, then the stamp cache_valid_time reads (apt_repository's update_cache too)."""
    ctx.progress("apt-get update")
    ctx.conn.run(["apt-get", *LOCK_WAIT, "update", "-q"], env=APT_ENV)
    ctx.conn.run(["mkdir", "-p", STAMP.rsplit("/", 1)[0]])
    ctx.conn.run(["touch", STAMP])


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    payload = change.payload
    if payload["update"]:
        update_cache(ctx)
    stdout = ""
    if payload["specs"] or payload["action"] == "autoremove":
        ctx.progress(f"apt-get {payload['action']} {' '.join(payload['specs'])}".rstrip())
        flags = _autoremove_flags(args) if payload["action"] == "autoremove" else _flags(args)
        argv = command_line(["apt-get", "-y", "-q", *flags, payload["action"]], payload["specs"])
        result = ctx.conn.run(argv, check=False, env=APT_ENV)
        if result.rc != 0:
            raise TaskFailed(f"apt-get {payload['action']} failed (exit {result.rc}):\n{result.tail()}".rstrip())
        stdout = result.stdout
    versions = installed(ctx, [w.name for w in _wanted(args)])
    data = {"cache_updated": payload["update"], "packages": versions, "stdout": stdout}
    return Result(changed=True, msg=change.summary, diffs=change.diffs, data=data)
