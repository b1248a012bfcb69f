"""What a playbook lets ``rigger watch`` repair by itself, and the limits on repairing.

A play declares its self-healable classes of change in the variable ``rigger_watch_heal``:
a list of ``MODULE`` (any change that module plans) or ``MODULE:KIND`` (only changes of that
kind, the module's ``Change.kind``: ``serve_vllm:down`` restarts a server that died or
wedged with its spec unchanged, ``serve_vllm:spec`` would roll out a changed spec).
Nothing is healable unless declared. A change of kind ``starting`` (serve_vllm waiting for
the server an interrupted run left loading, and recording it ready) stops and starts
nothing: wherever the module's ``down`` is healable, it is too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine import registry
from engine.errors import ValidationError
from engine.model import Playbook

HEAL_VARIABLE = "rigger_watch_heal"
FINISHES_A_START = "starting"  # waits for a server the module started earlier; changes nothing


@dataclass(frozen=True)
class HealRule:
    module: str
    kind: str | None = None  # None: every kind of change the module plans

    def allows(self, module: str, kind: str) -> bool:
        if self.module != module:
            return False
        return self.kind in (None, kind) or (kind == FINISHES_A_START and self.kind == "down")

    def __str__(self) -> str:
        return self.module if self.kind is None else f"{self.module}:{self.kind}"


@dataclass(frozen=True)
class Budget:
    """How much repairing one host may get, and when the whole fleet stops repairing."""

    max_repairs: int = 3  # repairs per host in one window; then the host is paused
    window_s: float = 3600.0
    backoff_s: float = 30.0  # before the 2nd repair in a window; doubled for each further one
    breaker_share: float = 0.5  # more than this share of the hosts needing repair at once ...
    breaker_min_hosts: int = 4  # ... in a fleet of at least this many pauses every host

    def backoff_after(self, repairs_in_window: int) -> float:
        return 0.0 if repairs_in_window <= 0 else self.backoff_s * 2 ** (repairs_in_window - 1)


def _rule(entry: object, where: str) -> HealRule:
    known = registry.module_names()
    if not isinstance(entry, str) or not entry.strip():
        raise ValidationError(f"{where}: {HEAL_VARIABLE} entries are 'MODULE' or 'MODULE:KIND', not {entry!r}")
    module, _, kind = entry.strip().partition(":")
    module = registry.canonical(module)
    if module not in known:
        raise ValidationError(f"{where}: {HEAL_VARIABLE}: no module named {module!r}{registry.suggest(module, known)}")
    return HealRule(module, kind or None)


def heal_rules(book: Playbook) -> tuple[HealRule, ...]:
    """Every play's declared classes, checked against the modules rigger has."""
    rules: list[HealRule] = []
    for play in book.plays:
        declared = play.vars.get(HEAL_VARIABLE)
        if declared is None:
            continue
        where = f"{play.location}: play {play.name!r}"
        if not isinstance(declared, list):
            raise ValidationError(f"{where}: {HEAL_VARIABLE} must be a list, e.g. ['serve_vllm:down']")
        rules += [_rule(entry, where) for entry in declared]
    return tuple(dict.fromkeys(rules))


def healable(rules: Iterable[HealRule], module: str, kind: str) -> bool:
    return any(rule.allows(module, kind) for rule in rules)
