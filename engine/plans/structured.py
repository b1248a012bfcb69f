"""A Diff as short change lines a reviewer reads at a glance (and groups across hosts):
JSON documents as key paths (``- quantization_config.kv_cache_scheme``), anything else
as the lines removed (``-``) and added (``+``)."""

from __future__ import annotations

import difflib
import json
from typing import Any

from engine.keypaths import keypath_diff
from engine.module_api import Diff


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def change_lines(diff: Diff) -> list[str]:
    before, after = _json_object(diff.before), _json_object(diff.after)
    if before is not None and after is not None:
        return keypath_diff(before, after)
    old, new = diff.before.splitlines(), diff.after.splitlines()
    lines: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            lines += [f"- {line}" for line in old[i1:i2]]
        if tag in ("replace", "insert"):
            lines += [f"+ {line}" for line in new[j1:j2]]
    return lines
