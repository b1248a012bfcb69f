"""Refused by name: `yum` (Red Hat family packages); rigger manages Debian/Ubuntu hosts only.

Ansible's `yum` arguments are accepted, so a playbook that installs packages on several
families stays valid: on an apt host a task guarded by `when: ansible_os_family ==
"RedHat"` (or `ansible_pkg_mgr == "yum"`) is skipped as in Ansible. A `yum` task that does
run fails before anything on the host is read or changed, saying why and what to use
instead (`apt`, or `package` on an apt host).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext
from modules.system import redhat

SCHEMA = redhat.schema("yum")


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change:
    redhat.refuse("yum", ctx, args)


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    redhat.refuse("yum", ctx, args)
