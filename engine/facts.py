"""Host facts, gathered in one round trip per host.

Two kinds: rigger's own under ``facts`` (the engine's generic ones: identity, OS, CPU,
memory, python; plus what each room contributes through its ``FACTS``, a ``FactSource``,
e.g. the GPU room's ``gpus``, ``gpu_count`` and ``shm``), and Ansible's setup facts
(probe ``setup_facts``) under ``ansible_facts`` and, as Ansible injects them
(INJECT_FACTS_AS_VARS), as ``ansible_<name>`` variables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine import probes

if TYPE_CHECKING:
    from engine.connection.base import Become, Connection


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


@dataclass(frozen=True)
class Gathered:
    own: dict[str, Any]  # rigger's, the value of ``facts``
    ansible: dict[str, Any]  # Ansible's setup facts, unprefixed (``ansible_facts``)


def gather(conn: Connection, gather_subset: Any = None, *, sudo: Become = False) -> Gathered:
    """Everything in one round trip: the host probe, each room's, Ansible's setup facts
    (as root with ``sudo``, or as its become_user: a play gathers as it becomes, as Ansible does)."""
    rooms = tuple(source.probe for source in sources())
    answer = conn.run_probe(
        probes.bundle(("host", *rooms, "setup_facts")), {"setup_facts": {"gather_subset": gather_subset}}, sudo=sudo
    )
    own = dict(answer["host"])
    for probe in rooms:
        own.update(answer[probe])
    return Gathered(own, answer["setup_facts"])


def prefixed(ansible_facts: Mapping[str, Any]) -> dict[str, Any]:
    """Facts by the names Ansible injects as variables (and the setup module answers):
    ``ansible_`` + name; ``gather_subset`` and ``module_setup`` as they are."""
    return {name if name in _UNPREFIXED else f"ansible_{name}": value for name, value in ansible_facts.items()}


def store(data: dict[str, Any], set_vars: Mapping[str, Any]) -> None:
    """A task's variables (or gathered facts) into a host's data. New ``ansible_facts``
    merge into the host's (as Ansible's fact cache does: a later gathering, or ``setup``
    with a filter, keeps the other facts) and every fact is injected as a variable
    (INJECT_FACTS_AS_VARS, on by default)."""
    new = dict(set_vars)
    if isinstance(new.get("ansible_facts"), Mapping):
        merged = {**(data.get("ansible_facts") or {}), **new["ansible_facts"]}
        new = {**prefixed(merged), **new, "ansible_facts": merged}
    data.update(new)


def clear(data: dict[str, Any]) -> None:
    """``meta: clear_facts``: what gathering and ``setup`` stored for the host is gone (its
    fact cache, as Ansible's ``clear_facts`` empties it), registered results and ``set_fact``
    values stay."""
    for name in prefixed(data.get("ansible_facts") or {}):
        data.pop(name, None)
    data["ansible_facts"] = {}
    data["facts"] = defaults()


# keys of Ansible's fact result that are not facts about the host and keep their name
_UNPREFIXED = frozenset({"gather_subset", "module_setup"})


def may_be_fact(name: str) -> bool:
    """Whether gathering can define ``name`` on some host (``ansible_eth0`` depends on the
    host, so every ``ansible_*`` name may be one)."""
    return name in _UNPREFIXED or name.startswith("ansible_")
