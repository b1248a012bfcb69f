"""Ansible's set, path, text and hashing filters (mathstuff.py and core.py of ansible-core
2.19), with its results: the set filters return ``list(set(...))`` like Ansible, so their
order is Python's set order (sort them when order matters, as Ansible users do)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping
from typing import Any

UUID_NAMESPACE_ANSIBLE = uuid.UUID("361E6D51-FAEC-444A-9079-341386DA8E2E")
# Ansible's names for passlib's schemes, and the rounds crypt(3) uses when none is given
# (ansible/utils/encrypt.py: Ansible pins them so every passlib version agrees)
HASH_SCHEMES = {"md5": "md5_crypt", "sha256": "sha256_crypt", "sha512": "sha512_crypt", "blowfish": "bcrypt"}
IMPLICIT_ROUNDS = {"sha256_crypt": 535000, "sha512_crypt": 656000, "bcrypt": 12}
SALT_SIZES = {"md5_crypt": 8, "bcrypt": 22, "sha256_crypt": 16, "sha512_crypt": 16}


def _unique(values: list[Any]) -> list[Any]:
    kept: list[Any] = []
    for value in values:
        if value not in kept:
            kept.append(value)
    return kept


def intersect(a: Any, b: Any) -> list[Any]:
    try:
        return list(set(a) & set(b))
    except TypeError:  # unhashable items (dicts): kept in a's order, as Ansible does
        return _unique([x for x in a if x in b])


def difference(a: Any, b: Any) -> list[Any]:
    try:
        return list(set(a) - set(b))
    except TypeError:
        return _unique([x for x in a if x not in b])


def symmetric_difference(a: Any, b: Any) -> list[Any]:
    try:
        return list(set(a) ^ set(b))
    except TypeError:
        both = intersect(a, b)
        return [x for x in union(a, b) if x not in both]


def union(a: Any, b: Any) -> list[Any]:
    try:
        return list(set(a) | set(b))
    except TypeError:
        return _unique(list(a) + list(b))


def subelements(obj: Any, keys: Any, skip_missing: bool = False) -> list[list[Any]]:
    """``users | subelements('groups')``: [user, group] for every group of every user."""
    if isinstance(obj, Mapping):
        elements = list(obj.values())
    elif isinstance(obj, list):
        elements = list(obj)
    else:
        raise ValueError("subelements: obj must be a list of dicts or a nested dict")
    if isinstance(keys, list):
        path = list(keys)
    elif isinstance(keys, str):
        path = keys.split(".")
    else:
        raise ValueError("subelements: subelements must be a list or a string")
    pairs: list[list[Any]] = []
    for element in elements:
        values = element
        for key in path:
            if not isinstance(values, Mapping):
                raise ValueError(f"subelements: the key {key} should point to a dictionary, got '{values}'")
            if key not in values:
                if skip_missing:
                    values = []
                    break
                raise ValueError(f"subelements: could not find {key!r} key in iterated item {values!r}")
            values = values[key]
        if not isinstance(values, list):
            raise ValueError(f"subelements: the key {keys!r} should point to a list, got {values!r}")
        pairs += [[element, value] for value in values]
    return pairs


def to_uuid(value: Any, namespace: Any = UUID_NAMESPACE_ANSIBLE) -> str:
    try:
        space = namespace if isinstance(namespace, uuid.UUID) else uuid.UUID(str(namespace))
    except ValueError as exc:
        raise ValueError(f"to_uuid: invalid value '{namespace}' for 'namespace': {exc}") from None
    return str(uuid.uuid5(space, str(value)))


def split(value: Any, sep: str | None = None, maxsplit: int = -1) -> list[str]:
    return str(value).split(sep, maxsplit)


def splitext(value: Any) -> list[str]:
    """[root, extension]: Ansible's tuple, as the list it renders to."""
    return list(os.path.splitext(str(value)))


def realpath(value: Any) -> str:
    """The controller's canonical path (links resolved), as Ansible's filter: it runs on
    the controller, never on the host."""
    return os.path.realpath(str(value))


def password_hash(
    password: Any,
    hashtype: str = "sha512",
    salt: str | None = None,
    salt_size: int | None = None,
    rounds: int | None = None,
    ident: str | None = None,
) -> str:
    """crypt(3) hashes through passlib (libpass, its maintained fork), as Ansible computes
    them: the same library, scheme names and implicit rounds, so a given salt gives
    Ansible's exact string."""
    scheme = HASH_SCHEMES.get(hashtype, hashtype)
    if scheme not in HASH_SCHEMES.values():
        raise ValueError(
            f"password_hash: {hashtype} is not in the list of supported algorithms: {', '.join(HASH_SCHEMES)}"
        )
    import passlib.hash  # imported on use: only this filter needs it

    settings: dict[str, Any] = {}
    if salt:
        settings["salt"] = str(salt)
    if salt_size:
        settings["salt_size"] = int(salt_size)
    if rounds or scheme in IMPLICIT_ROUNDS:
        settings["rounds"] = int(rounds or IMPLICIT_ROUNDS[scheme])
    if scheme == "bcrypt":
        settings["ident"] = ident or "2b"
    try:
        return str(getattr(passlib.hash, scheme).using(**settings).hash(str(password)))
    except ValueError as exc:
        raise ValueError(f"password_hash: could not hash the secret: {exc}") from None


LIST_FILTERS: dict[str, Callable[..., Any]] = {
    "intersect": intersect,
    "difference": difference,
    "symmetric_difference": symmetric_difference,
    "union": union,
    "subelements": subelements,
    "to_uuid": to_uuid,
    "split": split,
    "splitext": splitext,
    "realpath": realpath,
    "password_hash": password_hash,
}
