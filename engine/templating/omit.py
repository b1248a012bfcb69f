"""Ansible's ``omit``: a variable whose value is a placeholder string; a module argument
(or an item of a list, an entry of a mapping inside one) that renders to exactly it is left
out, so ``mode: "{{ m | default(omit) }}"`` or ``"{{ x | ternary(omit, 'y') }}"`` means
"as if not written". Random per run, as Ansible's, so no real value can equal it."""

from __future__ import annotations

import secrets
from typing import Any

OMIT = f"__omit_place_holder__{secrets.token_hex(20)}"


def without_omitted(value: Any) -> Any:
    """value with every mapping entry and list item that is the placeholder left out."""
    if isinstance(value, dict):
        return {key: without_omitted(item) for key, item in value.items() if item != OMIT}
    if isinstance(value, list):
        return [without_omitted(item) for item in value if item != OMIT]
    return value
