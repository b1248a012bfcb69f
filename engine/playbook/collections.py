"""Roles and playbooks from installed Ansible collections, found as Ansible finds them.

A collection ``ns.coll`` lives in ``<path>/ansible_collections/ns/coll`` for each path of
``<playbook dir>/collections`` then ``collections_path`` (ansible.cfg or
``ANSIBLE_COLLECTIONS_PATH``; default ``~/.ansible/collections:/usr/share/ansible/collections``).
Its roles are ``roles/<name>``, its playbooks ``playbooks/<name>.yml``. Modules from
collections are not run: the loader refuses them by name, with the collection named.
"""

from __future__ import annotations

from pathlib import Path

from engine import config

PLAYBOOK_SUFFIXES = (".yml", ".yaml")


def search_paths(playbook_dir: Path) -> list[Path]:
    return [playbook_dir / "collections", *config.current().collections_path]


def split_fqcn(name: str) -> tuple[str, str] | None:
    """``ns.coll.item`` -> (``ns.coll``, ``item``); None for a name that is not one."""
    parts = name.split(".")
    if "/" in name or len(parts) < 3 or not all(parts):
        return None
    return ".".join(parts[:2]), ".".join(parts[2:])


def collection_dir(collection: str, playbook_dir: Path) -> Path | None:
    namespace, _, name = collection.partition(".")
    for base in search_paths(playbook_dir):
        candidate = base / "ansible_collections" / namespace / name
        if candidate.is_dir():
            return candidate
    return None


def role_dir(collection: str, role: str, playbook_dir: Path) -> Path | None:
    found = collection_dir(collection, playbook_dir)
    if found is None or not (found / "roles" / role).is_dir():
        return None
    return (found / "roles" / role).resolve()


def playbook_file(collection: str, name: str, playbook_dir: Path) -> Path | None:
    found = collection_dir(collection, playbook_dir)
    if found is None:
        return None
    for suffix in ("", *PLAYBOOK_SUFFIXES):
        candidate = found / "playbooks" / (name.replace(".", "/") + suffix)
        if candidate.is_file():
            return candidate
    return None


def not_found(collection: str, what: str, playbook_dir: Path) -> str:
    """Why a collection's role or playbook was not found: the collection, or the item in it."""
    searched = ":".join(str(p) for p in search_paths(playbook_dir))
    if collection_dir(collection, playbook_dir) is None:
        return f"the collection {collection} is not installed (searched {searched}; set collections_path)"
    return f"the collection {collection} has no {what}"


def role_display_name(role_dir: Path, written: str) -> str:
    """How Ansible names a role in task names: ``ns.coll.role`` for a collection's role
    (however it was written), else its folder name."""
    parts = role_dir.parts
    if len(parts) >= 5 and parts[-2] == "roles" and parts[-5] == "ansible_collections":
        return f"{parts[-4]}.{parts[-3]}.{parts[-1]}"
    return Path(written).name
