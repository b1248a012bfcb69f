"""The Jinja filters and tests Ansible users reach for."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

import yaml

from engine.templating.listfilters import LIST_FILTERS

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


def regex_replace(
    value: Any,
    pattern: str = "",
    replacement: str = "",
    ignorecase: bool = False,
    multiline: bool = False,
    count: int = 0,
) -> str:
    flags = (re.IGNORECASE if ignorecase else 0) | (re.MULTILINE if multiline else 0)
    return re.sub(pattern, replacement, str(value), count=count, flags=flags)


def regex_findall(value: str, pattern: str) -> list[Any]:
    return re.findall(pattern, str(value))


def to_yaml(value: Any, *_args: Any, default_flow_style: bool | None = None, **kwargs: Any) -> str:
    """Ansible's to_yaml: terse, flow style for the innermost collections, keys sorted."""
    text: str = yaml.safe_dump(_plain(value), allow_unicode=True, default_flow_style=default_flow_style, **kwargs)
    return text


def to_nice_yaml(value: Any, indent: int = 4, *_args: Any, **kwargs: Any) -> str:
    kwargs.setdefault("default_flow_style", False)
    return to_yaml(value, indent=indent, **kwargs)


def to_json(value: Any, **kwargs: Any) -> str:
    return json.dumps(_plain(value), **kwargs)


def to_nice_json(value: Any, indent: int = 4, sort_keys: bool = True, **kwargs: Any) -> str:
    kwargs.pop("separators", None)
    return json.dumps(_plain(value), indent=indent, sort_keys=sort_keys, separators=(",", ": "), **kwargs)


_BOOL_TRUE = frozenset({"yes", "on", "true", "1"})
_BOOL_FALSE = frozenset({"no", "off", "false", "0"})


def bool_filter(value: Any) -> bool:
    """Ansible's ``bool`` filter (stricter than to_bool: 'y' and ' true' are False)."""
    if isinstance(value, str):
        key: Any = value.lower()
    elif isinstance(value, int):
        key = str(value).lower()
    else:
        key = value
    try:
        if key in _BOOL_TRUE:
            return True
        if key in _BOOL_FALSE:
            return False
        return bool(key == 1)
    except TypeError:
        return False


def ternary(value: Any, true_val: Any, false_val: Any, none_val: Any = None) -> Any:
    if value is None and none_val is not None:
        return none_val
    return true_val if value else false_val


def type_debug(value: Any) -> str:
    """The Python type's name, as Ansible shows it: rigger's own str subclasses (Inert
    inventory names) are ``str`` to a playbook, as ansible-core's trust-tagged strings are."""
    return "str" if isinstance(value, str) else type(value).__name__


def flatten(value: Any, levels: int | None = None, skip_nulls: bool = True) -> list[Any]:
    flat: list[Any] = []
    for item in value:
        if skip_nulls and item in (None, "None", "null"):
            continue
        if isinstance(item, (list, tuple)) and (levels is None or levels > 0):
            flat += flatten(item, None if levels is None else levels - 1, skip_nulls)
        else:
            flat.append(item)
    return flat


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _merge(base: Mapping[str, Any], other: Mapping[str, Any], recursive: bool, list_merge: str) -> dict[str, Any]:
    merged = dict(base)
    for key, value in other.items():
        old = merged.get(key)
        if recursive and isinstance(old, Mapping) and isinstance(value, Mapping):
            merged[key] = _merge(old, value, recursive, list_merge)
        elif isinstance(old, list) and isinstance(value, list) and list_merge != "replace":
            merged[key] = _merge_lists(old, value, list_merge)
        else:
            merged[key] = value
    return merged


def _merge_lists(old: list[Any], new: list[Any], how: str) -> list[Any]:
    if how == "keep":
        return old
    if how == "append":
        return old + new
    if how == "prepend":
        return new + old
    if how == "append_rp":
        return [x for x in old if x not in new] + new
    if how == "prepend_rp":
        return new + [x for x in old if x not in new]
    raise ValueError(
        f"combine: list_merge must be replace, keep, append, prepend, append_rp or prepend_rp, not {how!r}"
    )


