"""``rigger inventory --list``: the resolved inventory in ``ansible-inventory --list``'s shape.

Groups from ``all`` down, each with its own hosts (``all`` lists none) and its children,
empty keys and empty groups left out; ``_meta.hostvars`` holds every host's variables
(inventory files, group_vars/host_vars) as Ansible resolves them, not yet templated.
"""

from __future__ import annotations

from typing import Any

from engine.model import Inventory

# The profile ansible-core 2.19 names in _meta; kept so listings compare equal.
PROFILE = "inventory_legacy"
# Names ansible-inventory leaves out of hostvars (ansible-core's INTERNAL_STATIC_VARS):
# magic variables, which an inventory can set but a listing never shows.
INTERNAL_VARS = frozenset(
    [
        "ansible_async_path",
        "ansible_collection_name",
        "ansible_config_file",
        "ansible_dependent_role_names",
        "ansible_diff_mode",
        "ansible_facts",
        "ansible_forks",
        "ansible_inventory_sources",
        "ansible_limit",
        "ansible_play_batch",
        "ansible_play_hosts",
        "ansible_play_hosts_all",
        "ansible_play_role_names",
        "ansible_playbook_python",
        "ansible_role_name",
        "ansible_role_names",
        "ansible_run_tags",
        "ansible_skip_tags",
        "ansible_verbosity",
        "ansible_version",
        "group_names",
        "groups",
        "hostvars",
        "inventory_dir",
        "inventory_file",
        "inventory_hostname",
        "inventory_hostname_short",
        "play_hosts",
        "playbook_dir",
        "role_name",
        "role_names",
        "role_path",
        "role_uuid",
    ]
)


def _format_group(inventory: Inventory, group: str, seen: set[str], out: dict[str, Any]) -> None:
    body: dict[str, Any] = {}
    if group != "all":
        hosts = list(inventory.direct_hosts.get(group, ()))
        if hosts:
            body["hosts"] = hosts
    children = list(inventory.children.get(group, ()))
    if children:
        body["children"] = children
    if body:
        out[group] = body
    for child in children:
        if child not in seen:
            seen.add(child)
            _format_group(inventory, child, seen, out)


def listing(inventory: Inventory) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _format_group(inventory, "all", set(), out)
    hostvars = {}
    for name, host in inventory.hosts.items():
        shown = {key: value for key, value in host.vars.items() if key not in INTERNAL_VARS}
        if shown:
            hostvars[name] = shown
    out["_meta"] = {"hostvars": hostvars, "profile": PROFILE}
    return out
