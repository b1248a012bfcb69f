"""Host facts: the engine's generic ones (identity, OS, CPU, memory, python) plus the
facts each room contributes through its ``FACTS`` (a ``FactSource``), e.g. the GPU room's
``gpus``, ``gpu_count`` and ``shm``. Fact names are what playbooks see under ``facts``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.connection.base import Connection


@dataclass(frozen=True)
class FactSource:
    """What a room adds to every host's facts.

    ``probe`` answers the room's facts when facts are gathered; ``defaults`` are the
    values a host has before gathering (or with ``gather_facts: false``).
    """

    probe: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


def sources() -> tuple[FactSource, ...]:
    from engine import registry

    found = (getattr(room, "FACTS", None) for room in registry.rooms())
    return tuple(source for source in found if isinstance(source, FactSource))


def defaults() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for source in sources():
        merged.update(source.defaults)
    return merged


def gather(conn: Connection) -> dict[str, Any]:
    facts = conn.run_probe("host", {})
    for source in sources():
        facts.update(conn.run_probe(source.probe, {}))
    return facts
