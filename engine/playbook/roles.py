"""Finding a role on disk and reading its parts (defaults, vars, meta), as Ansible does.

A role named ``web`` is searched in ``<playbook dir>/roles``, then ``roles_path`` (ansible.cfg
or ``ANSIBLE_ROLES_PATH``; default ``~/.ansible/roles:/usr/share/ansible/roles:/etc/ansible/roles``), then beside
the role that depends on it, then in the playbook's own directory; a path names itself.
Turning a role's tasks into steps is the loader's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import config
from engine.errors import ValidationError
from engine.playbook import collections
from engine.yamlload import load_file

# Keys of a role entry (``roles:`` item, dependency) that are not role parameters.
ROLE_KEYWORDS = frozenset(
    {"role", "name", "when", "tags", "vars", "become", "become_user", "environment", "no_log", "ignore_errors"}
)


@dataclass(frozen=True)
class RoleEntry:
    """One reference to a role: in ``roles:``, a dependency, or an import/include."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    keywords: Mapping[str, Any] = field(default_factory=dict)
    file: str = ""
    line: int = 0


def entry_from(data: Any, file: str, line: int) -> RoleEntry:
    """``- web`` or ``- {role: web, port: 80, when: ...}``."""
    if isinstance(data, str):
        return RoleEntry(name=data, file=file, line=line)
    if not isinstance(data, Mapping):
        raise ValidationError("a role is a name or a mapping with 'role:'", file=file, line=line)
    name = data.get("role", data.get("name"))
    if not isinstance(name, str) or not name:
        raise ValidationError("this role entry names no role ('role: NAME')", file=file, line=line)
    params = {k: v for k, v in data.items() if k not in ROLE_KEYWORDS}
    keywords = {k: v for k, v in data.items() if k in ROLE_KEYWORDS and k not in ("role", "name")}
    return RoleEntry(name=name, params=params, keywords=keywords, file=file, line=line)


def search_paths(playbook_dir: Path, owner: Path | None) -> list[Path]:
    paths = [playbook_dir / "roles", *config.current().roles_path]
    if owner is not None:
        paths.append(owner.parent)
    paths.append(playbook_dir)
    return paths


def find(entry: RoleEntry, playbook_dir: Path, owner: Path | None, search: tuple[str, ...] = ()) -> Path:
    """The role's folder. ``search``: the play's ``collections:``, searched first for a
    short name, as Ansible does."""
    fqcn = collections.split_fqcn(entry.name)
    if fqcn is not None:
        found = collections.role_dir(*fqcn, playbook_dir)
        if found is None:
            why = collections.not_found(fqcn[0], f"role '{fqcn[1]}'", playbook_dir)
            raise ValidationError(f"role '{entry.name}': {why}", file=entry.file, line=entry.line)
        return found
    for collection in search:
        found = collections.role_dir(collection, entry.name, playbook_dir)
        if found is not None:
            return found
    searched = search_paths(playbook_dir, owner)
    for base in searched:
        candidate = base / entry.name
        if candidate.is_dir():
            return candidate.resolve()
    direct = Path(entry.name).expanduser()
    if not direct.is_absolute():
        direct = playbook_dir / direct
    if direct.is_dir():
        return direct.resolve()
    raise ValidationError(
        f"the role '{entry.name}' was not found in {':'.join(str(p) for p in searched)}",
        file=entry.file,
        line=entry.line,
    )


def part_file(role_dir: Path, part: str, stem: str = "main") -> Path | None:
    """``tasks/main.yml`` (or ``.yaml``, ``.json``, no extension) if it exists."""
    for suffix in (".yml", ".yaml", ".json", ""):
        candidate = role_dir / part / f"{stem}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def read_mapping(role_dir: Path, part: str, stem: str = "main") -> dict[str, Any]:
    path = part_file(role_dir, part, stem)
    if path is None:
        return {}
    data = load_file(path)
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ValidationError(f"role {part} must be a mapping of variables", file=str(path), line=1)
    return dict(data)


@dataclass(frozen=True)
class RoleMeta:
    dependencies: tuple[RoleEntry, ...]
    allow_duplicates: bool


def read_meta(role_dir: Path) -> RoleMeta:
    path = part_file(role_dir, "meta")
    if path is None:
        return RoleMeta((), False)
    data = load_file(path) or {}
    if not isinstance(data, Mapping):
        raise ValidationError("role meta must be a mapping", file=str(path), line=1)
    deps = data.get("dependencies") or []
    if not isinstance(deps, list):
        raise ValidationError("'dependencies' must be a list of roles", file=str(path), line=getattr(data, "line", 1))
    lines = getattr(deps, "item_lines", [])
    entries = tuple(
        entry_from(dep, str(path), lines[i] if i < len(lines) else getattr(deps, "line", 1))
        for i, dep in enumerate(deps)
    )
    return RoleMeta(entries, bool(data.get("allow_duplicates", False)))
