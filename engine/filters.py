"""The Jinja filters and tests Ansible users reach for."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

import yaml

_TRUE = {"true", "yes", "on", "1", "y", "t"}


def to_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return bool(value)


def regex_search(value: str, pattern: str, *groups: str, ignorecase: bool = False) -> Any:
    flags = re.IGNORECASE if ignorecase else 0
    match = re.search(pattern, str(value), flags)
    if not match:
        return None
    if not groups:
        return match.group(0)
    picked = [match.group(int(g[1:]) if g.startswith("\\") else g) for g in groups]
    return picked


def regex_replace(value: str, pattern: str, replacement: str = "", ignorecase: bool = False) -> str:
    flags = re.IGNORECASE if ignorecase else 0
    return re.sub(pattern, replacement, str(value), flags=flags)


def regex_findall(value: str, pattern: str) -> list[Any]:
    return re.findall(pattern, str(value))


def to_yaml(value: Any) -> str:
    return yaml.safe_dump(_plain(value), default_flow_style=False, sort_keys=False)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def combine(*dicts: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for item in dicts:
        merged.update(item)
    return merged


def dict2items(value: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": v} for k, v in value.items()]


def items2dict(value: list[Mapping[str, Any]]) -> dict[Any, Any]:
    return {item["key"]: item["value"] for item in value}


FILTERS: dict[str, Callable[..., Any]] = {
    "bool": to_bool,
    "to_json": lambda v, **kw: json.dumps(_plain(v), **kw),
    "to_nice_json": lambda v, indent=2: json.dumps(_plain(v), indent=indent, sort_keys=True),
    "from_json": json.loads,
    "to_yaml": to_yaml,
    "to_nice_yaml": to_yaml,
    "from_yaml": yaml.safe_load,
    "regex_search": regex_search,
    "regex_replace": regex_replace,
    "regex_findall": regex_findall,
    "basename": os.path.basename,
    "dirname": os.path.dirname,
    "quote": lambda v: shlex.quote(str(v)),
    "combine": combine,
    "dict2items": dict2items,
    "items2dict": items2dict,
}


def _status(key: str) -> Callable[[Any], bool]:
    def test(result: Any) -> bool:
        return isinstance(result, Mapping) and bool(result.get(key))

    return test


TESTS: dict[str, Callable[..., Any]] = {
    "changed": _status("changed"),
    "failed": _status("failed"),
    "skipped": _status("skipped"),
    "succeeded": lambda r: isinstance(r, Mapping) and not r.get("failed"),
    "success": lambda r: isinstance(r, Mapping) and not r.get("failed"),
    "match": lambda v, p: re.match(p, str(v)) is not None,
    "search": lambda v, p: re.search(p, str(v)) is not None,
}
