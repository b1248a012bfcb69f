"""Groups and hosts while inventory files are read; mutable until frozen by engine.inventory.

Mirrors ansible-core's inventory data: every group is a descendant of ``all``; a host in
no group but ``all`` belongs to ``ungrouped``; a group's depth below ``all`` and its
``ansible_group_priority`` order the variable layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ValidationError
from engine.model import unknown_connection


def note_connection(
    variables: Mapping[str, Any], where: tuple[str, int | None], found: dict[str, ValidationError]
) -> None:
    """Remember an ``ansible_connection`` rigger has no transport for, at the line that sets
    it (the first place, per value). It is refused only when a play targets a host that has
    it: Ansible fails only when it connects, so a stray ``mitogen_doas`` host elsewhere in
    the inventory must not stop every playbook."""
    value = variables.get("ansible_connection")
    problem = unknown_connection(value)
    if problem and str(value) not in found:
        line_of = getattr(variables, "line_of", None)
        found[str(value)] = ValidationError(
            problem, file=where[0], line=line_of("ansible_connection") if line_of else where[1]
        )


@dataclass(frozen=True)
class Membership:
    """A host put in a group during a run (``group_by``), the group under ``parents``."""

    host: str
    group: str
    parents: tuple[str, ...] = ("all",)


@dataclass
class GroupData:
    name: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    depth: int = 0
    priority: int = 1


@dataclass
class InventoryData:
    groups: dict[str, GroupData] = field(default_factory=dict)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    direct_groups: dict[str, list[str]] = field(default_factory=dict)
    # the source file that named each host first: its inventory_file (Ansible's rule)
    host_sources: dict[str, str] = field(default_factory=dict)
    # an unknown ansible_connection value -> where it was first written (note_connection)
    bad_connections: dict[str, ValidationError] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.add_group("all")
        self.add_group("ungrouped")
        self.add_child("all", "ungrouped", ("<inventory>", None))

    def add_group(self, name: str) -> None:
        self.groups.setdefault(name, GroupData(name))

    def add_host(self, name: str, group: str, port: int | None, where: tuple[str, int | None]) -> None:
        self.add_group(group)
        self.hosts.setdefault(name, {})
        if where[0] != "<inventory>":
            self.host_sources.setdefault(name, where[0])
        memberships = self.direct_groups.setdefault(name, [])
        if group not in memberships:
            memberships.append(group)
            self.groups[group].hosts.append(name)
        if port is not None:
            self.hosts[name]["ansible_port"] = port

    def join(self, membership: Membership) -> None:
        """ansible-core's ``_add_group``: the group (made if new) under each parent, the host
        in it; a host the inventory does not name (the implicit localhost) stays out."""
        if membership.host not in self.hosts:
            return
        where = ("<group_by>", None)
        self.add_group(membership.group)
        for parent in membership.parents:
            self.add_child(parent, membership.group, where)
        self.add_host(membership.host, membership.group, None, ("<inventory>", None))

    def set_host_vars(self, name: str, variables: Mapping[str, Any], where: tuple[str, int | None]) -> None:
        if "ansible_host" in variables and not str(variables["ansible_host"] or "").strip():
            raise ValidationError(f"host '{name}' has an empty ansible_host (no address)", file=where[0], line=where[1])
        note_connection(variables, where, self.bad_connections)
        self.hosts[name].update(variables)

    def set_group_vars(self, name: str, variables: Mapping[str, Any], where: tuple[str, int | None]) -> None:
        note_connection(variables, where, self.bad_connections)
        group = self.groups[name]
        for key, value in variables.items():
            if key == "ansible_group_priority":
                group.priority = int(value)
            else:
                group.vars[key] = value

    def add_child(self, parent: str, child: str, where: tuple[str, int | None]) -> None:
        self.add_group(parent)
        self.add_group(child)
        if parent == child or parent in self.descendants(child):
            raise ValidationError(
                f"adding group '{child}' as a child of '{parent}' makes a loop", file=where[0], line=where[1]
            )
        if child not in self.groups[parent].children:
            self.groups[parent].children.append(child)
        if parent not in self.groups[child].parents:
            self.groups[child].parents.append(parent)

    def ancestors(self, name: str) -> set[str]:
        found: set[str] = set()
        frontier = list(self.groups[name].parents)
        while frontier:
            group = frontier.pop()
            if group not in found:
                found.add(group)
                frontier.extend(self.groups[group].parents)
        return found

    def descendants(self, name: str) -> list[str]:
        """The group and every group below it, level by level in declaration order."""
        ordered, seen = [name], {name}
        level = [name]
        while level:
            following: list[str] = []
            for group in level:
                for child in self.groups[group].children:
                    if child not in seen:
                        seen.add(child)
                        ordered.append(child)
                        following.append(child)
            level = following
        return ordered

    def reconcile(self) -> None:
        """Every group under ``all``; hosts in no other group in ``ungrouped``; depths."""
        for name in list(self.groups):
            if name != "all" and not self.groups[name].parents:
                self.add_child("all", name, ("<inventory>", None))
        ungrouped = self.groups["ungrouped"]
        for memberships in self.direct_groups.values():
            grouped = any(g not in ("all", "ungrouped") for g in memberships)
            if grouped and "ungrouped" in memberships:
                memberships.remove("ungrouped")
            elif not grouped and "ungrouped" not in memberships:
                memberships.append("ungrouped")
        ungrouped.hosts = [h for h in self.hosts if "ungrouped" in self.direct_groups[h]]
        self.groups["all"].hosts = [h for h in self.groups["all"].hosts if h not in set(ungrouped.hosts)]
        self._depths()

    def _depths(self) -> None:
        level, depth = ["all"], 0
        while level and depth <= len(self.groups):
            following = []
            for name in level:
                self.groups[name].depth = max(self.groups[name].depth, depth)
                following.extend(self.groups[name].children)
            level, depth = following, depth + 1

    def hosts_of(self, group: str) -> list[str]:
        """Ansible's group.get_hosts(): own hosts, then those of the groups below, once each."""
        hosts: dict[str, None] = {}
        for name in self.descendants(group):
            hosts.update(dict.fromkeys(self.groups[name].hosts))
        return list(hosts)

    def groups_of(self, host: str) -> list[str]:
        """Every group the host is in, directly or through children, in declaration order."""
        found = {"all"}
        for name in self.direct_groups.get(host, []):
            found.add(name)
            found |= self.ancestors(name)
        return [name for name in self.groups if name in found]
