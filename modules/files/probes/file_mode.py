"""The mode a task's ``mode`` sets on one path: octal, or symbolic as chmod and Ansible read it.

Symbolic clauses are separated by commas; each names users (``u``, ``g``, ``o``, ``a``; none
means all, limited by the umask) and one or more operator/permission pairs: ``u+x``,
``g-w``, ``u=rwx,go=rx``, ``u=rw-x+X``, ``g=u``. ``X`` is execute only for a directory or a
path some execute bit is set on. The result depends on the path's current mode, so the
host applies it to each path in turn (a recursive directory: every path inside), and the
controller computes the same to show the plan.

The functions are pure (the controller imports them); ``main`` alone reads the host: its
umask, which a clause without users (``+x``) and every new file or directory depend on.
"""

from __future__ import annotations

import os
import re
from typing import Any

PERM_BITS = 0o7777
_OPERATOR = re.compile(r"[+=-]")
_USERS = re.compile(r"^[ugo]*\Z")
_PERMS = re.compile(r"^[rwxXstugo]*\Z")
_SHIFT = {"u": 6, "g": 3, "o": 0}
_SPECIAL = {"u": {"s": 0o4000}, "g": {"s": 0o2000}, "o": {"t": 0o1000}}
_CLEARED_BY_EQUALS = {"u": 0o4700, "g": 0o2070, "o": 0o1007}


class ModeError(ValueError):
    """A mode that is neither octal nor a valid symbolic mode."""


def octal(value: int | str) -> int | None:
    """The mode an octal value sets (an int is taken as is), or None for a symbolic one."""
    if isinstance(value, int):
        number = value
    else:
        try:
            number = int(value, 8)
        except ValueError:
            return None
    if number != number & PERM_BITS:
        raise ModeError(f"invalid mode {value!r}: only permission bits are allowed (at most 07777)")
    return number


def _clauses(symbolic: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(users, [(operator, perms), ...]) per clause; raises ModeError naming a bad clause."""
    parsed = []
    for clause in symbolic.split(","):
        parts = _OPERATOR.split(clause)
        operators = _OPERATOR.findall(clause)
        users = parts.pop(0)
        if (not _USERS.match(users) and users != "a") or not all(_PERMS.match(p) for p in parts):
            raise ModeError(f"bad symbolic permission for mode: {clause}")
        parsed.append((users, list(zip(operators, parts, strict=True))))
    return parsed


def check(value: int | str) -> None:
    """Raise ModeError unless ``value`` is a mode Ansible accepts."""
    if octal(value) is None:
        _clauses(str(value))


def _bits(user: str, perms: str, reference: int, is_dir: bool, umask: int | None) -> int:
    """The bits ``perms`` stand for in ``user``'s class. ``reference`` is the mode as
    changed so far (Ansible reads ``X`` and ``g=u`` from it, not from the path's original
    mode); ``umask`` limits rwx when no users were named."""
    shift = _SHIFT[user]
    allowed = 0o777 if umask is None else ~umask & 0o777
    bits = 0
    for perm in perms:
        if perm in "rwx":
            bits |= (0o4 if perm == "r" else 0o2 if perm == "w" else 0o1) << shift & allowed
        elif perm == "X":
            bits |= (0o1 << shift) if is_dir or reference & 0o111 else 0
        elif perm in "ugo":
            bits |= (reference >> _SHIFT[perm] & 0o7) << shift
        else:
            bits |= _SPECIAL[user].get(perm, 0)
    return bits


def _operate(user: str, operator: str, bits: int, mode: int) -> int:
    if operator == "=":
        return mode & ~_CLEARED_BY_EQUALS[user] & PERM_BITS | bits
    if operator == "+":
        return mode | bits
    return mode & ~bits


def resulting(value: int | str, current: int, is_dir: bool, umask: int) -> int:
    """The mode ``value`` leaves on a path whose mode is ``current``."""
    number = octal(value)
    if number is not None:
        return number
    mode = current & PERM_BITS
    for users, steps in _clauses(str(value)):
        limit = umask if users == "" else None
        for operator, perms in steps:
            for user in "ugo" if users in ("", "a") else users:
                mode = _operate(user, operator, _bits(user, perms, mode, is_dir, limit), mode)
    return mode


def host_umask() -> int:
    """This process's umask, read without changing it (another thread may create files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def main(args: dict[str, Any]) -> dict[str, Any]:
    """The host's umask; given ``mode`` and ``current`` (and ``is_dir``), the mode it sets."""
    umask = host_umask()
    if "mode" not in args:
        return {"umask": umask}
    return {"umask": umask, "mode": resulting(args["mode"], args["current"], bool(args.get("is_dir")), umask)}
