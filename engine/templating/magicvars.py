"""Ansible's magic variables: what a task sees about the run, the play and the inventory.

``hostvars`` is lazy: ``hostvars['web1'].x`` renders web1's own variables only when read.
Host and group names are ``Inert`` (engine/templating/inert.py): never rendered.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from typing import Any

from engine.model import Inventory
from engine.templating.inert import Inert, inert_names

# every name a run defines without the user (the static check accepts exactly these)
MAGIC_VARIABLES = frozenset(
    {
        "inventory_hostname",
        "inventory_hostname_short",
        "group_names",
        "groups",
        "hostvars",
        "ansible_host",
        "ansible_ssh_host",
        "ansible_play_hosts",
        "ansible_play_hosts_all",
        "ansible_play_batch",
        "play_hosts",
        "ansible_check_mode",
        "ansible_diff_mode",
        "ansible_forks",
        "ansible_limit",
        "ansible_run_tags",
        "ansible_skip_tags",
        "ansible_verbosity",
        "ansible_playbook_python",
        "ansible_inventory_sources",
        "playbook_dir",
        "facts",
        "ansible_version",
        "inventory_dir",
        "inventory_file",
        "vars",  # the variables in scope (engine/templating Scope answers it)
    }
)
# The Ansible whose semantics rigger follows (checked by the differential suite against it).
ANSIBLE_VERSION = {"full": "2.19.14", "major": 2, "minor": 19, "revision": 14, "string": "2.19.14"}


class HostVars(Mapping[str, Any]):
    """``hostvars``: every inventory host's variables, each resolved on first read."""

    def __init__(self, inventory: Inventory, scope_of: Callable[[str], Mapping[str, Any]]):
        self._inventory = inventory
        self._scope_of = scope_of

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        self._inventory.host(name)  # KeyError for a name that is no host (implicit localhost is)
        return self._scope_of(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._inventory.hosts)

    def __len__(self) -> int:
        return len(self._inventory.hosts)


def groups_variable(inventory: Inventory) -> dict[str, list[str]]:
    """``groups``: every group and its hosts, names inert."""
    return {Inert(group): inert_names(hosts) for group, hosts in inventory.groups.items()}


def run_variables(
    inventory: Inventory,
    check_mode: bool,
    diff: bool,
    forks: int,
    limit: str | None,
    verbosity: int,
    tags: frozenset[str] = frozenset(),
    skip_tags: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The same for every host and play of one run."""
    return {
        "ansible_run_tags": sorted(tags) or ["all"],
        "ansible_skip_tags": sorted(skip_tags),
        "groups": groups_variable(inventory),
        "ansible_check_mode": check_mode,
        "ansible_diff_mode": diff,
        "ansible_forks": forks,
        "ansible_limit": limit,
        "ansible_verbosity": verbosity,
        "ansible_playbook_python": sys.executable,
        "ansible_inventory_sources": [str(s) for s in inventory.sources],
        "ansible_version": dict(ANSIBLE_VERSION),
    }


def play_variables(play_hosts: Sequence[str], batch: Sequence[str], down: Set[str] = frozenset()) -> dict[str, Any]:
    """``ansible_play_hosts`` spans every batch of the play, ``ansible_play_batch`` (and the
    old ``play_hosts``) only the current one; both leave out the hosts that failed or were
    unreachable (``down``), ``ansible_play_hosts_all`` keeps them."""
    batch_alive = [h for h in batch if h not in down]
    return {
        "ansible_play_hosts_all": inert_names(play_hosts),
        "ansible_play_hosts": inert_names(h for h in play_hosts if h not in down),
        "play_hosts": inert_names(batch_alive),
        "ansible_play_batch": inert_names(batch_alive),
    }


# Ansible's connection settings under their current and their old ``ansible_ssh_*`` names
CONNECTION_ALIASES = (
    ("ansible_host", "ansible_ssh_host"),
    ("ansible_user", "ansible_ssh_user"),
    ("ansible_port", "ansible_ssh_port"),
    ("ansible_password", "ansible_ssh_pass"),
)


def host_variables(inventory: Inventory, name: str) -> dict[str, Any]:
    """Per host; ``ansible_host`` is the inventory name unless the inventory gives one."""
    host = inventory.host(name)
    magic: dict[str, Any] = {
        "inventory_hostname": Inert(name),
        "inventory_hostname_short": Inert(name.split(".")[0]),
        "group_names": inert_names(host.groups),
    }
    for new, old in CONNECTION_ALIASES:  # each name of a connection setting shows its value
        value = host.vars.get(new, host.vars.get(old, Inert(name) if new == "ansible_host" else None))
        magic.update({key: value for key in (new, old) if key not in host.vars and value is not None})
    if host.source:
        magic["inventory_file"] = os.path.abspath(host.source)
        magic["inventory_dir"] = os.path.dirname(os.path.abspath(host.source))
    return magic
