"""The apply gate: called by the executor after each plan(), before any apply.

A step is applied only when its fresh plan equals a reviewed, not yet applied change of
the same task on the same host (plan-then-compare per task, just before applying it).
Anything else fails the task with what differs, which stops that host; with
``stop_all`` the first refusal stops every host at its next task.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field

from engine.errors import TaskFailed
from engine.executor import PlannedStep
from engine.module_api import Change
from engine.plans.compare import differences
from engine.plans.planfile import Plan, Step
from engine.plans.recorder import Masking, content


@dataclass
class GateReport:
    applied: list[tuple[str, Step]] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


class ApplyGate:
    def __init__(self, plan: Plan, masking: Masking, *, stop_all: bool = False):
        self._masking = masking
        self._stop_all = stop_all
        self._lock = threading.Lock()
        self._left: dict[str, list[Step]] = {h.name: list(h.pending) for h in plan.hosts}
        self._changed_files: dict[str, set[str]] = defaultdict(set)
        self.report = GateReport()

    def not_applied(self) -> dict[str, list[Step]]:
        """Reviewed changes the apply did not make (already in state, or stopped before)."""
        return {host: steps for host, steps in self._left.items() if steps}

    def __call__(self, step: PlannedStep) -> None:
        if step.check_mode == "read-only" or not isinstance(step.change, Change):
            return  # read-only module, or nothing to apply
        with self._lock:
            self._check(step, step.change)

    def _check(self, step: PlannedStep, change: Change) -> None:
        if self._stop_all and self.report.refused:
            first = next(iter(self.report.refused))
            self._refuse(step.host, f"apply stopped: drift on {first} (--on-drift all)")
        fresh = self._fresh(step, change)
        if step.host not in self._left:
            self._refuse(step.host, f"{step.host} is not in the reviewed plan; would {fresh.summary}")
        candidates = [s for s in self._left[step.host] if s.location == step.location]
        changed = self._changed_files[step.host]
        for reviewed in candidates:
            if not differences(reviewed, fresh, changed):
                self._left[step.host].remove(reviewed)
                changed.update(k for k in reviewed.fingerprint if k.startswith("file:"))
                self.report.applied.append((step.host, reviewed))
                return
        if not candidates:
            self._refuse(step.host, f"not in the reviewed plan: would {fresh.summary or 'change (no_log)'}")
        found = differences(candidates[0], fresh, changed)
        self._refuse(step.host, "the host drifted since the review:\n  " + "\n  ".join(found))

    def _fresh(self, step: PlannedStep, change: Change) -> Step:
        shown = content(change.summary, change.diffs, change.fingerprint, step.no_log, self._masking)
        return Step(
            task="",
            module=step.module,
            location=step.location,
            status="changed",
            planned="change",
            summary=shown.summary,
            diffs=shown.diffs,
            fingerprint=shown.fingerprint,
            no_log=step.no_log,
            sealed=shown.sealed,
        )

    def _refuse(self, host: str, message: str) -> None:
        self.report.refused.setdefault(host, message)
        raise TaskFailed(f"refused by the saved plan: {message}", {"plan_refused": message})
