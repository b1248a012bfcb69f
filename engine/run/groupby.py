"""What ``group_by`` does to the run's inventory, as ansible-core's strategy does it with the
module's result (``add_group``, ``parent_groups``): the host joins the group, the group joins
its parents, and the task is ``changed`` when that made something new. The run keeps these
memberships and reads its inventory sources again with them (engine.inventory), so later
plays' patterns, ``groups``, ``group_names`` and the new group's group_vars all see them.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from engine.inventory import Membership
from engine.model import Inventory
from engine.output.events import HostResult, Status
from engine.run.executor import Outcome

JOINED = (Status.OK, Status.CHANGED)


def _membership(host: str, result: HostResult) -> Membership | None:
    data = result.data
    if result.status not in JOINED or "add_group" not in data:
        return None
    return Membership(host, str(data["add_group"]), tuple(str(p) for p in data.get("parent_groups", ())))


class GroupJoins:
    """One group_by task's memberships, judged in the order hosts finish (ansible-core's
    strategy handles results one by one): a link the first host made is not new for the next."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Membership] = []

    def _is_new(self, inventory: Inventory, wanted: Membership) -> bool:
        """Ansible's ``changed``: the host was not in the group, or the group not under a parent."""
        members = set(inventory.groups.get(wanted.group, ()))
        members |= {m.host for m in self._pending if m.group == wanted.group}
        if wanted.host not in members:
            return True
        linked = {(p, m.group) for m in self._pending for p in m.parents}
        return any(
            wanted.group not in inventory.children.get(parent, ()) and (parent, wanted.group) not in linked
            for parent in wanted.parents
        )

    def record(self, inventory: Inventory, host: str, outcome: Outcome) -> Outcome:
        """The outcome as Ansible reports it: each result that put the host somewhere new is
        ``changed`` (the module itself only names the group), and kept for ``take``."""
        with self._lock:
            results = []
            for result in outcome.results:
                wanted = _membership(host, result)
                if wanted is not None and self._is_new(inventory, wanted):
                    self._pending.append(wanted)
                    result = replace(result, status=Status.CHANGED, changed=True)
                results.append(result)
        if not any(r.changed for r in results):
            return outcome
        registered: dict[str, Any] = {**outcome.registered, "changed": True}
        if "results" in registered:
            registered["results"] = [
                {**item, "changed": r.changed} for item, r in zip(registered["results"], results, strict=True)
            ]
        status = outcome.status if outcome.status == Status.FAILED else Status.CHANGED
        return replace(outcome, results=tuple(results), status=status, registered=registered)

    def take(self) -> list[Membership]:
        """The new memberships of the task, in the order they were made; then none."""
        with self._lock:
            taken, self._pending = self._pending, []
        return taken
