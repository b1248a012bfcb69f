"""What the yum and dnf modules share: the refusal, since rigger manages Debian/Ubuntu hosts only.

Accepting the task keeps a playbook written for several families valid: its yum/dnf tasks
usually carry `when: ansible_os_family == "RedHat"` (or `ansible_pkg_mgr`), are skipped on
the Debian/Ubuntu hosts rigger manages, and fail by name, before anything runs, on a host
where they would run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from engine.module_api import TaskContext, TaskFailed

# Ansible's arguments of yum/dnf (ansible-core 2.19), accepted so that a task is judged by
# its host, not by its spelling; none of them is acted on.
ARGUMENTS = (
    "name", "state", "enablerepo", "disablerepo", "conf_file", "disable_gpg_check", "installroot",
    "update_cache", "update_only", "exclude", "security", "bugfix", "list", "autoremove", "releasever",
    "skip_broken", "validate_certs", "sslverify", "allow_downgrade", "download_only", "download_dir",
    "lock_timeout", "install_weak_deps", "install_repoquery", "disable_excludes", "disable_plugin",
    "enable_plugin", "cacheonly", "nobest", "best", "allowerasing", "use_backend",
)  # fmt: skip


def schema(manager: str) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            key: {"description": f"Ansible's {manager} argument; accepted, never acted on (the task is refused)."}
            for key in sorted(set(ARGUMENTS))
        }
        | {"pkg": {"description": "Another name for name (Ansible's alias)."}},
    }


def refuse(manager: str, ctx: TaskContext, args: Mapping[str, Any]) -> NoReturn:
    names = args.get("name") or args.get("pkg") or []
    what = ", ".join(map(str, names)) if isinstance(names, list) else str(names)
    raise TaskFailed(
        f"{manager} is refused on {ctx.host_name}: rigger manages Debian/Ubuntu hosts only (apt), "
        f"and has no {manager} to install or remove {what or 'packages'} with; guard the task with "
        f"`when: ansible_pkg_mgr == '{manager}'` (it is then skipped on apt hosts) or use `apt`/`package`; "
        "nothing was changed"
    )
