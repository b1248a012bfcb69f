"""What a reviewer reads, format-free: per task, the identical changes across hosts
grouped ("8 hosts: config.json: - quantization_config.kv_cache_scheme"); hosts with
nothing to change only counted."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass

from engine.plans.planfile import HostPlan, Plan, Step

NO_LOG_LABEL = "(details hidden: no_log)"


@dataclass(frozen=True)
class Group:
    """One change, identical on these hosts."""

    hosts: tuple[str, ...]
    label: str
    changes: tuple[str, ...]


@dataclass(frozen=True)
class TaskReview:
    task: str
    module: str
    location: str
    hosts: tuple[str, ...]  # hosts where it would change something
    summaries: tuple[Group, ...]  # label = the summary, no change lines
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class Review:
    plan: Plan
    tasks: tuple[TaskReview, ...]
    with_changes: tuple[HostPlan, ...]
    unchanged: int
    failed: tuple[tuple[str, str, str], ...]  # host, task, message

    @property
    def pending(self) -> int:
        return self.plan.pending

    def headline(self) -> str:
        hosts = len(self.plan.hosts)
        parts = [f"{plural(self.pending, 'change')} pending on {plural(len(self.with_changes), 'host')}"]
        parts.append(f"{plural(self.unchanged, 'host')} with nothing to change")
        if self.failed:
            parts.append(f"{plural(len({h for h, _, _ in self.failed}), 'host')} failed while planning")
        return f"{plural(hosts, 'host')}: " + ", ".join(parts)

    def made(self) -> str:
        when = datetime.datetime.fromtimestamp(self.plan.created_at, datetime.UTC)
        return f"made {when:%Y-%m-%d %H:%M} UTC by rigger {self.plan.rigger_version}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def hosts_text(hosts: tuple[str, ...], shown: int = 6) -> str:
    names = ", ".join(hosts[:shown]) + (f", … (+{len(hosts) - shown})" if len(hosts) > shown else "")
    return f"{plural(len(hosts), 'host')} ({names})"


def _grouped(pairs: Iterable[tuple[str, str, tuple[str, ...]]]) -> tuple[Group, ...]:
    found: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for host, label, changes in pairs:
        hosts = found.setdefault((label, changes), [])
        if host not in hosts:
            hosts.append(host)
    return tuple(Group(tuple(h), label, changes) for (label, changes), h in found.items())


def _diff_pairs(host: str, step: Step) -> Iterable[tuple[str, str, tuple[str, ...]]]:
    if step.no_log:
        yield host, NO_LOG_LABEL, ()
    for diff in step.diffs:
        yield host, diff.label, diff.changes or ("(text differs)",)


def _task_review(steps: list[tuple[str, Step]]) -> TaskReview:
    first = steps[0][1]
    return TaskReview(
        task=first.task,
        module=first.module,
        location=first.location,
        hosts=tuple(dict.fromkeys(h for h, _ in steps)),
        summaries=_grouped((h, s.summary or NO_LOG_LABEL, ()) for h, s in steps),
        groups=_grouped(pair for h, s in steps for pair in _diff_pairs(h, s)),
    )


def review(plan: Plan) -> Review:
    by_task: dict[tuple[str, str], list[tuple[str, Step]]] = {}
    for host in plan.hosts:
        for step in host.pending:
            by_task.setdefault((step.location, step.task), []).append((host.name, step))
    failed = tuple(
        (h.name, s.task, s.msg) for h in plan.hosts for s in h.steps if s.status in ("failed", "unreachable")
    )
    return Review(
        plan=plan,
        tasks=tuple(_task_review(steps) for steps in by_task.values()),
        with_changes=tuple(h for h in plan.hosts if h.pending),
        unchanged=sum(1 for h in plan.hosts if not h.pending and not h.failed),
        failed=failed,
    )
