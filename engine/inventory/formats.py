"""Reading inventory files (INI and YAML) the way ansible-core's ini and yaml plugins do.

INI values: a value is what Python's ``literal_eval`` makes of it (``8`` an int, ``True``
a bool, ``['a']`` a list) and a string otherwise (``true``, ``0644``, ``10:30``). Host
lines are split like a shell (quotes removed, ``#`` starts a comment); ``[group:vars]``
lines are split at the first ``=`` and keep everything after it, inline ``#`` included.
"""

from __future__ import annotations

import ast
import re
import shlex
import string
import warnings
from collections.abc import Mapping
from typing import Any

from engine.errors import ValidationError
from engine.inventory.data import InventoryData
from engine.yamlload import line_of

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?\Z")
_GROUP_LINE = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?\Z")
_RANGE = re.compile(r"\[([^\]]*)\]")
_PORT = re.compile(r"^(?P<host>.+):(?P<port>\d+)\Z")


# ---- host names: ranges and ports -----------------------------------------------------
def _range_items(bounds: str, where: tuple[str, int | None]) -> list[str]:
    parts = bounds.split(":")
    if len(parts) not in (2, 3):
        raise ValidationError(
            f"host range [{bounds}] must be begin:end or begin:end:step", file=where[0], line=where[1]
        )
    begin, end = parts[0] or "0", parts[1]
    step = int(parts[2]) if len(parts) == 3 and parts[2] else 1
    if not end:
        raise ValidationError(f"host range [{bounds}] must specify an end value", file=where[0], line=where[1])
    letters = string.ascii_letters
    if begin in letters and end in letters and len(begin) == len(end) == 1:
        if letters.index(begin) > letters.index(end):
            raise ValidationError(f"host range [{bounds}] must have begin <= end", file=where[0], line=where[1])
        return list(letters[letters.index(begin) : letters.index(end) + 1 : step])
    try:
        numbers = range(int(begin), int(end) + 1, step)
    except ValueError:
        raise ValidationError(
            f"host range [{bounds}] is neither numbers nor letters", file=where[0], line=where[1]
        ) from None
    if begin.startswith("0") and len(begin) > 1:
        if len(begin) != len(end):
            raise ValidationError(
                f"host range [{bounds}] must give begin and end with the same width", file=where[0], line=where[1]
            )
        return [str(n).zfill(len(begin)) for n in numbers]
    return [str(n) for n in numbers]


def expand_range(name: str, where: tuple[str, int | None] = ("<inventory>", None)) -> list[str]:
    """``db-[a:c]`` -> db-a db-b db-c; ``lb[00:04:2]`` -> lb00 lb02 lb04; several ranges nest."""
    match = _RANGE.search(name)
    if not match or ":" not in match.group(1):
        return [name]
    head, tail = name[: match.start()], name[match.end() :]
    return [host for item in _range_items(match.group(1), where) for host in expand_range(head + item + tail, where)]


def split_port(pattern: str) -> tuple[str, int | None]:
    """``web3.example.com:1022`` names web3.example.com on port 1022; IPv6 keeps its colons."""
    if pattern.startswith("[") and "]:" in pattern:
        address, _, port = pattern[1:].partition("]:")
        return (address, int(port)) if port.isdigit() else (pattern, None)
    match = _PORT.match(pattern)
    if not match or ":" in _RANGE.sub("", match.group("host")):
        return pattern, None
    return match.group("host"), int(match.group("port"))


def host_names(pattern: str, where: tuple[str, int | None]) -> tuple[list[str], int | None]:
    if pattern.strip().endswith(":"):
        raise ValidationError(
            f"invalid host pattern {pattern!r}: ending in ':' is not allowed (':' gives a port)",
            file=where[0],
            line=where[1],
        )
    name, port = split_port(pattern)
    return expand_range(name, where), port


