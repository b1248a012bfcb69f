"""Put the host in an inventory group named from its variables (Ansible's `group_by`).

The host joins the group `key` (spaces become `-`, as in Ansible), and that group joins each
of `parents` (default `all`). The run's inventory changes after the task, as ansible-core's
strategy changes it: later plays' host patterns, `groups` and `group_names` see the host in
it, and the group's `group_vars` reach the host. The task is `changed` when the host was
not in the group yet (or the group not under a parent yet). It touches no host and runs the
same in check mode; the groups last until the run ends (or `meta: refresh_inventory`). The
result's `add_group` and `parent_groups` are the names the run used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.module_api import TaskContext, TaskFailed, Unchanged

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key"],
    "properties": {
        "key": {
            "type": ["string", "integer", "number"],
            "minLength": 1,
            "description": "The group to put the host in, usually templated (`gpu_{{ facts.gpu_model }}`).",
        },
        "parents": {
            "type": ["array", "string"],
            "items": {"type": "string", "minLength": 1},
            "default": ["all"],
            "description": "The group(s) the new group goes under (one name or a list).",
        },
    },
}


def plan(ctx: TaskContext, args: Mapping[str, Any]) -> Unchanged:
    key = str(args["key"]).replace(" ", "-")
    parents = [args["parents"]] if isinstance(args["parents"], str) else list(args["parents"])
    names = [str(name).replace(" ", "-") for name in parents]
    if key in names:  # Ansible's inventory refuses it too: a group cannot be its own parent
        raise TaskFailed(f"group_by: group {key!r} cannot be a parent of itself (parents: {names})")
    return Unchanged(f"group {key}", {"add_group": key, "parent_groups": names})
