"""Turns a check-mode run's events into a Plan: one Step per task result and host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from engine import registry
from engine.module_api import Diff
from engine.output.events import HIDDEN, Event, HostResult, PlayStarted, TaskStarted
from engine.plans.planfile import HostPlan, PlannedDiff, Step
from engine.plans.secrets import Scrubber, sealed
from engine.plans.structured import change_lines


@dataclass(frozen=True)
class Masking:
    """How a plan keeps secrets out: the scrubber for secret values, the salt for seals."""

    scrubber: Scrubber
    salt: bytes


@dataclass(frozen=True)
class Content:
    summary: str
    diffs: tuple[PlannedDiff, ...]
    fingerprint: Mapping[str, str]
    sealed: str


def read_only(module: str) -> bool:
    """Modules that change nothing: never counted or listed as changes."""
    return module in registry.module_names() and registry.get(module).check_mode in registry.CHANGES_NOTHING


DIFF_HIDDEN = "(diff hidden: diff: false)"


def content(
    summary: str,
    diffs: Sequence[Diff],
    fingerprint: Mapping[str, str],
    no_log: bool,
    masking: Masking,
    hide_diff: bool = False,
) -> Content:
    """What a step shows and is compared by: masked, or for no_log only a sealed digest.
    ``hide_diff`` (the task's ``diff: false``): each diff keeps its label only, and the
    texts are compared through a sealed digest, as no_log's."""
    if no_log:
        material = [summary, [[d.label, d.before, d.after] for d in diffs], dict(sorted(fingerprint.items()))]
        return Content("", (), {}, sealed(masking.salt, material))
    scrub = masking.scrubber.text
    if hide_diff and diffs:
        hidden = tuple(PlannedDiff(scrub(d.label), "", "", (DIFF_HIDDEN,)) for d in diffs)
        digest = sealed(masking.salt, [[d.label, d.before, d.after] for d in diffs])
        prints = {scrub(k): scrub(v) for k, v in sorted(fingerprint.items())}
        return Content(scrub(summary), hidden, prints, digest)
    shown = tuple(
        PlannedDiff(scrub(d.label), scrub(d.before), scrub(d.after), tuple(scrub(c) for c in change_lines(d)))
        for d in diffs
    )
    prints = {scrub(k): scrub(v) for k, v in sorted(fingerprint.items())}
    return Content(scrub(summary), shown, prints, "")


def step_of(result: HostResult, module: str, masking: Masking) -> Step:
    shown = content(result.summary, result.diffs, result.fingerprint, result.no_log, masking, result.diff is False)
    return Step(
        task=masking.scrubber.text(result.task),
        module=module,
        location=result.location,
        status=result.status,
        msg=HIDDEN if result.no_log else masking.scrubber.text(result.msg),
        planned=result.planned,
        summary=shown.summary,
        diffs=shown.diffs,
        fingerprint=shown.fingerprint,
        item=None if result.no_log else masking.scrubber.value(result.item),
        no_log=result.no_log,
        sealed=shown.sealed,
        read_only=read_only(module),
        depends_on=masking.scrubber.text(result.depends_on),
        impact=() if result.no_log else tuple(masking.scrubber.text(line) for line in result.impact),
        warnings=() if result.no_log else tuple(masking.scrubber.text(w) for w in result.warnings),
    )


class PlanRecorder:
    """A Sink: collects every host's steps, in the order the run made them."""

    def __init__(self, masking: Masking):
        self._masking = masking
        self._module = ""
        self._steps: dict[str, list[Step]] = {}

    def emit(self, event: Event) -> None:
        if isinstance(event, PlayStarted):
            for host in event.hosts:
                self._steps.setdefault(host, [])
        elif isinstance(event, TaskStarted):
            self._module = event.module
        elif isinstance(event, HostResult):
            self._steps.setdefault(event.host, []).append(step_of(event, self._module, self._masking))

    def close(self) -> None:
        return None

    def hosts(self) -> tuple[HostPlan, ...]:
        return tuple(HostPlan(name, tuple(steps)) for name, steps in self._steps.items())
