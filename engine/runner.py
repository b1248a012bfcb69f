"""Plays x hosts: forks, linear strategy, serial batches, failure limits, handlers, blocks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import facts as facts_mod
from engine import magicvars, runlock, templating
from engine.batches import Limits, batches
from engine.connection.base import Connection
from engine.connection.factory import open_connection
from engine.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TASK_FAILED,
    EXIT_UNREACHABLE,
    HostUnreachable,
    RiggerError,
    ValidationError,
)
from engine.executor import ExecOptions, Outcome, PlannedStep, TaskRunner
from engine.filters import to_bool
from engine.inventory import select_hosts
from engine.output.events import (
    COUNTERS,
    Event,
    HostResult,
    Notice,
    PlayStarted,
    Progress,
    Recap,
    Status,
    TaskFinished,
    TaskStarted,
)
from engine.playbook import Block, Inventory, Play, Playbook, Step, Task
from engine.runlock.hostlocks import HostLocks
from engine.yamlload import load_file


@dataclass(frozen=True)
class RunOptions:
    check_mode: bool = False
    diff: bool = False
    limit: str | None = None
    tags: frozenset[str] = frozenset()
    skip_tags: frozenset[str] = frozenset()
    forks: int = 10
    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    verbosity: int = 0
    before_apply: Callable[[PlannedStep], None] | None = None  # `rigger apply PLAN`'s gate


@dataclass
class HostRun:
    """A host's mutable state during one play."""

    name: str
    inventory_vars: dict[str, Any]
    conn: Connection
    data: dict[str, Any] = field(default_factory=dict)
    failed: bool = False
    unreachable: bool = False
    notified: set[str] = field(default_factory=set)
    last_task: str = ""

    @property
    def active(self) -> bool:
        return not (self.failed or self.unreachable)


def _new_stats() -> dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


