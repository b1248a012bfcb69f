"""One round of ``rigger watch``: plan every host, repair what may be repaired, report the rest.

1. Plan the playbook in check mode (a plan file beside the state, for a person to review
   and ``rigger apply``). Planning takes no run lock: it only reads, and every repair is
   planned again just before it is applied.
2. Per host: converged; drift (a pending change the playbook does not declare
   self-healable: left for a person, nothing applied on that host); a repair candidate
   (every pending change is declared healable); unreachable; paused.
3. The fleet breaker: too many candidates at once is a shared cause (a driver rollout, a
   bad image), not many broken hosts: every host is paused, nothing is repaired.
4. Candidates within their budget are repaired in one run limited to them, with a gate
   that refuses (fails the task) any change that is not declared healable, so a host that
   drifted between the plan and the repair is not changed beyond its declaration.
   Each repair takes the host's run lock without waiting: a person's run goes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import registry
from engine.connection.warm import WarmConnections
from engine.errors import EXIT_INTERRUPTED, TaskFailed
from engine.inventory import select_hosts
from engine.model import Inventory, Playbook
from engine.module_api import Change
from engine.output.events import Event, HostResult, Notice, Status, TaskStarted
from engine.plans import commands as plan_commands
from engine.plans.recorder import read_only
from engine.run.executor import PlannedStep
from engine.run.runner import Runner, RunOptions
from engine.watch import store
from engine.watch.journal import Journal
from engine.watch.policy import Budget, HealRule, healable

# A refuse verdict from the GPU health check pauses the host at once: repairing software on
# a host whose hardware is unfit is the wrong answer.
HEALTH_MODULES = frozenset({"ensure_gpus_healthy"})


@dataclass
class HostFindings:
    pending: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    unreachable: str = ""


class Collector:
    """A Sink: what each host's tasks planned (or did), with their module and change kind."""

    def __init__(self) -> None:
        self._module = ""
        self.hosts: dict[str, HostFindings] = {}
        self.notices: list[str] = []

    def emit(self, event: Event) -> None:
        if isinstance(event, TaskStarted):
            self._module = event.module
        elif isinstance(event, HostResult):
            self._result(event)
        elif isinstance(event, Notice) and event.level in ("warning", "error"):
            self.notices.append(event.message)

    def _result(self, event: HostResult) -> None:
        found = self.hosts.setdefault(event.host, HostFindings())
        step = {"task": event.task, "module": self._module, "kind": event.change_kind, "summary": event.summary}
        if event.status == Status.UNREACHABLE:
            found.unreachable = event.msg
        elif event.status == Status.FAILED and not event.ignored:
            found.failed.append({**step, "msg": event.msg})
        elif event.planned == "change" and not read_only(self._module) and event.status != Status.FAILED:
            found.pending.append(step)

    def close(self) -> None:
        return None


class HealGate:
    """The repair run's ``before_apply``: only declared healable changes are applied."""

    def __init__(self, rules: tuple[HealRule, ...]):
        self._rules = rules

    def __call__(self, step: PlannedStep) -> None:
        change = step.change
        if step.check_mode in registry.CHANGES_NOTHING or not isinstance(change, Change):
            return
        if not healable(self._rules, step.module, change.kind):
            label = f"{step.module}:{change.kind}" if change.kind else step.module
            raise TaskFailed(f"rigger watch: {label} is not declared self-healable: would {change.summary}")


@dataclass(frozen=True)
class Setup:
    """What every round needs, fixed for the watcher's life."""

    request: plan_commands.Request
    book: Playbook
    inventory: Inventory
    rules: tuple[HealRule, ...]
    budget: Budget
    folder: Path
    warm: WarmConnections
    journal: Journal
    clock: Callable[[], float] = time.time


def run_cycle(setup: Setup, state: store.WatchState) -> dict[str, Any]:
    """One round; updates ``state`` (the caller saves it) and returns its summary."""
    state.cycles += 1
    now = setup.clock()
    findings = _plan(setup)
    hosts = _targets(setup)
    candidates = _judge(setup, state, findings, hosts, now)
    if candidates and _breaker_trips(setup, state, candidates, hosts, now):
        candidates = []
    ready = [name for name in candidates if _within_budget(setup, state, name, now)]
    if ready:
        _repair(setup, state, ready)
    summary = {"cycle": state.cycles, "hosts": {h: state.host(h).state for h in hosts}}
    setup.journal.record("cycle", **summary)
    return summary


def _targets(setup: Setup) -> list[str]:
    found: set[str] = set()
    for play in setup.book.plays:
        found.update(select_hosts(setup.inventory, play.hosts, setup.request.limit))
    return sorted(found)


def _plan(setup: Setup) -> dict[str, HostFindings]:
    collector = Collector()
    out = setup.folder / "drift-plan.json"
    plan = plan_commands.make_plan(setup.request, str(out), _Tee(collector), warm=setup.warm)
    if plan.exit_code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt  # the run was interrupted: this round stops here
    setup.journal.record("plan", plan_file=str(out), pending={h: len(f.pending) for h, f in collector.hosts.items()})
    return collector.hosts


