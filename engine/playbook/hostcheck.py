"""Host selection checked before anything runs: a play ``hosts:`` pattern or ``--limit``
that names nothing in the inventory.

ansible-playbook only warns ("Could not match supplied host pattern, ignoring: gpu") and
skips such a play ("skipping: no hosts matched"), exiting 0; rigger says the same, earlier:
in ``validate`` and before the first task of ``run`` and ``plan``, with the inventory name
the pattern most likely meant. A ``--limit`` that leaves no host is an error (exit 1), as in
ansible-playbook (engine/inventory/patterns.py).
"""

from __future__ import annotations

from engine import templating
from engine.inventory.patterns import PatternError, limit_warnings, mismatches, select_hosts
from engine.model import LOCALHOST_NAMES, Inventory, Play, Playbook


def warnings(book: Playbook, inventory: Inventory, limit: str | None = None) -> list[str]:
    """One line per problem, each naming the play's file:line; [] when every play targets a host."""
    found = [f"--limit: {w}" for w in limit_warnings(inventory, limit)]
    for play in book.plays:
        if templating.contains_template(play.hosts):
            continue  # rendered when the play runs, which warns the same way then
        found += _play_warnings(play, inventory, limit)
    return found


def _play_warnings(play: Play, inventory: Inventory, limit: str | None) -> list[str]:
    where = f"{play.location}: play '{play.name}'"
    if not inventory.hosts:
        if play.hosts in LOCALHOST_NAMES:
            return []
        return [f"{where} targets no host: no inventory was given (-i), only the implicit localhost exists"]
    found = [f"{where}: {w}" for w in mismatches(inventory, play.hosts)]
    try:
        targeted = select_hosts(inventory, play.hosts, limit)
    except PatternError as exc:
        return [*found, f"{where}: {exc}"]
    if not targeted:
        with_limit = f" with --limit {limit!r}" if limit else ""
        found.append(f"{where} targets no host (hosts: {play.hosts!r}{with_limit}): it will be skipped")
    return found