class Runner:
    def __init__(self, inventory: Inventory, options: RunOptions, emit: Callable[[Event], None]):
        self.inventory = inventory
        self.options = options
        self._emit_raw = emit
        self._emit_lock = threading.Lock()
        self.stats: dict[str, dict[str, int]] = {}
        self.stopped_at: dict[str, str] = {}
        self._connections: dict[str, Connection] = {}
        self._interrupted = threading.Event()
        self._in_flight: dict[str, str] = {}
        self._locks = HostLocks()
        self.owner = "rigger run"
        self._run_magic = magicvars.run_variables(
            inventory,
            options.check_mode,
            options.diff,
            options.forks,
            options.limit,
            options.verbosity,
            options.tags,
            options.skip_tags,
        )
        self._hosts: dict[str, HostRun] = {}
        self._play_names: list[str] = []
        self._batch_names: list[str] = []
        self._host_data: dict[str, dict[str, Any]] = {}
        self._hostvars = magicvars.HostVars(inventory, self._scope_of)

    def emit(self, event: Event) -> None:
        with self._emit_lock:
            self._emit_raw(event)

    # ---- connections -------------------------------------------------------------
    def connection(self, host: str) -> Connection:
        """One connection per host for the whole run. -e wins here too (as in Ansible):
        ``-e ansible_user=ops`` or ``-e host_key_checking=accept-new`` apply."""
        if host not in self._connections:
            self._connections[host] = open_connection(host, self._connection_vars(host))
        return self._connections[host]

    def _connection_vars(self, host: str) -> dict[str, Any]:
        """The host's ``ansible_*`` settings rendered (``ansible_python_interpreter:
        "{{ ansible_playbook_python }}"`` is a template), extra vars winning."""
        inventory_vars = self.inventory.host(host).vars
        magic = {**self._run_magic, **magicvars.host_variables(self.inventory, host)}
        scope = templating.Scope({**inventory_vars, **magic}, {}, self.options.extra_vars)
        merged = {**inventory_vars, **self.options.extra_vars}
        for key, value in merged.items():
            if key.startswith("ansible_") and templating.contains_template(value):
                merged[key] = templating.render(value, scope)
        return merged

    def _report_connection_warnings(self, hosts: list[HostRun]) -> None:
        for host in hosts:
            drain = getattr(host.conn, "drain_warnings", None)
            for warning in drain() if drain else []:
                self.emit(Notice("warning", warning, host.name))

    def _lock(self, host: HostRun) -> HostResult | None:
        """Take the host's run lock once per run; a held lock makes the host unreachable."""
        settings = self._connection_vars(host.name)
        if self.options.check_mode or not to_bool(settings.get("rigger_run_lock", True)):
            return None
        try:
            warning = self._locks.take(host.name, settings, host.conn, self.owner)
        except HostUnreachable as exc:
            return HostResult(host.name, "Acquiring the run lock", Status.UNREACHABLE, False, msg=str(exc))
        if warning:
            self.emit(Notice("warning", warning, host.name))
        return None

    def close(self) -> None:
        self._locks.release_all()
        for conn in self._connections.values():
            try:
                conn.close()
            except Exception as exc:  # closing must not hide the run's outcome
                self.emit(Notice("warning", f"closing connection failed: {exc}"))

    # ---- the run -----------------------------------------------------------------
    def run(self, playbook: Playbook) -> int:
        started = time.monotonic()
        self.owner = runlock.owner_description(playbook.path)
        try:
            for play in playbook.plays:
                if self._interrupted.is_set():
                    break
                self._play(play, playbook)
        except KeyboardInterrupt:
            self._interrupted.set()
            self.close()
            for host, task in self._in_flight.items():
                self.stopped_at[host] = f"interrupted during '{task}'"
            self.emit(Notice("error", "interrupted: no new tasks started; running commands ended"))
        finally:
            self.close()
        self.emit(Recap(self.stats, time.monotonic() - started, self.options.check_mode, self.stopped_at))
        return self.exit_code()

    def exit_code(self) -> int:
        if self._interrupted.is_set():
            return EXIT_INTERRUPTED
        if any(s["failed"] for s in self.stats.values()):
            return EXIT_TASK_FAILED
        if any(s["unreachable"] for s in self.stats.values()):
            return EXIT_UNREACHABLE
        return EXIT_OK

    def _select(self, play: Play) -> list[str]:
        return select_hosts(self.inventory, play.hosts, self.options.limit)

    def _play_vars(self, play: Play, playbook: Playbook) -> dict[str, Any]:
        merged = dict(play.vars)
        for path in play.vars_files:
            data = load_file(path)
            if data is not None and not isinstance(data, Mapping):
                raise ValidationError("a vars file must be a mapping", file=path, line=1)
            merged.update(data or {})
        merged.setdefault("playbook_dir", str(Path(playbook.path).resolve().parent))
        return merged

    def _play(self, play: Play, playbook: Playbook) -> None:
        names = self._select(play)
        self.emit(PlayStarted(play.name, tuple(names), self.options.check_mode))
        if not names:
            self.emit(
                Notice(
                    "warning",
                    f"no hosts matched '{play.hosts}'"
                    + (f" with --limit {self.options.limit}" if self.options.limit else ""),
                )
            )
            return
        play_vars = self._play_vars(play, playbook)
        for name in names:
            self.stats.setdefault(name, _new_stats())
        for batch in batches(names, play.serial):
            self._play_names, self._batch_names = names, batch
            batch_vars = {**play_vars, **magicvars.play_variables(names, batch, self._down())}
            hosts = [self._host_run(name, batch_vars) for name in batch]
            self._hosts.update((h.name, h) for h in hosts)
            if not self._batch(play, hosts):
                for host in names[names.index(batch[-1]) + 1 :]:
                    self.stopped_at.setdefault(host, "not started: the play was stopped")
                return

    def _host_run(self, name: str, play_vars: Mapping[str, Any]) -> HostRun:
        return HostRun(
            name=name,
            inventory_vars=self._templated_vars(name, play_vars),
            conn=self.connection(name),
            data=self._data_of(name),
        )

    def _down(self) -> set[str]:
        """Hosts whose failure was not rescued (nor ignored), or that were unreachable."""
        return {name for name, counts in self.stats.items() if counts["failed"] or counts["unreachable"]}

    def _templated_vars(self, name: str, play_vars: Mapping[str, Any]) -> dict[str, Any]:
        """Inventory, then magic, then play variables: all still templates, rendered on use."""
        magic = {**self._run_magic, **magicvars.host_variables(self.inventory, name), "hostvars": self._hostvars}
        return {**self.inventory.host(name).vars, **magic, **play_vars}

    def _data_of(self, name: str) -> dict[str, Any]:
        """Facts, registered results and set_fact values: kept for the whole run, as in Ansible."""
        return self._host_data.setdefault(name, {"facts": facts_mod.defaults()})

    def _scope_of(self, name: str) -> templating.Scope:
        """What ``hostvars[name]`` shows: that host's variables in the current play."""
        run = self._hosts.get(name)
        templated = run.inventory_vars if run else self._templated_vars(name, {})
        return templating.Scope(templated, self._data_of(name), self.options.extra_vars)

    def _batch(self, play: Play, hosts: list[HostRun]) -> bool:
        """Run the play on one batch. False when the play must stop (failure limits)."""
        self._limits = Limits(play, len(hosts))
        self._take_locks(hosts)
        if play.gather_facts:
            self._gather(hosts)
        self._report_connection_warnings(hosts)
        ok = self._steps(play.tasks, hosts, play)
        if ok and not self._interrupted.is_set():
            ok = self._handlers(play, hosts)
        for host in hosts:
            if host.failed or host.unreachable:
                self.stopped_at.setdefault(host.name, host.last_task)
        return ok and not self._limits.exceeded(hosts)

    def _take_locks(self, hosts: list[HostRun]) -> None:
        for host, result in zip(hosts, self._parallel(self._lock, hosts), strict=True):
            if result is not None:
                self._record(host, result, result.task)

    def _gather(self, hosts: list[HostRun]) -> None:
        hosts = [h for h in hosts if h.active]
        if not hosts:
            return
        self.emit(TaskStarted("Gathering Facts", "facts", ""))

        def gather(host: HostRun) -> HostResult:
            started = time.monotonic()
            try:
                host.data["facts"] = facts_mod.gather(host.conn)
                return HostResult(host.name, "Gathering Facts", Status.OK, False, duration_s=time.monotonic() - started)
            except HostUnreachable as exc:
                return HostResult(host.name, "Gathering Facts", Status.UNREACHABLE, False, msg=str(exc))
            except RiggerError as exc:
                return HostResult(host.name, "Gathering Facts", Status.FAILED, False, msg=str(exc))

        for host, result in zip(hosts, self._parallel(gather, hosts), strict=True):
            self._record(host, result, "Gathering Facts")
        self.emit(TaskFinished("Gathering Facts"))

    def _parallel(self, fn: Callable[[HostRun], Any], hosts: list[HostRun]) -> list[Any]:
        if len(hosts) == 1 or self.options.forks <= 1:
            return [fn(h) for h in hosts]
        with ThreadPoolExecutor(max_workers=min(self.options.forks, len(hosts))) as pool:
            futures = [pool.submit(fn, h) for h in hosts]
            try:
                return [f.result() for f in futures]
            except KeyboardInterrupt:
                self._interrupted.set()
                for f in futures:
                    f.cancel()
                self.close()
                raise

    def _record(self, host: HostRun, result: HostResult, task_name: str) -> None:
        stats = self.stats[host.name]
        self.emit(result)
        host.last_task = task_name
        if result.ignored:
            stats["ignored"] += 1
            stats["ok"] += 1
            return
        if result.status == "changed":
            stats["changed"] += 1
            stats["ok"] += 1
        elif result.status in (Status.OK, Status.SKIPPED, Status.FAILED, Status.UNREACHABLE):
            stats[result.status] += 1
        if result.status == "failed":
            host.failed = True
        if result.status == "unreachable":
            host.unreachable = True

    # ---- steps, blocks, tasks ------------------------------------------------------
    def _steps(self, steps: Iterable[Step], hosts: list[HostRun], play: Play, top: bool = True) -> bool:
        """Run steps on the hosts; failure limits are judged at play level only."""
        for step in steps:
            if self._interrupted.is_set():
                return False
            if isinstance(step, Block):
                self._block(step, hosts, play)
            else:
                self._task(step, [h for h in hosts if h.active], handler=False)
            if top and self._limits.exceeded(hosts):
                self.emit(Notice("error", self._limits.reason(hosts)))
                return False
        return True

    def _block(self, block: Block, hosts: list[HostRun], play: Play) -> None:
        entering = [h for h in hosts if h.active]
        self._steps(block.block, entering, play, top=False)
        failed = [h for h in entering if h.failed and not h.unreachable]
        if block.rescue and failed:
            for host in failed:
                host.failed = False
            self._steps(block.rescue, failed, play, top=False)
            for host in failed:
                if not host.failed:
                    self.stats[host.name]["rescued"] += 1
                    self.stats[host.name]["failed"] -= 1
        if block.always:
            still_failed = [h for h in entering if h.failed]
            for host in still_failed:
                host.failed = False
            self._steps(block.always, [h for h in entering if not h.unreachable], play, top=False)
            for host in still_failed:
                host.failed = True

    def _selected_by_tags(self, task: Task) -> bool:
        tags = set(task.options.tags)
        if self.options.skip_tags & tags:
            return False
        if self.options.tags:
            return bool(tags & self.options.tags) or "always" in tags
        return "never" not in tags

    def _task(self, task: Task, hosts: list[HostRun], handler: bool) -> None:
        if not hosts or not self._selected_by_tags(task):
            return
        self.emit(TaskStarted(task.display_name, task.module, str(task.location), handler))
        self._in_flight = {h.name: task.display_name for h in hosts}
        play_magic = magicvars.play_variables(self._play_names, self._batch_names, self._down())
        for host in hosts:
            host.inventory_vars.update(play_magic)

        def run_on(host: HostRun) -> Outcome:
            scope = templating.Scope(host.inventory_vars, host.data, self.options.extra_vars)
            runner = TaskRunner(
                task,
                host.name,
                host.conn,
                scope,
                ExecOptions(
                    check_mode=self.options.check_mode,
                    verbosity=self.options.verbosity,
                    before_apply=self.options.before_apply,
                ),
                lambda message: self.emit(Progress(host.name, task.display_name, message)),
            )
            outcome = runner.run()
            for result in outcome.results:
                self._record(host, result, task.display_name)
            return outcome

        for host, outcome in zip(hosts, self._parallel(run_on, hosts), strict=True):
            self._after(task, host, outcome)
        self.emit(TaskFinished(task.display_name))

    def _after(self, task: Task, host: HostRun, outcome: Outcome) -> None:
        if task.register:
            host.data[task.register] = outcome.registered
        host.data.update(outcome.set_vars)
        if outcome.changed and task.notify:
            host.notified.update(task.notify)

    def _handlers(self, play: Play, hosts: list[HostRun]) -> bool:
        for handler in play.handlers:
            names = {handler.name, *handler.listen}
            targets = [h for h in hosts if h.active and h.notified & names]
            self._task(handler, targets, handler=True)
        for host in hosts:
            host.notified.clear()
        return True
