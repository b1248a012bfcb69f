"""Parse -e values: KEY=VALUE pairs, @file.yml, or inline JSON/YAML mappings."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from engine.errors import OptionsError, ValidationError
from engine.yamlload import MAX_DEPTH, load_file


def parse_one(text: str) -> dict[str, Any]:
    text = text.strip()
    if text.startswith("@"):
        data = load_file(text[1:])
        if not isinstance(data, Mapping):
            raise ValidationError("an extra-vars file must be a mapping", file=text[1:], line=1)
        return dict(data)
    if text.startswith("{"):
        _check_json_depth(text)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OptionsError(f"-e {text!r}: invalid JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise OptionsError(f"-e {text!r}: JSON must be an object")
        return data
    pairs: dict[str, Any] = {}
    for part in shlex.split(text):
        key, sep, value = part.partition("=")
        if not sep or not key.isidentifier():
            raise OptionsError(f"-e {part!r}: expected KEY=VALUE, @FILE or a JSON object")
        pairs[key] = value
    return pairs


def _check_json_depth(text: str) -> None:
    """Refuse JSON nested deeper than a playbook may be, before a recursive parser sees it."""
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise OptionsError(f"-e: JSON nested more than {MAX_DEPTH} levels deep")
        elif char in "]}":
            depth -= 1


def parse_all(values: Iterable[str]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for value in values:
        merged.update(parse_one(value))
    return merged