class _Tee:
    """make_plan closes its display; the collector outlives it."""

    def __init__(self, collector: Collector):
        self._collector = collector

    def emit(self, event: Event) -> None:
        self._collector.emit(event)

    def close(self) -> None:
        return None


def _judge(
    setup: Setup, state: store.WatchState, findings: dict[str, HostFindings], hosts: list[str], now: float
) -> list[str]:
    candidates = []
    for name in hosts:
        host, found = state.host(name), findings.get(name, HostFindings())
        host.last_check = now
        if found.unreachable:
            setup.warm.discard(name)  # the next round connects afresh
            _set(host, "unreachable", found.unreachable)
        elif host.pause is not None or state.fleet_pause is not None:
            host.state = "paused"
        elif unfit := [f for f in found.failed if f["module"] in HEALTH_MODULES]:
            _pause(setup, name, host, "the GPU health check refused the host", unfit[0]["msg"], now)
        elif found.failed:
            _set(host, "plan failed", found.failed[0]["msg"])
            setup.journal.record("drift", host=name, failed=found.failed)
        elif not found.pending:
            _set(host, "converged", "")
            host.failed_repairs = 0
        elif all(healable(setup.rules, p["module"], p["kind"]) for p in found.pending):
            candidates.append(name)
            setup.journal.record("needs_repair", host=name, changes=found.pending)
        else:
            drift = [p for p in found.pending if not healable(setup.rules, p["module"], p["kind"])]
            _set(host, "drift", "; ".join(f"{p['task']}: {p['summary']}" for p in drift))
            setup.journal.record("drift", host=name, changes=drift, plan_file=str(setup.folder / "drift-plan.json"))
    return candidates


def _set(host: store.HostState, state: str, detail: str) -> None:
    host.state, host.detail = state, store.evidence(detail)


def _pause(setup: Setup, name: str, host: store.HostState, reason: str, evidence: str, now: float) -> None:
    host.pause = store.Pause(now, reason, store.evidence(evidence))
    _set(host, "paused", reason)
    setup.journal.record("pause", host=name, reason=reason, evidence=host.pause.evidence)


def _breaker_trips(setup: Setup, state: store.WatchState, candidates: list[str], hosts: list[str], now: float) -> bool:
    budget = setup.budget
    if len(hosts) < budget.breaker_min_hosts or len(candidates) <= budget.breaker_share * len(hosts):
        return False
    reason = (
        f"{len(candidates)} of {len(hosts)} hosts need repair at once (more than {budget.breaker_share:.0%}): "
        "a shared cause is likelier than many broken hosts; nothing repaired"
    )
    state.fleet_pause = store.Pause(now, reason, ", ".join(candidates))
    for name in candidates:
        _set(state.host(name), "paused", reason)
    setup.journal.record("breaker", reason=reason, hosts=candidates)
    return True


def _within_budget(setup: Setup, state: store.WatchState, name: str, now: float) -> bool:
    host, budget = state.host(name), setup.budget
    done = host.repairs_in(now, budget.window_s)
    if done >= budget.max_repairs:
        _pause(
            setup,
            name,
            host,
            f"{done} repairs in {budget.window_s:g}s did not keep it in its declared state",
            host.detail,
            now,
        )
        return False
    next_at = host.repairs[-1] + budget.backoff_after(done) if host.repairs else now
    if now < next_at:
        _set(host, "backoff", f"next repair in {next_at - now:.0f}s")
        return False
    return True


def _repair(setup: Setup, state: store.WatchState, names: list[str]) -> None:
    collector = Collector()
    request = setup.request
    options = RunOptions(
        check_mode=False,
        diff=True,
        limit=",".join(names),
        tags=request.tags,
        skip_tags=request.skip_tags,
        forks=request.forks,
        extra_vars=request.extra_vars,
        lock_wait_s=0.0,  # a person's run holds the lock: it goes first, we try next round
        before_apply=HealGate(setup.rules),
    )
    started = setup.clock()
    for name in names:
        state.host(name).repairs.append(started)
        setup.journal.record("repair", host=name)
    code = Runner(setup.inventory, options, collector.emit, warm=setup.warm).run(setup.book)
    for name in names:
        _repaired(setup, state, name, collector.hosts.get(name, HostFindings()))
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt


def _repaired(setup: Setup, state: store.WatchState, name: str, found: HostFindings) -> None:
    host = state.host(name)
    in_window = host.repairs_in(setup.clock(), setup.budget.window_s)
    if found.unreachable or found.failed:
        why = found.unreachable or found.failed[0]["msg"]
        if found.unreachable:
            setup.warm.discard(name)
        host.failed_repairs += 1
        _set(host, "repair failed", why)
        setup.journal.record("repair_failed", host=name, evidence=host.detail, failed_in_row=host.failed_repairs)
        if in_window >= setup.budget.max_repairs:
            _pause(
                setup, name, host, f"{in_window} repairs failed or did not hold within the window", why, setup.clock()
            )
        return
    host.failed_repairs = 0
    _set(host, "repaired", "; ".join(p["summary"] for p in found.pending))
    setup.journal.record("repaired", host=name, changes=found.pending)