# ---- INI ------------------------------------------------------------------------------
def _plain_literal(value: Any) -> Any:
    if isinstance(value, (list, tuple, set)):
        return [_plain_literal(v) for v in value]
    if isinstance(value, dict):
        return {
            str(k) if not isinstance(k, (str, int, float, bool)) else k: _plain_literal(v) for k, v in value.items()
        }
    if value is Ellipsis or isinstance(value, complex):
        return str(value) if value is not Ellipsis else "..."
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def ini_value(text: str) -> Any:
    """What ansible-core's INI plugin makes of a value: a Python literal, else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return _plain_literal(value)


def _ini_host_line(data: InventoryData, group: str, line: str, where: tuple[str, int]) -> None:
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        raise ValidationError(f"cannot parse host line: {exc}", file=where[0], line=where[1]) from None
    if not tokens:
        return
    names, port = host_names(tokens[0], where)
    variables: dict[str, Any] = {}
    for token in tokens[1:]:
        key, sep, value = token.partition("=")
        if not sep:
            raise ValidationError(f"expected key=value host variable, got {token!r}", file=where[0], line=where[1])
        variables[key] = ini_value(value)
    for name in names:
        if not name.strip():
            raise ValidationError("an inventory host needs a name", file=where[0], line=where[1])
        data.add_host(name, group, port, where)
        data.set_host_vars(name, variables, where)


def _ini_vars_line(data: InventoryData, group: str, line: str, where: tuple[str, int]) -> None:
    key, sep, value = line.partition("=")
    if not sep:
        raise ValidationError(f"expected key=value, got {line!r}", file=where[0], line=where[1])
    data.set_group_vars(group, {key.strip(): ini_value(value.strip())}, where)


def read_ini(data: InventoryData, text: str, file: str) -> None:
    group, state = "ungrouped", "hosts"
    pending: dict[str, tuple[int, str, list[str]]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        where = (file, number)
        if not line or line[0] in "#;":
            continue
        header = _SECTION.match(line)
        if header:
            group, state = header.group(1), header.group(2) or "hosts"
            if state not in ("hosts", "children", "vars"):
                raise ValidationError(f"section [{group}:{state}] has unknown type {state!r}", file=file, line=number)
            if group not in data.groups and state == "vars" and group not in pending:
                pending[group] = (number, "vars", [])
            data.add_group(group)
            if group in pending and state != "vars":
                _declared(data, group, pending)
            continue
        if line.startswith("[") and line.endswith("]"):
            raise ValidationError(f"invalid section header {line!r} (no spaces allowed)", file=file, line=number)
        if state == "hosts":
            _ini_host_line(data, group, line, where)
        elif state == "vars":
            _ini_vars_line(data, group, line, where)
        else:
            child_match = _GROUP_LINE.match(line)
            if not child_match:
                raise ValidationError(f"expected a group name, got {line!r}", file=file, line=number)
            child = child_match.group(1)
            if child in data.groups:
                data.add_child(group, child, where)
            else:
                pending.setdefault(child, (number, "children", []))[2].append(group)
    for name, (number, state, parents) in pending.items():
        if state == "vars":
            raise ValidationError(f"section [{name}:vars] is for a group defined nowhere", file=file, line=number)
        raise ValidationError(
            f"section [{parents[-1]}:children] names an undefined group: {name}", file=file, line=number
        )


def _declared(data: InventoryData, group: str, pending: dict[str, tuple[int, str, list[str]]]) -> None:
    number, _state, parents = pending.pop(group)
    for parent in parents:
        data.add_child(parent, group, ("<ini>", number))
        if parent in pending and pending[parent][1] == "children":
            _declared(data, parent, pending)


# ---- YAML -----------------------------------------------------------------------------
def _yaml_group(data: InventoryData, name: str, body: Any, file: str, line: int | None) -> None:
    data.add_group(name)
    if body is None:
        return
    if not isinstance(body, Mapping):
        raise ValidationError(f"group '{name}' must be a mapping with hosts/children/vars", file=file, line=line)
    for key, value in body.items():
        where = (file, line_of(body, key))
        if key == "vars":
            if value is not None and not isinstance(value, Mapping):
                raise ValidationError(f"group '{name}': vars must be a mapping", file=file, line=where[1])
            data.set_group_vars(name, value or {}, where)
        elif key == "children":
            _yaml_children(data, name, value, file, where[1])
        elif key == "hosts":
            _yaml_hosts(data, name, value, file, where[1])
        else:
            raise ValidationError(
                f"group '{name}': unknown key '{key}' (expected hosts, children, vars)", file=file, line=where[1]
            )


def _mapping(value: Any, what: str, file: str, line: int | None) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"{what} must be a mapping", file=file, line=line)
    return value


def _yaml_children(data: InventoryData, parent: str, children: Any, file: str, line: int | None) -> None:
    children = _mapping(children, f"group '{parent}': children", file, line)
    for child, child_body in children.items():
        child_line = line_of(children, child)
        _yaml_group(data, str(child), child_body, file, child_line)
        data.add_child(parent, str(child), (file, child_line))


def _yaml_hosts(data: InventoryData, group: str, hosts: Any, file: str, line: int | None) -> None:
    hosts = _mapping(hosts, f"group '{group}': hosts", file, line)
    for pattern, host_vars in hosts.items():
        where = (file, line_of(hosts, pattern))
        if host_vars is not None and not isinstance(host_vars, Mapping):
            raise ValidationError(f"host '{pattern}': variables must be a mapping", file=file, line=where[1])
        if not isinstance(pattern, str) or not pattern.strip():
            raise ValidationError("an inventory host needs a name", file=file, line=where[1])
        names, port = host_names(pattern, where)
        for name in names:
            data.add_host(name, group, port, where)
            data.set_host_vars(name, host_vars or {}, where)


def read_yaml(data: InventoryData, document: Any, file: str) -> None:
    if not isinstance(document, Mapping):
        raise ValidationError("a YAML inventory is a mapping of groups (usually 'all:')", file=file, line=1)
    for group, body in document.items():
        _yaml_group(data, str(group), body, file, line_of(document, group))
