"""JSON documents compared as key paths: what a patch changed, what a plan shows."""

from __future__ import annotations

import math
from typing import Any


def keypath_diff(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Lines like ``- a.b`` (removed), ``+ a.c`` (added), ``~ a.d`` (value changed)."""
    if isinstance(before, dict) and isinstance(after, dict):
        lines: list[str] = []
        for key in before:
            path = f"{prefix}{key}"
            if key not in after:
                lines.append(f"- {path}")
            else:
                lines.extend(keypath_diff(before[key], after[key], f"{path}."))
        lines.extend(f"+ {prefix}{key}" for key in after if key not in before)
        return lines
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [
            line
            for index, (old, new) in enumerate(zip(before, after, strict=True))
            for line in keypath_diff(old, new, f"{prefix}{index}.")
        ]
    if same_value(before, after):
        return []
    return [f"~ {prefix.rstrip('.')}"]


def same_value(before: Any, after: Any) -> bool:
    """Equal and of the same type; a NaN is the same as a NaN (it is never ``==``)."""
    if isinstance(before, float) and isinstance(after, float) and math.isnan(before) and math.isnan(after):
        return True
    return bool(before == after) and type(before) is type(after)
