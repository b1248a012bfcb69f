"""A host's inventory variables, layered in Ansible's documented precedence (lowest first).

1. group ``all`` in the inventory files, then the host's other groups (by depth below
   ``all``, ``ansible_group_priority``, name);
2. ``group_vars/all`` beside each inventory source, then beside the playbook;
3. ``group_vars/<group>`` beside each inventory source, then beside the playbook;
4. the host's variables in the inventory files;
5. ``host_vars/<host>`` beside each inventory source, then beside the playbook.

Play variables, facts, set_fact/register and extra vars come on top (engine.run.runner).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ValidationError
from engine.inventory.data import InventoryData, note_connection
from engine.yamlload import load_file

VARS_EXTENSIONS = (".yml", ".yaml", ".json")


def _folder_files(folder: Path) -> list[Path]:
    """Ansible's order in a vars folder: sorted, recursive, hidden files and backups skipped."""
    found: list[Path] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        if entry.is_dir() and not entry.suffix:
            found += _folder_files(entry)
        elif entry.is_file() and (not entry.suffix or entry.suffix in VARS_EXTENSIONS):
            found.append(entry)
    return found


def vars_files(base: Path, name: str) -> list[Path]:
    """``<base>/<name>``, ``<name>.yml``, ``.yaml``, ``.json``; a folder of that name read whole."""
    found: list[Path] = []
    for extension in ("", *VARS_EXTENSIONS):
        path = base / f"{name}{extension}"
        if path.is_dir():
            found += _folder_files(path)
        elif path.is_file():
            found.append(path)
    return found


def load_vars_file(path: Path, bad_connections: dict[str, ValidationError]) -> dict[str, Any]:
    data = load_file(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ValidationError("a vars file must be a mapping", file=str(path), line=1)
    note_connection(data, (str(path), 1), bad_connections)
    return dict(data)


@dataclass
class VarsDirs:
    """group_vars/ and host_vars/ folders beside the inventory sources and the playbook."""

    inventory_bases: Sequence[Path]
    playbook_base: Path | None = None
    # where an unknown ansible_connection was written (shared with the InventoryData)
    bad_connections: dict[str, ValidationError] = field(default_factory=dict)
    _cache: dict[tuple[Path, str, str], dict[str, Any]] = field(default_factory=dict)
    _listings: dict[Path, frozenset[str]] = field(default_factory=dict)

    def _present(self, folder: Path, name: str) -> bool:
        """One directory listing per folder instead of four stat calls per host."""
        if folder not in self._listings:
            self._listings[folder] = frozenset(p.name for p in folder.iterdir()) if folder.is_dir() else frozenset()
        listing = self._listings[folder]
        return any(f"{name}{extension}" in listing for extension in ("", *VARS_EXTENSIONS))

    def _load(self, base: Path, kind: str, name: str) -> dict[str, Any]:
        key = (base, kind, name)
        if key not in self._cache:
            merged: dict[str, Any] = {}
            if self._present(base / kind, name):
                for path in vars_files(base / kind, name):
                    merged.update(load_vars_file(path, self.bad_connections))
            self._cache[key] = merged
        return self._cache[key]

    def layers(self, kind: str, names: Sequence[str]) -> list[dict[str, Any]]:
        """Inventory sources first (each name in turn), then the playbook's folder."""
        layers = [self._load(base, kind, name) for base in self.inventory_bases for name in names]
        if self.playbook_base is not None:
            layers += [self._load(self.playbook_base, kind, name) for name in names]
        return layers


def _sorted_groups(data: InventoryData, names: Sequence[str]) -> list[str]:
    groups = [data.groups[name] for name in names if name != "all"]
    return [g.name for g in sorted(groups, key=lambda g: (g.depth, g.priority, g.name))]


def host_variables(data: InventoryData, host: str, dirs: VarsDirs) -> dict[str, Any]:
    groups = _sorted_groups(data, data.groups_of(host))
    layers: list[Mapping[str, Any]] = [data.groups["all"].vars]
    layers += [data.groups[name].vars for name in groups]
    layers += dirs.layers("group_vars", ["all"])
    layers += dirs.layers("group_vars", groups)
    layers.append(data.hosts[host])
    layers += dirs.layers("host_vars", [host])
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    return merged


def implicit_localhost_variables(data: InventoryData, dirs: VarsDirs, python: str) -> dict[str, Any]:
    """Ansible's implicit localhost: in no group, yet group ``all``'s variables reach it."""
    merged: dict[str, Any] = {}
    for layer in [data.groups["all"].vars, *dirs.layers("group_vars", ["all"])]:
        merged.update(layer)
    merged.update({"ansible_connection": "local", "ansible_python_interpreter": python})
    for layer in dirs.layers("host_vars", ["localhost"]):
        merged.update(layer)
    return merged
