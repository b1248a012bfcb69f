"""Ansible-compatible inventories: sources (INI, YAML, folders of them) -> frozen Inventory.

The formats live in engine.inventory.formats, the variable layers in engine.inventory.varsources,
host patterns in engine.inventory.patterns. With no inventory at all there are no hosts, but
``localhost`` still names Ansible's implicit localhost (local connection, in no group).

Package ``engine.inventory`` owns the hosts and groups a run may reach: reading INI and YAML
sources (``formats.py`` into the mutable ``data.py``), inventory variables and their files
(``varsources.py``), host patterns and ``--limit`` (``patterns.py``), and
``rigger inventory --list`` (``listing.py``). It renders no template and touches no host.

May import: engine.errors, engine.yamlload, engine.model.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.errors import ValidationError
from engine.inventory.data import InventoryData, Membership
from engine.inventory.formats import expand_range, read_ini, read_yaml, split_port
from engine.inventory.patterns import require_limit_matches, select_hosts, targeted_connections
from engine.inventory.varsources import VarsDirs, host_variables, implicit_localhost_variables
from engine.model import Host, Inventory
from engine.yamlload import decode, load_text, read_recorded

__all__ = [
    "Membership",
    "expand_range",
    "inline_hosts",
    "load_inventory",
    "require_limit_matches",
    "select_hosts",
    "targeted_connections",
]

YAML_EXTENSIONS = (".yml", ".yaml", ".json")
# ansible-core's INVENTORY_IGNORE_EXTS: files in an inventory folder that are not sources
IGNORED_EXTENSIONS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry")
VARS_FOLDERS = ("group_vars", "host_vars")


def _yaml_document(path: Path, text: str) -> Any:
    """The YAML document when ansible-core's yaml plugin would take the file, else None:
    a .yml/.yaml/.json file always; a file without extension when it parses to a mapping."""
    if path.suffix in YAML_EXTENSIONS:
        document = load_text(text, str(path))
        if document is None:
            raise ValidationError("the inventory is empty", file=str(path))
        return document
    if path.suffix:
        return None
    try:
        document = load_text(text, str(path))
    except ValidationError:
        return None
    return document if isinstance(document, dict) else None


def _read_file(data: InventoryData, path: Path) -> None:
    name = str(path)
    text = decode(read_recorded(path), name)
    document = _yaml_document(path, text)
    if document is not None:
        read_yaml(data, document, name)
    else:
        read_ini(data, text, name)


def _folder_sources(folder: Path) -> list[Path]:
    return [
        entry
        for entry in sorted(folder.iterdir(), key=lambda p: p.name)
        if entry.is_file()
        and not entry.name.startswith(".")
        and not entry.name.endswith(IGNORED_EXTENSIONS)
        and entry.name not in VARS_FOLDERS
    ]


def inline_hosts(source: str) -> list[str] | None:
    """ansible-core's host_list inventory: a -i argument that holds a comma and names no
    file is a list of hosts (``localhost,``, ``gpu01,gpu02:2222``); None for a path."""
    if "," not in source or Path(source).exists():
        return None
    return [name.strip() for name in source.split(",") if name.strip()]


def _read_inline(data: InventoryData, names: list[str], source: str) -> None:
    """The hosts in group ungrouped, ``host:port`` giving ansible_port, as host_list does."""
    for entry in names:
        name, port = split_port(entry)
        data.add_host(name, "ungrouped", port, (source, None))


def read_source(data: InventoryData, path: Path) -> Path | None:
    """Read one -i source; returns the folder its group_vars/host_vars live in (None for a
    host list: ansible-core reads no group_vars/host_vars for one)."""
    inline = inline_hosts(str(path))
    if inline is not None:
        _read_inline(data, inline, str(path))
        return None
    if path.is_dir():
        for entry in _folder_sources(path):
            _read_file(data, entry)
        return path
    if not path.is_file():
        raise ValidationError("inventory file not found", file=str(path))
    _read_file(data, path)
    return path.parent


def _freeze(data: InventoryData, sources: tuple[str, ...], dirs: VarsDirs) -> Inventory:
    hosts = {
        name: Host(
            name=name,
            vars=host_variables(data, name, dirs),
            groups=tuple(sorted(g for g in data.groups_of(name) if g != "all")),
            source=data.host_sources.get(name, ""),
        )
        for name in data.hosts
    }
    unusable = {
        name: dirs.bad_connections[str(host.vars["ansible_connection"])]
        for name, host in hosts.items()
        if str(host.vars.get("ansible_connection")) in dirs.bad_connections
    }
    localhost = None
    if "localhost" not in hosts:
        localhost = Host("localhost", implicit_localhost_variables(data, dirs, sys.executable), ())
    return Inventory(
        hosts=hosts,
        groups={name: tuple(data.hosts_of(name)) for name in data.groups},
        sources=sources,
        children={name: tuple(group.children) for name, group in data.groups.items()},
        direct_hosts={name: tuple(group.hosts) for name, group in data.groups.items()},
        implicit_localhost=localhost,
        unusable=unusable,
    )


def load_inventory(
    paths: Iterable[str], playbook_dir: str | Path | None = None, joined: Iterable[Membership] = ()
) -> Inventory:
    """Read every source; ``playbook_dir`` adds the group_vars/host_vars beside the playbook;
    ``joined``: the groups hosts were put in during the run (``group_by``), in order."""
    data = InventoryData()
    sources = tuple(paths)
    bases = [base for source in sources if (base := read_source(data, Path(source))) is not None]
    for membership in joined:
        data.join(membership)
    data.reconcile()
    dirs = VarsDirs(bases, Path(playbook_dir) if playbook_dir is not None else None, data.bad_connections)
    return _freeze(data, sources, dirs)
