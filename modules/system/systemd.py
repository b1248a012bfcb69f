"""Start, stop, restart, reload, enable, disable and mask systemd units (ansible.builtin.systemd).

Ansible's `systemd` is its `systemd_service` under an older name: the same arguments,
return values and check mode (see `systemd_service`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import Change, Result, TaskContext, Unchanged
from modules.system import systemd_service, units

SCHEMA = systemd_service.SCHEMA


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Change | Unchanged:
    return units.plan_units(ctx, systemd_service.normalized(args), "systemd")


def apply(ctx: TaskContext, args: Mapping[str, Any], change: Change) -> Result:
    return units.apply_units(ctx, systemd_service.normalized(args), change)
