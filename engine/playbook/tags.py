"""Which tasks ``--tags`` / ``--skip-tags`` select, as Ansible decides it.

A task's tags are its own and those it inherits, each string split at commas
(``tags: "a,b"``), templates rendered with the task's variables. Untagged tasks carry the
tag ``untagged``; ``always`` runs unless skipped by name; ``never`` runs only when asked
for by name; ``tagged`` / ``untagged`` / ``all`` select by kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine import templating

UNTAGGED = frozenset({"untagged"})


def flatten(raw: Iterable[Any], scope: Mapping[str, Any] | None = None) -> frozenset[str]:
    found: set[str] = set()
    for tag in raw:
        value = templating.render(tag, scope) if scope is not None and templating.is_template(tag) else tag
        items = value if isinstance(value, list) else [value]
        for item in items:
            found.update(part.strip() for part in str(item).split(",") if part.strip())
    return frozenset(found)


def selected(tags: frozenset[str], only: frozenset[str], skip: frozenset[str]) -> bool:
    tags = tags or UNTAGGED
    only = only or frozenset({"all"})
    run = (
        "always" in tags
        or ("all" in only and "never" not in tags)
        or bool(tags & only)
        or ("tagged" in only and tags != UNTAGGED and "never" not in tags)
    )
    if run and skip:
        if "all" in skip:
            run = "always" in tags and "always" not in skip
        elif tags & skip or ("tagged" in skip and tags != UNTAGGED):
            run = False
    return run
