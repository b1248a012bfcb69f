"""The apply gate: called by the executor after each plan(), before any apply.

A step is applied only when its fresh plan equals a reviewed, not yet applied change of
the same task on the same host (plan-then-compare per task, just before applying it).
A step reviewed as "known after apply" is applied when the step it waits for was applied
in this run and its fresh plan is consistent with the review (``after_apply_problems``;
docs/plans.md). Anything else fails the task with what differs, which stops that host;
with ``stop_all`` the first refusal stops every host at its next task. Steps planned
after a failure on a host are never applied (``HostPlan.applicable``).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field

from engine import registry
from engine.errors import TaskFailed
from engine.module_api import Change, Fills, Removes, Stops, Writes
from engine.plans.compare import differences
from engine.plans.planfile import Plan, Step
from engine.plans.recorder import Masking, content
from engine.run.executor import PlannedStep


@dataclass
class GateReport:
    applied: list[tuple[str, Step]] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


class ApplyGate:
    def __init__(self, plan: Plan, masking: Masking, *, stop_all: bool = False):
        self._masking = masking
        self._stop_all = stop_all
        self._lock = threading.Lock()
        self._left: dict[str, list[Step]] = {h.name: list(h.applicable()) for h in plan.hosts}
        self._changed_files: dict[str, set[str]] = defaultdict(set)
        self._produced: dict[str, list[str]] = defaultdict(list)  # paths applied changes wrote
        self.report = GateReport()

    def not_applied(self) -> dict[str, list[Step]]:
        """Reviewed changes the apply did not make (already in state, or stopped before); a
        step known after apply that planned no change then is no missed change."""
        left = {host: [s for s in steps if s.summary or s.pending] for host, steps in self._left.items()}
        return {host: steps for host, steps in left.items() if steps}

    def __call__(self, step: PlannedStep) -> None:
        if step.check_mode in registry.CHANGES_NOTHING or not isinstance(step.change, Change):
            return  # a module that changes nothing, or nothing to apply
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
            problems = (
                self._after_apply_problems(step.host, reviewed, change, fresh)
                if reviewed.after_apply
                else differences(reviewed, fresh, changed)
            )
            if not problems:
                self._left[step.host].remove(reviewed)
                changed.update(k for k in reviewed.fingerprint if k.startswith("file:"))
                self._produced[step.host] += [e.path for e in change.effects if isinstance(e, Writes | Removes | Fills)]
                self.report.applied.append((step.host, reviewed))
                return
        if not candidates:
            self._refuse(step.host, f"not in the reviewed plan: would {fresh.summary or 'change (no_log)'}")
        nearest = candidates[0]
        if nearest.after_apply:
            found = self._after_apply_problems(step.host, nearest, change, fresh)
            self._refuse(step.host, "not consistent with the review (known after apply):\n  " + "\n  ".join(found))
        found = differences(nearest, fresh, changed)
        self._refuse(step.host, "the host drifted since the review:\n  " + "\n  ".join(found))

    def _after_apply_problems(self, host: str, reviewed: Step, change: Change, fresh: Step) -> list[str]:
        """Empty when a step reviewed as known after apply may be applied as freshly planned:
        the step it waits for was applied in this run, and the change only adds to the host
        (starts, and writes or removes what an applied step produced or what is absent);
        a stop, or an overwrite of what existed at the review, was never reviewed."""
        if not any(h == host and s.task == reviewed.depends_on for h, s in self.report.applied):
            return [f"'{reviewed.depends_on}', which this step waits for, was not applied in this run"]
        produced = self._produced[host]
        found = []
        for effect in change.effects:
            if isinstance(effect, Stops):
                found.append(f"would stop {effect.what}: a running process the review did not show")
            elif isinstance(effect, Writes | Removes | Fills) and not _new_or_produced(effect.path, produced, fresh):
                found.append(f"would change {effect.path}, which existed at the review and is not in it")
        return found

    def _fresh(self, step: PlannedStep, change: Change) -> Step:
        shown = content(change.summary, change.diffs, change.fingerprint, step.no_log, self._masking, step.hide_diff)
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


def _new_or_produced(path: str, produced: list[str], fresh: Step) -> bool:
    """The path is under one an applied step of this run produced, or absent right now."""
    if any(path == p or path.startswith(p.rstrip("/") + "/") for p in produced):
        return True
    return fresh.fingerprint.get(f"file:{path}", "").startswith("absent")
