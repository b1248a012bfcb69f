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
    hostvars = {name: dict(host.vars) for name, host in inventory.hosts.items() if host.vars}
    out["_meta"] = {"hostvars": hostvars, "profile": PROFILE}
    return out
