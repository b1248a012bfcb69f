"""A module argument schema's anyOf/oneOf/not errors in the user's words.

jsonschema reports a failed ``anyOf`` as "is not valid under any of the given schemas", and
``best_match`` picks one branch: a systemd task with none of state/enabled/masked read
"'state' is a required property", as if state were the one thing missing. Schemas here use
these combinators for two things, and each gets one sentence that names every choice:
branches that each require keys ("needs at least one of: state, enabled"), and branches
that each allow a type ("5 is not of type 'string', 'array'"). Anything else keeps
jsonschema's best branch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema


def combinator_words(error: jsonschema.ValidationError) -> str | None:
    """The sentence for an anyOf/oneOf/not error; None where there is none to say better."""
    if error.validator == "not" and isinstance(error.validator_value, Mapping):
        pairs = _required_sets(error.validator_value.get("anyOf"))
        if pairs is not None:
            return f"takes at most one of: {_names(pairs)}"
        return None
    if error.validator not in ("anyOf", "oneOf"):
        return None
    required = _required_sets(error.validator_value)
    if required is not None:
        return _required_words(error, required)
    return _type_words(error)


def _required_sets(branches: Any) -> list[list[str]] | None:
    """The key lists of branches that are all ``{"required": [...]}``; None otherwise."""
    if not isinstance(branches, Sequence) or not branches:
        return None
    sets = [list(b["required"]) for b in branches if isinstance(b, Mapping) and set(b) == {"required"}]
    return sets if len(sets) == len(branches) else None


def _names(sets: list[list[str]]) -> str:
    seen: dict[str, None] = {}
    for keys in sets:
        seen.update(dict.fromkeys(keys))
    return ", ".join(seen)


def _required_words(error: jsonschema.ValidationError, sets: list[list[str]]) -> str:
    choices = ", ".join(" and ".join(keys) for keys in sets)
    if error.validator == "anyOf":
        return f"needs at least one of: {choices}"
    given = [keys for keys in sets if isinstance(error.instance, Mapping) and all(k in error.instance for k in keys)]
    if len(given) > 1:
        return f"takes only one of: {choices} (got {', '.join(' and '.join(keys) for keys in given)})"
    return f"needs exactly one of: {choices}"


def _type_words(error: jsonschema.ValidationError) -> str | None:
    """Where every branch failed only on the value's own type, name every type allowed."""
    context = error.context or []
    if not context or any(e.validator != "type" or e.relative_path for e in context):
        return None
    types: dict[str, None] = {}
    for sub in context:
        allowed = sub.validator_value if isinstance(sub.validator_value, list) else [sub.validator_value]
        types.update(dict.fromkeys(str(t) for t in allowed))
    return f"{error.instance!r} is not of type {', '.join(repr(t) for t in types)}"
