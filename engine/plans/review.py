"""What a reviewer reads, format-free, in the order a busy reviewer reads it:

1. whether the plan is whole (``INCOMPLETE: N hosts failed while planning``);
2. a host-by-task matrix (changed / ok / failed / after = known after apply / skipped),
   hosts with the same row in one row, so a fleet of 100 alike hosts is one line;
3. each change once: the hosts whose change differs only in some words (a port, a path,
   a rank) share one group, those words factored out into a small per-host table
   (``factor.py``); with the reasons beside it (the findings of earlier steps on those
   hosts that name the change's module, e.g. check_serving_compat's FP8-KV finding
   beside patch_quant_config);
4. the steps known only after apply, and the failures.

Read-only steps (checks, benchmarks, asserts, debug) are never counted as changes.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass

from engine.plans.factor import Factored, factored
from engine.plans.planfile import HostPlan, Plan, Step
from engine.run.permissions import WILL_FAIL

NO_LOG_LABEL = "(details hidden: no_log)"
CELLS = ("changed", "after", "failed", "ok", "skipped", "")  # worst first


@dataclass(frozen=True)
class Column:
    number: int
    task: str
    location: str


@dataclass(frozen=True)
class Row:
    """Hosts whose every cell is the same."""

    hosts: tuple[str, ...]
    cells: tuple[str, ...]


@dataclass(frozen=True)
class Group(Factored):
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskReview:
    task: str
    module: str
    location: str
    hosts: tuple[str, ...]  # hosts where it would change something
    groups: tuple[Group, ...]


@dataclass(frozen=True)
class Later:
    """A step known only after apply, on these hosts."""

    task: str
    depends_on: str
    hosts: tuple[str, ...]
    msg: str


@dataclass(frozen=True)
class Review:
    plan: Plan
    columns: tuple[Column, ...]
    matrix: tuple[Row, ...]
    tasks: tuple[TaskReview, ...]
    later: tuple[Later, ...]
    with_changes: tuple[HostPlan, ...]
    unchanged: int
    failed: tuple[tuple[str, str, str], ...]  # host, task, message

    @property
    def pending(self) -> int:
        return self.plan.pending

    @property
    def will_fail(self) -> int:
        """Planned changes the host already says its user may not make (engine/run/permissions.py)."""
        return sum(1 for h in self.plan.hosts for s in h.pending if permission_denied(s))

    @property
    def incomplete(self) -> str:
        """The line every review leads with when hosts failed while planning, else ""."""
        hosts = self.plan.failed_hosts
        if not hosts:
            return ""
        return (
            f"INCOMPLETE: {plural(len(hosts), 'host')} failed while planning ({', '.join(hosts[:6])}"
            f"{', …' if len(hosts) > 6 else ''}): their steps after the failure were not planned"
        )

    def headline(self) -> str:
        hosts = len(self.plan.hosts)
        parts = [f"{plural(self.pending, 'change')} pending on {plural(len(self.with_changes), 'host')}"]
        if self.will_fail:
            parts.append(f"{plural(self.will_fail, 'change')} {WILL_FAIL}")
        if self.later:
            parts.append(f"{plural(sum(len(x.hosts) for x in self.later), 'step')} known after apply")
        parts.append(f"{plural(self.unchanged, 'host')} with nothing to change")
        if self.failed:
            parts.append(f"{plural(len({h for h, _, _ in self.failed}), 'host')} failed while planning")
        return f"{plural(hosts, 'host')}: " + ", ".join(parts)

    def made(self) -> str:
        when = datetime.datetime.fromtimestamp(self.plan.created_at, datetime.UTC)
        return f"made {when:%Y-%m-%d %H:%M} UTC by rigger {self.plan.rigger_version}"


def permission_denied(step: Step) -> bool:
    return any(line.startswith(WILL_FAIL) for line in step.impact)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def hosts_text(hosts: tuple[str, ...], shown: int = 6) -> str:
    """``2 hosts (gpu1, gpu2)``: distinct hosts; a loop's items on one host are counted as
    items (``1 host (localhost), 5 items``), never as hosts."""
    distinct = tuple(dict.fromkeys(hosts))
    names = ", ".join(distinct[:shown]) + (f", … (+{len(distinct) - shown})" if len(distinct) > shown else "")
    items = f", {plural(len(hosts), 'item')}" if len(hosts) > len(distinct) else ""
    return f"{plural(len(distinct), 'host')} ({names}){items}"


# ---- the matrix -------------------------------------------------------------------------


def cell_of(step: Step) -> str:
    if step.status in ("failed", "unreachable"):
        return "failed"
    if step.pending:
        return "changed"
    if step.after_apply:
        return "after"
    return "skipped" if step.status == "skipped" else "ok"


def _columns(plan: Plan) -> tuple[Column, ...]:
    keys: dict[tuple[str, str], None] = {}
    for host in plan.hosts:
        for step in host.steps:
            keys.setdefault((step.location, step.task), None)
    return tuple(Column(n, task, location) for n, (location, task) in enumerate(keys, 1))


def _worst(cells: Iterable[str]) -> str:
    found = set(cells)
    return next((c for c in CELLS if c in found), "")


def _matrix(plan: Plan, columns: tuple[Column, ...]) -> tuple[Row, ...]:
    rows: dict[tuple[str, ...], list[str]] = {}
    for host in plan.hosts:
        cells = tuple(
            _worst(cell_of(s) for s in host.steps if (s.location, s.task) == (c.location, c.task)) for c in columns
        )
        rows.setdefault(cells, []).append(host.name)
    return tuple(Row(tuple(hosts), cells) for cells, hosts in rows.items())


# ---- the changes ------------------------------------------------------------------------


def step_lines(step: Step) -> list[str]:
    """A change as the lines a reviewer reads: what, what it stops and starts, then each
    diff's label and change lines."""
    if step.no_log:
        return [NO_LOG_LABEL]
    lines = [f"would {step.summary}", *step.impact]
    for diff in step.diffs:
        lines.append(f"--- {diff.label}")
        lines += list(diff.changes or ("(text differs)",))
    return lines


