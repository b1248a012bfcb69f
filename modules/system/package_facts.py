"""The host's installed packages as facts (ansible.builtin.package_facts), from dpkg's database.

Ansible's `package_facts`: `ansible_facts.packages` maps each installed package's name to a
list of its installed instances (more than one when several architectures are installed),
each with `name`, `version`, `arch`, `category` (the section) and `source` (`apt`). Read with
`dpkg-query` (what apt reads as installed), so `origin`, which Ansible takes from python-apt's
cache, is not given. `manager: auto` or `apt`; rpm, portage, pkg, pacman, apk and the other
managers Ansible knows are refused by name (rigger provisions Debian and Ubuntu hosts). It
changes nothing, so it runs the same in check mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, Unchanged
from modules.system.apt import APT_ENV

MANAGERS = ("auto", "apt")
OTHER_MANAGERS = ("rpm", "pkg", "pacman", "portage", "pkg_info", "pkgng", "apk", "zypper", "snap", "dnf", "yum")
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "manager": {
            "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
            "default": ["auto"],
            "description": "The package manager(s) to read: auto or apt (the one rigger reads).",
        },
        "strategy": {
            "type": "string",
            "enum": ["first", "all"],
            "default": "first",
            "description": "first: the first manager found; all: every one listed (the same here: only apt).",
        },
    },
}
_FORMAT = "${db:Status-Abbrev}\t${Package}\t${Version}\t${Architecture}\t${Section}\n"


def _managers(value: str | list[str]) -> list[str]:
    managers = [value] if isinstance(value, str) else list(value)
    for manager in managers:
        if manager in OTHER_MANAGERS:
            raise TaskFailed(f"package_facts: manager {manager!r} is not read by rigger (it reads apt's dpkg database)")
        if manager not in MANAGERS:
            raise TaskFailed(f"package_facts: unknown manager {manager!r} (auto or apt)")
    return managers


def packages(listing: str) -> dict[str, list[dict[str, str]]]:
    """``dpkg-query -W`` lines as Ansible's packages fact: installed ("ii") packages only."""
    found: dict[str, list[dict[str, str]]] = {}
    for line in listing.splitlines():
        status, name, version, arch, section = [*line.split("\t"), "", "", "", ""][:5]
        if status.startswith("ii") and name:
            entry = {"name": name, "version": version, "arch": arch, "category": section, "source": "apt"}
            found.setdefault(name, []).append(entry)
    return found


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    _managers(args["manager"])
    result = ctx.conn.run(["dpkg-query", "-W", "-f", _FORMAT], check=False, read_only=True, env=APT_ENV)
    if result.rc != 0 and not result.stdout:
        raise TaskFailed(
            "package_facts: could not read dpkg's database (dpkg-query exited "
            f"{result.rc}: {result.stderr.strip()[:200]}); is this a Debian or Ubuntu host?"
        )
    found = packages(result.stdout)
    return Unchanged(
        f"{len(found)} packages",
        {"ansible_facts": {"packages": found}},
        set_vars={"ansible_facts": {"packages": found}},
    )
