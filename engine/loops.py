"""A task's loop items: ``loop:`` as given, and the ``with_<lookup>`` forms of older
playbooks, shaped as Ansible's lookups shape them (``with_items`` flattens one level,
``with_dict`` gives ``item.key``/``item.value``, ``with_nested`` every combination...)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

# ansible.builtin's loop lookups (cartesian and flattened live in community.general)
WITH_KINDS = frozenset({"items", "list", "dict", "indexed_items", "nested", "together"})


def source(data: Mapping[str, Any]) -> tuple[str, Any]:
    """(kind, raw value) of the task's loop; kind "loop" for ``loop:``, "" for none."""
    if data.get("loop") is not None:
        return "loop", data["loop"]
    for kind in sorted(WITH_KINDS):
        if data.get(f"with_{kind}") is not None:
            return kind, data[f"with_{kind}"]
    return "", None


def _flatten_once(values: list[Any]) -> list[Any]:
    return [x for v in values for x in (v if isinstance(v, list) else [v])]


def items(kind: str, rendered: Any) -> list[Any]:
    """The items to run over; ValueError says what is wrong with the rendered value."""
    if kind == "dict":
        if not isinstance(rendered, Mapping):
            raise ValueError(f"with_dict needs a mapping, got {type(rendered).__name__}")
        return [{"key": k, "value": v} for k, v in rendered.items()]
    if kind == "items" and not isinstance(rendered, list):
        rendered = [rendered]
    if not isinstance(rendered, list):
        raise ValueError(f"loop must be a list, got {type(rendered).__name__}")
    if kind == "items":
        return _flatten_once(rendered)
    if kind == "indexed_items":
        return [[i, x] for i, x in enumerate(_flatten_once(rendered))]
    if kind == "nested":
        lists = [x if isinstance(x, list) else [x] for x in rendered]
        return [list(combo) for combo in itertools.product(*lists)]
    if kind == "together":
        lists = [x if isinstance(x, list) else [x] for x in rendered]
        return [list(combo) for combo in itertools.zip_longest(*lists)]
    return rendered