def _reasons(host: HostPlan, step: Step) -> list[str]:
    """Findings of the earlier steps on this host that name this step's module (the
    compatibility check naming the patch that fixes what it found), and its own."""
    earlier = host.steps[: host.steps.index(step)]
    found = [w for s in earlier for w in s.warnings if step.module in w]
    return [*found, *step.warnings]


def _task_review(steps: list[tuple[HostPlan, Step]]) -> TaskReview:
    first = steps[0][1]
    groups = factored([(host.name, step_lines(step)) for host, step in steps])
    reasons = {host.name: _reasons(host, step) for host, step in steps}
    return TaskReview(
        task=first.task,
        module=first.module,
        location=first.location,
        hosts=tuple(dict.fromkeys(host.name for host, _ in steps)),
        groups=tuple(
            Group(**g.__dict__, reasons=tuple(dict.fromkeys(r for h in g.hosts for r in reasons[h]))) for g in groups
        ),
    )


def _later(plan: Plan) -> tuple[Later, ...]:
    found: dict[tuple[str, str, str], list[str]] = {}
    for host in plan.hosts:
        for step in host.after_apply:
            found.setdefault((step.task, step.depends_on, step.msg), []).append(host.name)
    return tuple(Later(task, depends, tuple(hosts), msg) for (task, depends, msg), hosts in found.items())


def review(plan: Plan) -> Review:
    by_task: dict[tuple[str, str], list[tuple[HostPlan, Step]]] = {}
    for host in plan.hosts:
        for step in host.pending:
            by_task.setdefault((step.location, step.task), []).append((host, step))
    failed = tuple(
        (h.name, s.task, s.msg) for h in plan.hosts for s in h.steps if s.status in ("failed", "unreachable")
    )
    columns = _columns(plan)
    return Review(
        plan=plan,
        columns=columns,
        matrix=_matrix(plan, columns),
        tasks=tuple(_task_review(steps) for steps in by_task.values()),
        later=_later(plan),
        with_changes=tuple(h for h in plan.hosts if h.pending),
        unchanged=sum(1 for h in plan.hosts if not h.pending and not h.after_apply and not h.failed),
        failed=failed,
    )
