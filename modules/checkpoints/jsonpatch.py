"""Order- and indent-preserving JSON edits by key path, and key-path diffs.

A key path is dotted (``quantization_config.kv_cache_scheme``); a segment that is all
digits indexes a list. ``json`` keeps key order, so re-serialising with the file's own
indentation reproduces a canonically formatted file byte for byte; ``is_canonical``
tells callers when a file was formatted some other way (the rewrite reformats it).

What cannot be written back as read is refused, never silently changed: a duplicate key
(``json`` keeps only the last one), a number too large for a double (it would come back
as ``Infinity``) and an integer longer than Python converts. ``NaN`` and ``Infinity``
round-trip, and compare equal to themselves so an edit converges.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.module_api import same_value

_INDENT = re.compile(r"^\n?([ \t]+)\S", re.MULTILINE)
_MISSING = object()


class JsonEditError(ValueError):
    """A file is not valid JSON, or a key path cannot be applied to it."""


@dataclass(frozen=True)
class JsonStyle:
    """How a file was written: indent (None = compact), trailing newline, ASCII escapes."""

    indent: int | str | None
    trailing_newline: bool
    ensure_ascii: bool


@dataclass(frozen=True)
class JsonDoc:
    """A parsed JSON file and the style to write it back in."""

    data: Any
    style: JsonStyle

    def dumps(self, data: Any) -> str:
        text = json.dumps(data, indent=self.style.indent, ensure_ascii=self.style.ensure_ascii)
        return text + "\n" if self.style.trailing_newline else text


def detect_style(text: str) -> JsonStyle:
    match = _INDENT.search(text)
    indent: int | str | None = None
    if match:
        unit = match.group(1)
        indent = len(unit) if set(unit) == {" "} else unit
    has_escapes = "\\u" in text
    return JsonStyle(indent, text.endswith("\n"), has_escapes or text.isascii())


def _unique_keys(label: str) -> Any:
    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in pairs:
            if key in found:
                raise JsonEditError(f"{label} has the key {key!r} twice in one object; refusing to drop either")
            found[key] = value
        return found

    return build


def _finite_float(label: str) -> Any:
    def build(text: str) -> float:
        value = float(text)
        if math.isinf(value):
            raise JsonEditError(f"{label}: the number {text[:40]} is too large for a double; refusing to rewrite it")
        return value

    return build


def parse(text: str, label: str) -> JsonDoc:
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys(label), parse_float=_finite_float(label))
    except json.JSONDecodeError as exc:
        raise JsonEditError(f"{label} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    except JsonEditError:
        raise
    except ValueError as exc:  # an integer past sys.get_int_max_str_digits()
        raise JsonEditError(f"{label}: {exc}; refusing to rewrite it") from exc
    return JsonDoc(data, detect_style(text))


def is_canonical(doc: JsonDoc, text: str) -> bool:
    return doc.dumps(doc.data) == text


def split_path(path: str) -> list[str]:
    parts = path.split(".")
    if not path or any(part == "" for part in parts):
        raise JsonEditError(f"invalid key path {path!r}")
    return parts


def _child(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        return node.get(key, _MISSING)
    if isinstance(node, list) and key.isdigit() and int(key) < len(node):
        return node[int(key)]
    return _MISSING


def remove_path(data: Any, path: str) -> bool:
    """Delete the key at ``path`` in place; False when it was not there."""
    *parents, last = split_path(path)
    node = data
    for key in parents:
        node = _child(node, key)
        if node is _MISSING:
            return False
    if isinstance(node, dict) and last in node:
        del node[last]
        return True
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        del node[int(last)]
        return True
    return False


def set_path(data: Any, path: str, value: Any) -> bool:
    """Set ``path`` to ``value`` in place, creating missing objects; False if unchanged."""
    *parents, last = split_path(path)
    node = data
    for key in parents:
        child = _child(node, key)
        if child is _MISSING:
            if not isinstance(node, dict):
                raise JsonEditError(f"cannot create {key!r} in a list ({path})")
            child = node[key] = {}
        if not isinstance(child, dict | list):
            raise JsonEditError(f"{path}: {key!r} is not an object")
        node = child
    if isinstance(node, list):
        if not (last.isdigit() and int(last) < len(node)):
            raise JsonEditError(f"{path}: list index {last!r} out of range")
        index = int(last)
        if same_value(node[index], value):
            return False
        node[index] = value
        return True
    if last in node and same_value(node[last], value):
        return False
    node[last] = value
    return True


def apply_edits(data: Any, remove: Sequence[str] = (), set_values: Mapping[str, Any] | None = None) -> Any:
    """A patched deep copy of ``data``; ``data`` itself is left alone."""
    patched = copy.deepcopy(data)
    for path in remove:
        remove_path(patched, path)
    for path, value in (set_values or {}).items():
        set_path(patched, path, copy.deepcopy(value))
    return patched