def combine(*terms: Any, recursive: bool = False, list_merge: str = "replace") -> dict[str, Any]:
    """Ansible's combine: later dicts win; lists of dicts are flattened first."""
    merged: dict[str, Any] = {}
    for term in flatten(list(terms)) if any(isinstance(t, list) for t in terms) else terms:
        if not isinstance(term, Mapping):
            raise TypeError(f"combine expects dictionaries, got {type(term).__name__}")
        merged = _merge(merged, term, recursive, list_merge)
    return merged


def dict2items(value: Mapping[str, Any], key_name: str = "key", value_name: str = "value") -> list[dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise TypeError(f"dict2items requires a dictionary, got {type(value).__name__}")
    return [{key_name: k, value_name: v} for k, v in value.items()]


def items2dict(value: list[Mapping[str, Any]], key_name: str = "key", value_name: str = "value") -> dict[Any, Any]:
    return {item[key_name]: item[value_name] for item in value}


def extract(item: Any, container: Any, morekeys: Any = None) -> Any:
    """``groups.web | map('extract', hostvars, 'ansible_host')``: container[item][morekeys...]."""
    value = container[item]
    keys = [] if morekeys is None else morekeys if isinstance(morekeys, list) else [morekeys]
    for key in keys:
        value = value[key]
    return value


def mandatory(value: Any, msg: str | None = None) -> Any:
    import jinja2

    if isinstance(value, jinja2.Undefined):
        raise jinja2.UndefinedError(msg or "Mandatory variable has not been defined")
    return value


FILTERS: dict[str, Callable[..., Any]] = {
    "bool": bool_filter,
    "ternary": ternary,
    "type_debug": type_debug,
    "flatten": flatten,
    "mandatory": mandatory,
    "extract": extract,
    "b64encode": lambda v, encoding="utf-8": base64.b64encode(str(v).encode(encoding)).decode("ascii"),
    "b64decode": lambda v, encoding="utf-8": base64.b64decode(str(v)).decode(encoding),
    "to_json": to_json,
    "to_nice_json": to_nice_json,
    "from_json": json.loads,
    "to_yaml": to_yaml,
    "to_nice_yaml": to_nice_yaml,
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
    **LIST_FILTERS,
}


def _result(value: Any, test: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"the '{test}' test expects a dictionary (a registered result)")
    return value


def _status(key: str) -> Callable[[Any], bool]:
    def test(result: Any) -> bool:
        return bool(_result(result, key).get(key, False))

    return test


def _succeeded(result: Any) -> bool:
    return not _result(result, "succeeded").get("failed", False)


def _version_key(text: Any) -> list[Any]:
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-+_]", str(text)) if p]


_VERSION_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda a, b: a < b,
    "<": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "<=": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    ">": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    ">=": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "==": lambda a, b: a == b,
    "=": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "!=": lambda a, b: a != b,
    "<>": lambda a, b: a != b,
}


def version_test(value: Any, version: Any, operator: str = "eq", strict: bool = False, **_kw: Any) -> bool:
    if operator not in _VERSION_OPS:
        raise ValueError(f"version test: invalid operator {operator!r}")
    return _VERSION_OPS[operator](_version_key(value), _version_key(version))


TESTS: dict[str, Callable[..., Any]] = {
    "changed": _status("changed"),
    "change": _status("changed"),
    "failed": _status("failed"),
    "failure": _status("failed"),
    "skipped": _status("skipped"),
    "skip": _status("skipped"),
    "unreachable": _status("unreachable"),
    "succeeded": _succeeded,
    "success": _succeeded,
    "successful": _succeeded,
    "version": version_test,
    "version_compare": version_test,
    "subset": lambda a, b: set(a) <= set(b),
    "superset": lambda a, b: set(a) >= set(b),
    "contains": lambda seq, item: item in seq,
    "truthy": lambda v: bool(v),
    "falsy": lambda v: not v,
    "regex": lambda v, p, ignorecase=False: re.search(p, str(v), re.I if ignorecase else 0) is not None,
    "match": lambda v, p: re.match(p, str(v)) is not None,
    "search": lambda v, p: re.search(p, str(v)) is not None,
}
