"""Ansible-compatible inventories (YAML and INI), group_vars/host_vars, host patterns.

Variable precedence for a host: group ``all`` < other groups (parents before children,
then by name) < host variables. ``group_vars/`` and ``host_vars/`` beside the inventory
file win over variables written in the inventory file itself, as in Ansible.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ValidationError
from engine.playbook import Host, Inventory
from engine.yamlload import LocatedDict, decode, line_of, load_file, load_text, read_recorded

_RANGE = re.compile(r"\[(\d+):(\d+)\]")
_GROUP_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
LOCALHOST_VARS = {"ansible_connection": "local"}


@dataclass
class _Builder:
    """Mutable while reading; frozen into an Inventory at the end."""

    host_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_vars: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_hosts: dict[str, list[str]] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)

    def group(self, name: str) -> None:
        self.group_hosts.setdefault(name, [])
        self.children.setdefault(name, [])
        self.group_vars.setdefault(name, {})

    def add_host(self, group: str, host: str, variables: Mapping[str, Any]) -> None:
        self.group(group)
        if host not in self.group_hosts[group]:
            self.group_hosts[group].append(host)
        self.host_vars.setdefault(host, {}).update(variables)


def expand_range(name: str) -> list[str]:
    match = _RANGE.search(name)
    if not match:
        return [name]
    start, end = match.group(1), match.group(2)
    width = len(start) if start.startswith("0") else 0
    names = []
    for number in range(int(start), int(end) + 1):
        piece = str(number).zfill(width)
        names.extend(expand_range(name[: match.start()] + piece + name[match.end() :]))
    return names


def _check_host(name: Any, variables: Mapping[str, Any], where: tuple[str, int | None]) -> None:
    if not isinstance(name, str) or not name.strip():
        raise ValidationError("an inventory host needs a name", file=where[0], line=where[1])
    if "ansible_host" in variables and not str(variables["ansible_host"] or "").strip():
        raise ValidationError(f"host '{name}' has an empty ansible_host (no address)", file=where[0], line=where[1])


def _read_yaml_group(builder: _Builder, name: str, data: Any, file: str, line: int | None) -> None:
    builder.group(name)
    if data is None:
        return
    if not isinstance(data, Mapping):
        raise ValidationError(f"group '{name}' must be a mapping with hosts/children/vars", file=file, line=line)
    unknown = set(data) - {"hosts", "children", "vars"}
    if unknown:
        key = sorted(unknown)[0]
        raise ValidationError(
            f"group '{name}': unknown key '{key}' (expected hosts, children, vars)", file=file, line=line_of(data, key)
        )
    hosts = data.get("hosts") or {}
    if not isinstance(hosts, Mapping):
        raise ValidationError(
            f"group '{name}': hosts must be a mapping of host names", file=file, line=line_of(data, "hosts")
        )
    for host_pattern, host_vars in hosts.items():
        host_vars = host_vars or {}
        where = (file, line_of(hosts, host_pattern))
        if not isinstance(host_vars, Mapping):
            raise ValidationError(f"host '{host_pattern}': variables must be a mapping", file=where[0], line=where[1])
        _check_host(host_pattern, host_vars, where)
        for host in expand_range(str(host_pattern)):
            builder.add_host(name, host, host_vars)
    builder.group_vars[name].update(data.get("vars") or {})
    for child, child_data in (data.get("children") or {}).items():
        if child not in builder.children[name]:
            builder.children[name].append(child)
        _read_yaml_group(builder, child, child_data, file, line_of(data.get("children"), child))


def _read_yaml(builder: _Builder, data: Any, file: str) -> None:
    if not isinstance(data, Mapping):
        raise ValidationError("a YAML inventory is a mapping of groups (usually 'all:')", file=file, line=1)
    for group, group_data in data.items():
        _read_yaml_group(builder, str(group), group_data, file, line_of(data, group))
        if group != "all":
            builder.group("all")
            if group not in builder.children["all"]:
                builder.children["all"].append(group)


def _ini_value(text: str) -> Any:
    try:
        value = load_text(text, "<ini value>")
    except ValidationError:
        return text
    return value if isinstance(value, (int, float, bool)) and not isinstance(value, LocatedDict) else text


def _ini_pairs(parts: Iterable[str], file: str, line: int) -> dict[str, Any]:
    pairs: dict[str, Any] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep:
            raise ValidationError(f"expected key=value, got {part!r}", file=file, line=line)
        pairs[key] = _ini_value(value)
    return pairs


def _read_ini(builder: _Builder, text: str, file: str) -> None:
    section, kind = "ungrouped", "hosts"
    builder.group("all")
    builder.group("ungrouped")
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            header = re.fullmatch(r"\[([^\]:]+)(?::(vars|children))?\]", line)
            if not header:
                raise ValidationError(f"bad section header {line!r}", file=file, line=number)
            section, kind = header.group(1), header.group(2) or "hosts"
            if not _GROUP_NAME.match(section):
                raise ValidationError(f"bad group name {section!r}", file=file, line=number)
            builder.group(section)
            continue
        try:
            parts = shlex.split(line, comments=True)
        except ValueError as exc:
            raise ValidationError(f"cannot parse line: {exc}", file=file, line=number) from None
        if kind == "vars":
            builder.group_vars[section].update(_ini_pairs(parts, file, number))
        elif kind == "children":
            builder.group(parts[0])
            builder.children[section].append(parts[0])
        else:
            variables = _ini_pairs(parts[1:], file, number)
            _check_host(parts[0], variables, (file, number))
            for host in expand_range(parts[0]):
                builder.add_host(section, host, variables)
    for group in builder.group_hosts:
        if group != "all" and group not in builder.children["all"] and not _is_child(builder, group):
            builder.children["all"].append(group)


def _is_child(builder: _Builder, group: str) -> bool:
    return any(group in kids for parent, kids in builder.children.items() if parent != "all")


def _vars_dir_files(base: Path, name: str) -> list[Path]:
    files = [base / f"{name}{ext}" for ext in ("", ".yml", ".yaml", ".json")]
    found = [f for f in files if f.is_file()]
    folder = base / name
    if folder.is_dir():
        found += sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml", ".json"))
    return found


def _load_vars_file(path: Path) -> dict[str, Any]:
    data = load_file(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ValidationError("a vars file must be a mapping", file=str(path), line=1)
    return dict(data)


def _apply_vars_dirs(builder: _Builder, base: Path) -> None:
    for group in list(builder.group_hosts):
        for path in _vars_dir_files(base / "group_vars", group):
            builder.group_vars[group].update(_load_vars_file(path))
    for host in list(builder.host_vars):
        for path in _vars_dir_files(base / "host_vars", host):
            builder.host_vars[host].update(_load_vars_file(path))


def read_source(builder: _Builder, path: Path) -> None:
    name = str(path)
    if not path.is_file():
        raise ValidationError("inventory file not found", file=name)
    text = decode(read_recorded(path), name)
    if path.suffix in (".yml", ".yaml", ".json") or text.lstrip().startswith(("all:", "---")):
        data = load_text(text, name)
        if data is None:
            raise ValidationError("the inventory is empty", file=name)
        _read_yaml(builder, data, name)
    else:
        _read_ini(builder, text, name)
    _apply_vars_dirs(builder, path.parent)


def _ancestry(builder: _Builder) -> dict[str, int]:
    """Depth of every group below 'all', to order variable layers parents first."""
    depth: dict[str, int] = {"all": 0}
    frontier = ["all"]
    while frontier:
        parent = frontier.pop()
        for child in builder.children.get(parent, []):
            if depth.get(child, -1) < depth[parent] + 1 and depth[parent] < 50:
                depth[child] = depth[parent] + 1
                frontier.append(child)
    return depth


def _groups_of(builder: _Builder, host: str) -> set[str]:
    direct = {g for g, hosts in builder.group_hosts.items() if host in hosts}
    result = set(direct) | {"all"}
    changed = True
    while changed:
        changed = False
        for parent, kids in builder.children.items():
            if parent not in result and any(k in result for k in kids):
                result.add(parent)
                changed = True
    return result


def _freeze(builder: _Builder, sources: tuple[str, ...]) -> Inventory:
    depth = _ancestry(builder)
    hosts: dict[str, Host] = {}
    for host, own_vars in builder.host_vars.items():
        groups = sorted(_groups_of(builder, host), key=lambda g: (depth.get(g, 1), g))
        merged: dict[str, Any] = {}
        for group in groups:
            merged.update(builder.group_vars.get(group, {}))
        merged.update(own_vars)
        hosts[host] = Host(name=host, vars=merged, groups=tuple(g for g in groups if g != "all"))
    members = {
        group: tuple(h for h in hosts if group in hosts[h].groups or group == "all") for group in builder.group_hosts
    }
    return Inventory(hosts=hosts, groups=members, sources=sources)


def load_inventory(paths: Iterable[str]) -> Inventory:
    """Read every source; with none, an implicit localhost on the local connection."""
    builder = _Builder()
    sources = tuple(paths)
    for source in sources:
        read_source(builder, Path(source))
    if not sources:
        builder.add_host("ungrouped", "localhost", LOCALHOST_VARS)
        builder.group("all")
        builder.children["all"].append("ungrouped")
    return _freeze(builder, sources)


class PatternError(ValidationError):
    pass


def _match_one(inventory: Inventory, term: str) -> list[str]:
    if term in ("all", "*"):
        return list(inventory.hosts)
    if term in inventory.groups:
        return list(inventory.groups[term])
    if term in inventory.hosts:
        return [term]
    if term.startswith("~"):
        regex = re.compile(term[1:])
        return [h for h in inventory.hosts if regex.search(h)]
    if any(ch in term for ch in "*?["):
        hosts = [h for h in inventory.hosts if fnmatch.fnmatchcase(h, term)]
        for group, members in inventory.groups.items():
            if fnmatch.fnmatchcase(group, term):
                hosts += [h for h in members if h not in hosts]
        return hosts
    return []


def select_hosts(inventory: Inventory, pattern: str) -> list[str]:
    """Ansible host patterns: ``a:b`` union, ``a:!b`` exclusion, ``a:&b`` intersection."""
    terms = [t.strip() for t in re.split(r"[:,]", pattern) if t.strip()]
    if not terms:
        return []
    selected: list[str] = []
    for term in terms:
        if term.startswith("!"):
            excluded = set(_match_one(inventory, term[1:]))
            selected = [h for h in selected if h not in excluded]
        elif term.startswith("&"):
            kept = set(_match_one(inventory, term[1:]))
            selected = [h for h in selected if h in kept]
        else:
            selected += [h for h in _match_one(inventory, term) if h not in selected]
    return selected


def unknown_terms(inventory: Inventory, pattern: str) -> list[str]:
    terms = [t.strip().lstrip("!&") for t in re.split(r"[:,]", pattern) if t.strip()]
    return [t for t in terms if not _match_one(inventory, t) and t not in inventory.groups]
