"""Plays x hosts: forks, linear strategy, serial batches, failure limits, handlers, blocks."""

from __future__ import annotations

import fnmatch
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine import facts as facts_mod
from engine import runlock, templating
from engine.connection.base import Become, Connection, become_target
from engine.connection.factory import open_connection
from engine.connection.local import LocalConnection
from engine.connection.predicted import PredictedHost
from engine.connection.warm import WarmConnections
from engine.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TASK_FAILED,
    EXIT_UNREACHABLE,
    HostUnreachable,
    OptionsError,
    RiggerError,
    TaskFailed,
    TemplateError,
    ValidationError,
)
from engine.inventory import Membership, load_inventory, select_hosts
from engine.model import Block, Inventory, Location, Play, Playbook, Step, Task
from engine.output.events import (
    COUNTERS,
    Event,
    HostResult,
    Interruption,
    Notice,
    PlayStarted,
    Progress,
    Recap,
    Status,
    TaskFinished,
    TaskStarted,
)
from engine.playbook import loader, tags
from engine.run import groupby, interrupt, quarantine
from engine.run.batches import Limits, batches
from engine.run.executor import ExecOptions, Outcome, PlannedStep, TaskRunner, become_of, become_user_of, loop_items
from engine.run.hostlocks import HostLocks
from engine.templating import magicvars, taskvars
from engine.templating.filters import to_bool
from engine.templating.omit import without_omitted
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
    lock_wait_s: float | None = None  # --lock-wait; None: the rigger_run_lock_wait_s variable
    before_apply: Callable[[PlannedStep], None] | None = None  # `rigger apply PLAN`'s gate
    # ansible.cfg and -u/-b/-K/--private-key/-c/-T: below play keywords and inventory variables
    connection_defaults: Mapping[str, Any] = field(default_factory=dict)
    start_at_task: str | None = None  # --start-at-task: tasks before the first match are skipped


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
    ended: bool = False
    failure: dict[str, Any] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return not (self.failed or self.unreachable or self.ended)


def _new_stats() -> dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


FORK_THREAD = "rigger-fork"
END_POLL_S = 0.2  # after an interrupt: how often commands that forks still run are ended


class Runner:
    def __init__(
        self,
        inventory: Inventory,
        options: RunOptions,
        emit: Callable[[Event], None],
        warm: WarmConnections | None = None,
    ):
        self.inventory = inventory
        # Connections kept open by the caller across runs (rigger watch): borrowed, never closed here.
        self._warm = warm
        self.options = options
        self._emit_raw = emit
        self._emit_lock = threading.Lock()
        self.stats: dict[str, dict[str, int]] = {}
        self.stopped_at: dict[str, str] = {}
        self._connections: dict[str, Connection] = {}
        self._interrupted = threading.Event()
        self._in_flight: dict[str, str] = {}  # host -> the task running there now
        self._touched: dict[str, tuple[str, ...]] = {}  # what an interrupted task had done
        self._left_running: dict[str, tuple[str, ...]] = {}
        self._locks = HostLocks(self._interrupted)
        self._forks: ThreadPoolExecutor | None = None
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
        self._play_now = Play(name="", hosts="", location=Location("", 0))
        self._batch_hosts: list[HostRun] = []
        self._play_ended = False
        self._delegated_to: dict[str, str] = {}
        self._delegate_guard = threading.Lock()
        # Ansible's removed hosts: failed (not rescued, not ignored; a failed run_once task fails
        # its batch) or unreachable. Gone from ansible_play_hosts and from later plays.
        self._down: set[str] = set()
        become = options.connection_defaults.get("ansible_become")
        self._become_default = {} if become is None else {"ansible_become": become}
        self._start_at = options.start_at_task
        # Controller-side quarantine (engine/run/quarantine.py): read when the run starts.
        self._quarantine: dict[str, dict[str, Any]] = {}
        self._quarantine_news: dict[str, str] = {}
        self._breaker_tripped = False
        # failed/unreachable counts a meta: clear_host_errors forgave, per host (exit code)
        self._cleared: dict[str, tuple[int, int]] = {}
        self._joined: list[Membership] = []  # group_by's groups, for the whole run
        self._group_joins = groupby.GroupJoins()
        self._batch_vars: Mapping[str, Any] = {}
        self._playbook_path = ""

    def emit(self, event: Event) -> None:
        with self._emit_lock:
            self._emit_raw(event)

    # ---- connections -------------------------------------------------------------
    def connection(self, host: str) -> Connection:
        """One connection per host for the whole run. -e wins here too (as in Ansible):
        ``-e ansible_user=ops`` or ``-e host_key_checking=accept-new`` apply."""
        if host not in self._connections:
            self._connections[host] = self._open(host, self._connection_vars(host))
        return self._connections[host]

    def _open(self, host: str, host_vars: Mapping[str, Any]) -> Connection:
        """The host's connection (a warm one under ``rigger watch``); in check mode wrapped
        in the predicted state this run's planned changes carry forward
        (engine/connection/predicted.py)."""
        conn = self._warm.get(host, host_vars) if self._warm is not None else open_connection(host, host_vars)
        return PredictedHost(conn) if self.options.check_mode else conn

    def _connection_vars(self, host: str) -> Mapping[str, Any]:
        """ansible.cfg and the command line, then the play's connection/remote_user, then the
        host's variables, extra vars winning; each rendered when the connection reads it
        (``ansible_python_interpreter: "{{ ansible_playbook_python }}"`` is a template)."""
        inventory_vars = {
            **self.options.connection_defaults,
            **self._play_now.connection_vars,
            **self.inventory.host(host).vars,
        }
        magic = {**self._run_magic, **magicvars.host_variables(self.inventory, host)}
        scope = templating.Scope({**inventory_vars, **magic}, {}, self.options.extra_vars)
        return templating.RenderedOnRead({**inventory_vars, **self.options.extra_vars}, scope)

    def _report_connection_warnings(self, hosts: list[HostRun]) -> None:
        for host in hosts:
            drain = getattr(host.conn, "drain_warnings", None)
            for warning in drain() if drain else []:
                self.emit(Notice("warning", warning, host.name))

    def _lock(self, host: HostRun) -> HostResult | None:
        """Take the host's run lock once per run; a held lock makes the host unreachable."""
        task = "Acquiring the run lock"
        try:
            self._take_lock(
                host.name,
                self._connection_vars(host.name),
                host.conn,
                lambda message: self.emit(Progress(host.name, task, message)),
            )
        except TaskFailed as exc:
            return HostResult(host.name, task, Status.FAILED, False, msg=exc.msg)
        except HostUnreachable as exc:
            return HostResult(host.name, task, Status.UNREACHABLE, False, msg=str(exc))
        return None

    def _take_lock(
        self, name: str, host_vars: Mapping[str, Any], conn: Connection, waiting: Callable[[str], None]
    ) -> None:
        """The one way a host's machine is locked, for the play's hosts and the ones a task
        reaches (delegate_to, peers); the lock's variables are read like the connection's
        (-e wins over the inventory). Raises TaskFailed for a bad rigger_run_lock_wait_s,
        HostUnreachable when another run holds the lock."""
        if self.options.check_mode or not to_bool(host_vars.get("rigger_run_lock", True)):
            return
        warning = self._locks.take(name, host_vars, conn, self.owner, self._lock_wait_s(host_vars), waiting)
        if warning:
            self.emit(Notice("warning", warning, name))

    def _lock_wait_s(self, host_vars: Mapping[str, Any]) -> float:
        """Seconds to wait for the lock: --lock-wait, else rigger_run_lock_wait_s."""
        if self.options.lock_wait_s is not None:
            return self.options.lock_wait_s
        value = host_vars.get("rigger_run_lock_wait_s", 0)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = -1.0
        if isinstance(value, bool) or not seconds >= 0:
            raise TaskFailed(f"rigger_run_lock_wait_s must be a number of seconds (>= 0), not {value!r}")
        return seconds

    def _drop_warm_connections(self) -> None:
        """An interrupt ends the commands still running: borrowed connections are closed too
        (their owner opens them afresh), as a run's own are by ``close``."""
        if self._warm is not None:
            for name in list(self._connections):
                self._warm.discard(name)

    def _end_commands(self) -> None:
        """Close the connections: that ends the commands still running on them."""
        if self._warm is not None:
            self._drop_warm_connections()
        self._close_all(list(self._connections.values()))

    def _close_all(self, conns: list[Connection]) -> None:
        """Close connections ``forks`` at a time: each is a round trip to its host, and one
        after the other they added up at fleet size (and after an interrupt on a loaded
        machine)."""
        if not conns:
            return
        with ThreadPoolExecutor(max_workers=max(1, min(self.options.forks, len(conns)))) as pool:
            for problem in pool.map(_close, conns):
                if problem:
                    self.emit(Notice("warning", f"closing connection failed: {problem}"))

    def close(self) -> None:
        """Release the locks, then close the connections."""
        if self._interrupted.is_set():
            self._drop_warm_connections()  # an interrupt ends running commands on borrowed ones too
        if self._forks is not None:
            self._forks.shutdown(wait=False, cancel_futures=True)  # an interrupt closes under running forks
            self._forks = None
        self._locks.release_all(self.options.forks)
        self._close_all([] if self._warm is not None else list(self._connections.values()))

    # ---- the run -----------------------------------------------------------------
    def run(self, playbook: Playbook) -> int:
        started = time.monotonic()
        self.owner = runlock.owner_description(playbook.path)
        self._quarantine = _read_quarantine()
        try:
            with interrupt.deferred(self._interrupted):
                self._plays(playbook)
        except KeyboardInterrupt as exc:  # SIGINT, SIGTERM and SIGHUP alike (engine/run/interrupt.py)
            self._interrupted.set()
            self.close()
            self._report_interruption(interrupt.signal_name(exc))
        finally:
            self.close()
        self.emit(
            Recap(self.stats, time.monotonic() - started, self.options.check_mode, self.stopped_at, self._quarantined())
        )
        return self.exit_code()

    def _plays(self, playbook: Playbook) -> None:
        for play in playbook.plays:
            if self._interrupted.is_set() or not self._play(play, playbook):
                break
        with interrupt.waiting():  # a signal that came between two waits for the forks stops the run here
            pass

    def _report_interruption(self, signal: str) -> None:
        """The ``interrupted`` event: what was running where, and what it had already done."""
        in_flight = dict(self._in_flight)
        for host, task in in_flight.items():
            self.stopped_at[host] = f"interrupted during '{task}'"
        self.emit(Interruption(signal, in_flight, dict(self._touched), dict(self._left_running)))

    def _interrupted_task(self, host: HostRun, task: Task, runner: TaskRunner) -> None:
        """A task the interrupt stopped: counted as changed when it had already done
        something that may change the host (stopped an old server, ran a command)."""
        if runner.left_running:
            self._left_running[host.name] = tuple(runner.left_running)
        if not runner.touched:
            return
        done = tuple(dict.fromkeys(runner.touched))
        self._touched[host.name] = done
        msg = f"interrupted after it had already: {', '.join(done)}"
        self._record(host, HostResult(host.name, task.display_name, Status.CHANGED, True, msg=msg), task.display_name)

    @property
    def start_at_pending(self) -> bool:
        """--start-at-task named a task the run never reached."""
        return self._start_at is not None

    def _quarantined(self) -> dict[str, str]:
        """The recap's view: hosts of this run quarantined before it or by it."""
        shown = {h: str(e.get("reason")) for h, e in self._quarantine.items() if h in self.stats}
        shown.update(self._quarantine_news)
        return shown

    def exit_code(self) -> int:
        if self._interrupted.is_set():
            return EXIT_INTERRUPTED
        if any(s["failed"] > self._cleared.get(name, (0, 0))[0] for name, s in self.stats.items()):
            return EXIT_TASK_FAILED
        if any(s["unreachable"] > self._cleared.get(name, (0, 0))[1] for name, s in self.stats.items()):
            return EXIT_UNREACHABLE
        return EXIT_OK

    def _play_keyword(self, play: Play, value: Any, play_vars: Mapping[str, Any], key: str) -> Any:
        """A play keyword written as a template (``hosts: "{{ targets | default('all') }}"``),
        rendered as Ansible renders it: with the play's and the extra vars, before any host."""
        if not templating.contains_template(value):
            return value
        scope = templating.Scope({**self._run_magic, **play_vars}, {}, self.options.extra_vars)
        try:
            return templating.render(value, scope)
        except TemplateError as exc:
            where = play.location
            raise ValidationError(f"play '{play.name}': {key}: {exc}", file=where.file, line=where.line) from None

    def rendered_play(self, play: Play, playbook: Playbook) -> Play:
        """The play with its templated keywords rendered, as a run would see it (--list-hosts)."""
        return self._rendered_play(play, self._play_vars(play, playbook))

    def _rendered_play(self, play: Play, play_vars: Mapping[str, Any]) -> Play:
        hosts = self._play_keyword(play, play.hosts, play_vars, "hosts")
        serial = [
            item
            for value in self._play_keyword(play, list(play.serial), play_vars, "serial")
            for item in (value if isinstance(value, list) else [value])
        ]
        gather = self._play_keyword(play, play.gather_facts, play_vars, "gather_facts")
        fatal = self._play_keyword(play, play.any_errors_fatal, play_vars, "any_errors_fatal")
        fail_pct = self._play_keyword(play, play.max_fail_percentage, play_vars, "max_fail_percentage")
        pattern = ":".join(map(str, hosts)) if isinstance(hosts, list) else str(hosts)
        name = play.name
        if name == play.hosts:  # an unnamed play is named by its (rendered) hosts
            name = ",".join(map(str, hosts)) if isinstance(hosts, list) else str(hosts)
        elif templating.is_template(name):
            scope = templating.Scope({**self._run_magic, **play_vars}, {}, self.options.extra_vars)
            name = templating.render_name(name, scope)
        return replace(
            play,
            name=name,
            hosts=pattern,
            serial=tuple(_serial_value(play, v) for v in serial),
            gather_facts=to_bool(gather),
            any_errors_fatal=_flag_value(play, "any_errors_fatal", fatal),
            max_fail_percentage=_percentage_value(play, fail_pct),
        )

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

    def _play(self, play: Play, playbook: Playbook) -> bool:
        """Run one play; False when a failure limit says the playbook ends here."""
        play_vars = self._play_vars(play, playbook)
        play = self._rendered_play(play, play_vars)
        self._play_now = play
        self._playbook_path = playbook.path
        self._task_names: dict[tuple[int, int], str] = {}
        self._batch_count = 0
        matched = self._select(play)
        names = [name for name in matched if name not in self._down]
        self.emit(PlayStarted(play.name, tuple(matched), self.options.check_mode))
        if not names:
            if matched:
                return True  # every host it matched failed in an earlier play
            self.emit(
                Notice(
                    "warning",
                    f"no hosts matched '{play.hosts}'"
                    + (f" with --limit {self.options.limit}" if self.options.limit else ""),
                )
            )
            return True
        self._play_ended = False
        for batch in batches(names, play.serial):
            if self._play_ended:
                break
            # ansible_play_hosts_all is every host the play matched, failed ones included
            self._play_names, self._batch_names = matched, batch
            batch_vars = {**play_vars, **magicvars.play_variables(matched, batch, self._down)}
            self._batch_vars = batch_vars
            hosts = [self._host_run(name, batch_vars) for name in batch]
            self._hosts.update((h.name, h) for h in hosts)
            batch_ok = self._batch(play, hosts)
            self._batch_count += 1
            if not batch_ok:
                for host in names[names.index(batch[-1]) + 1 :]:
                    self.stopped_at.setdefault(host, "not started: the play was stopped")
                return False  # as in Ansible: a failure limit, or a batch with no host left, ends the playbook
        return True

    def _host_run(self, name: str, play_vars: Mapping[str, Any]) -> HostRun:
        return HostRun(
            name=name,
            inventory_vars=self._templated_vars(name, play_vars),
            conn=self.connection(name),
            data=self._data_of(name),
        )

    def _templated_vars(self, name: str, play_vars: Mapping[str, Any]) -> dict[str, Any]:
        """Inventory, then magic, then play variables: all still templates, rendered on use."""
        magic = {**self._run_magic, **magicvars.host_variables(self.inventory, name), "hostvars": self._hostvars}
        if name in self._quarantine:
            magic[quarantine.HOST_VAR] = self._quarantine[name]
        return {**self._become_default, **self.inventory.host(name).vars, **magic, **play_vars}

    def _data_of(self, name: str) -> dict[str, Any]:
        """Facts, registered results and set_fact values: kept for the whole run, as in Ansible
        (where ``ansible_facts`` is defined, empty, before any gathering)."""
        return self._host_data.setdefault(name, {"facts": facts_mod.defaults(), "ansible_facts": {}})

    def _scope_of(self, name: str) -> templating.Scope:
        """What ``hostvars[name]`` shows: that host's variables in the current play."""
        run = self._hosts.get(name)
        templated = run.inventory_vars if run else self._templated_vars(name, {})
        return templating.Scope(templated, self._data_of(name), self.options.extra_vars)

    def _batch(self, play: Play, hosts: list[HostRun]) -> bool:
        """Run the play on one batch. False when the play must stop (failure limits)."""
        self._limits = Limits(play, len(hosts))
        self._play_now, self._batch_hosts = play, hosts
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
        self._in_flight = {h.name: "Acquiring the run lock" for h in hosts}
        results = self._parallel(self._lock, hosts)
        self._in_flight = {}
        for host, result in zip(hosts, results, strict=True):
            if result is not None:
                self._record(host, result, result.task)

    def _gather(self, hosts: list[HostRun]) -> None:
        hosts = [h for h in hosts if h.active]
        if not hosts:
            return
        self.emit(TaskStarted("Gathering Facts", "facts", ""))
        self._in_flight = {h.name: "Gathering Facts" for h in hosts}

        def gather(host: HostRun) -> HostResult:
            started = time.monotonic()
            try:
                sudo = self._gathering_as(host)
                gathered = facts_mod.gather(host.conn, self._play_now.gather_subset, sudo=sudo)
                host.data["facts"] = gathered.own
                facts_mod.store(host.data, {"ansible_facts": gathered.ansible})
                return HostResult(host.name, "Gathering Facts", Status.OK, False, duration_s=time.monotonic() - started)
            except HostUnreachable as exc:
                return HostResult(host.name, "Gathering Facts", Status.UNREACHABLE, False, msg=str(exc))
            except (RiggerError, ValueError) as exc:  # ValueError: a become_user that is no user name
                return HostResult(host.name, "Gathering Facts", Status.FAILED, False, msg=str(exc))

        results = self._parallel(gather, hosts)
        self._in_flight = {}
        for host, result in zip(hosts, results, strict=True):
            self._record(host, result, "Gathering Facts")
        self.emit(TaskFinished("Gathering Facts"))

    def _gathering_as(self, host: HostRun) -> Become:
        """Facts are gathered as the play becomes (root, or its become_user), as in Ansible."""
        scope = self._scope_of(host.name)
        default = self.options.connection_defaults.get("ansible_become_user")
        options = self._play_now.options
        return become_target(become_of(options, scope), become_user_of(options, scope, default))

    def _parallel(self, fn: Callable[[HostRun], Any], hosts: list[HostRun]) -> list[Any]:
        """``fn`` on each host in the run's forks (one host after another with ``-f 1``). The
        main thread only waits: a stop signal is raised there, never inside a command's
        start or bookkeeping (engine/run/interrupt.py)."""
        if threading.current_thread().name.startswith(FORK_THREAD):
            return [fn(h) for h in hosts]  # from inside a fork: never wait on the pool we run in
        futures: list[Future[Any]] = []
        try:
            for host in hosts:
                futures.append(self._fork_pool().submit(fn, host))
            with interrupt.waiting():
                while wait(futures, timeout=interrupt.WAIT_SLICE_S).not_done:
                    pass  # a slice at a time, so a stop signal's handler runs
                return [f.result() for f in futures]
        except KeyboardInterrupt:
            self._interrupted.set()  # the forks stop before their next command (engine/run/interrupt.py)
            for f in futures:
                f.cancel()
            self._end_commands()
            # locks are released (by close) only once no fork runs anything; a command a
            # fork started just as the signal came is ended on the next pass
            while wait(futures, timeout=END_POLL_S).not_done:
                self._end_commands()
            raise

    def _fork_pool(self) -> ThreadPoolExecutor:
        """The run's ``forks`` threads, kept from task to task: a pool per task started
        forks threads per task, and at 100 hosts those starts were a visible share of the run."""
        if self._forks is None:
            self._forks = ThreadPoolExecutor(max_workers=self.options.forks, thread_name_prefix=FORK_THREAD)
        return self._forks

    def _record_outcome(self, host: HostRun, outcome: Outcome, task_name: str) -> None:
        """A loop shows every item but counts once in the recap, as Ansible does."""
        if len(outcome.results) == 1:
            self._record(host, outcome.results[0], task_name)
            return
        for result in outcome.results:
            self.emit(result)
        failed = [r for r in outcome.results if r.status == "failed"]
        ignored = bool(failed) and all(r.ignored for r in failed) and outcome.status == "failed"
        summary = HostResult(host.name, task_name, outcome.status, outcome.changed, ignored=ignored)
        self._record(host, summary, task_name, show=False)

    def _record(self, host: HostRun, result: HostResult, task_name: str, show: bool = True) -> None:
        stats = self.stats.setdefault(host.name, _new_stats())  # the recap lists hosts that ran a task
        if show:
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
        if result.status in (Status.FAILED, Status.UNREACHABLE):
            self._down.add(host.name)

    # ---- steps, blocks, tasks ------------------------------------------------------
    def _steps(self, steps: Iterable[Step], hosts: list[HostRun], play: Play, top: bool = True) -> bool:
        """Run steps on the hosts; failure limits are judged at play level only."""
        for step in steps:
            if self._interrupted.is_set() or self._breaker_tripped:
                return False
            if isinstance(step, Block):
                self._block(step, hosts, play)
            else:
                self._task(step, [h for h in hosts if h.active], handler=False)
            if top and self._limits.exceeded(hosts):
                self.emit(Notice("error", self._limits.reason(hosts)))
                return False
            if not top and play.any_errors_fatal and any(h.failed for h in hosts):
                return False  # every host leaves the block at once (to its rescue, if any)
        return True

    def _block(self, block: Block, hosts: list[HostRun], play: Play) -> None:
        entering = [h for h in hosts if h.active]
        self._steps(block.block, entering, play, top=False)
        failed = [h for h in entering if h.failed and not h.unreachable]
        if block.rescue and failed:
            # A failure that goes to rescue counts as rescued, not failed (even if the rescue
            # then fails); with any_errors_fatal every host of the block goes to rescue.
            rescuers = [h for h in entering if h.active or h in failed] if play.any_errors_fatal else failed
            for host in failed:
                host.data.update(host.failure)
                stats = self.stats.setdefault(host.name, _new_stats())
                stats["rescued"] += 1
                stats["failed"] -= 1
                self._down.discard(host.name)
            for host in rescuers:
                host.failed = False
            self._steps(block.rescue, rescuers, play, top=False)
        if block.always:
            still_failed = [h for h in entering if h.failed]
            for host in still_failed:
                host.failed = False
            stopped_at = {h.name: h.last_task for h in still_failed}
            self._steps(block.always, [h for h in entering if not h.unreachable], play, top=False)
            for host in still_failed:
                host.failed = True
                host.last_task = stopped_at[host.name]

    def _selected_by_tags(self, task: Task, hosts: list[HostRun]) -> bool:
        try:
            scope = self._scope(task, hosts[0]) if hosts else None
            task_tags = tags.flatten(task.options.tags, scope)
        except TemplateError as exc:
            self.emit(Notice("warning", f"{task.location}: tags: {exc}"))
            task_tags = tags.flatten(t for t in task.options.tags if not templating.is_template(t))
        return tags.selected(task_tags, self.options.tags, self.options.skip_tags)

    def _before_start(self, task: Task) -> bool:
        """--start-at-task: True while the named task has not been reached (it is matched
        as a pattern, with or without its role's prefix, as Ansible matches it)."""
        if self._start_at is None:
            return False
        if any(fnmatch.fnmatch(name, self._start_at) for name in (task.name, task.display_name) if name):
            self._start_at = None
            return False
        return True

    def _task(self, task: Task, hosts: list[HostRun], handler: bool) -> None:
        if not handler and self._before_start(task):
            return
        if not hosts or not self._selected_by_tags(task, hosts):
            return
        if task.module == "meta":
            self._meta(task, hosts)
            return
        if task.include is not None:
            self._include(task, hosts)
            return
        runs_on = self._run_once_host(task, hosts)
        if runs_on is not None:
            hosts = [runs_on]
        task = self._named(task, hosts[0])
        self.emit(TaskStarted(task.display_name, task.module, str(task.location), handler))
        self._in_flight = {}
        play_magic = magicvars.play_variables(self._play_names, self._batch_names, self._down)
        for host in hosts:
            host.inventory_vars.update(play_magic)

        def run_on(host: HostRun) -> Outcome:
            self._in_flight[host.name] = task.display_name  # started: a host waiting for a fork is not
            scope = self._scope(task, host)
            conn, problem = self._delegated_connection(task, host, scope)
            if problem is not None:
                self._record(host, problem, task.display_name)
                return Outcome((problem,), problem.status, {})
            runner = TaskRunner(
                task,
                host.name,
                conn,
                scope,
                ExecOptions(
                    check_mode=self.options.check_mode,
                    verbosity=self.options.verbosity,
                    before_apply=self.options.before_apply,
                    connect=self._delegate_connection,
                    stop=self._interrupted,
                    become_user=self.options.connection_defaults.get("ansible_become_user"),
                ),
                lambda message: self.emit(Progress(host.name, task.display_name, message)),
            )
            try:
                outcome = runner.run()
            except KeyboardInterrupt:  # only the first signal raises: this record is not cut short
                self._interrupted_task(host, task, runner)
                raise
            if task.module == "group_by":
                outcome = self._group_joins.record(self.inventory, host.name, outcome)
            self._in_flight.pop(host.name, None)
            self._record_outcome(host, outcome, task.display_name)
            return outcome

        outcomes = self._parallel(run_on, hosts)
        for host, outcome in zip(hosts, outcomes, strict=True):
            self._after(task, host, outcome)
            if runs_on is not None:
                self._share_run_once(task, host, outcome)
        if task.module == "group_by":
            self._join_groups(self._group_joins.take())
        self._quarantine_marks(task, hosts, outcomes)
        self.emit(TaskFinished(task.display_name))

    def _named(self, task: Task, first: HostRun) -> Task:
        """A templated task name rendered as Ansible shows it: with the first host's
        variables, once per play (Ansible keeps the name its first batch rendered), and a
        role's tasks once per batch (Ansible copies them for each); undefined parts as
        Ansible marks them (templating.render_name)."""
        if not templating.is_template(task.name):
            return task
        key = (id(task), self._batch_count if task.options.role is not None else 0)
        if key not in self._task_names:
            self._task_names[key] = templating.render_name(task.name, self._scope(task, first))
        return replace(task, name=self._task_names[key])

    def _quarantine_marks(self, task: Task, hosts: list[HostRun], outcomes: list[Outcome]) -> None:
        """Hosts a task's results mark for quarantine: recorded on the controller (not in
        check mode), unless too many of the play's hosts are marked at once (the breaker)."""
        datas = [r.data for outcome in outcomes for r in outcome.results]
        marks = {
            host.name: reason
            for host, outcome in zip(hosts, outcomes, strict=True)
            for r in outcome.results
            if (reason := quarantine.mark_of(r.data))
        }
        share = quarantine.breaker_share(datas)
        play_size = max(1, len(self._play_names))
        # one refused host is never a fleet: the breaker needs two
        if len(marks) >= 2 and share is not None and len(marks) / play_size > share:
            self._breaker_tripped = True
            for host in self._batch_hosts:
                self.stopped_at.setdefault(host.name, f"circuit breaker after '{task.display_name}'")
            self.emit(
                Notice(
                    "error",
                    f"circuit breaker: '{task.display_name}' refused {len(marks)} of {play_size} hosts "
                    f"({len(marks) / play_size:.0%}, more than {share:.0%}): a shared cause (a driver rollout, "
                    "a bad image) is likelier than that many broken hosts; the run stops here, nothing after "
                    "it ran and no host was quarantined",
                )
            )
            return
        if not marks:
            return
        prefix = "would be quarantined (check mode): " if self.options.check_mode else ""
        self._quarantine_news.update((h, prefix + why) for h, why in marks.items())
        if not self.options.check_mode:
            quarantine.add((h, why, task.display_name) for h, why in marks.items())

    def _after(self, task: Task, host: HostRun, outcome: Outcome) -> None:
        if outcome.status == "failed" and not all(r.ignored for r in outcome.results if r.status == "failed"):
            failed_task = {"name": task.name, "action": task.module, "args": task.args}
            host.failure = {"ansible_failed_task": failed_task, "ansible_failed_result": dict(outcome.registered)}
        if task.register:
            host.data[task.register] = outcome.registered
        facts_mod.store(self._facts_target(task, host), outcome.set_vars)
        if outcome.changed and task.notify:
            host.notified.update(task.notify)

    def _handlers(self, play: Play, hosts: list[HostRun]) -> bool:
        """Notified handlers in the order they are defined, each once per host and flush: a
        notified name runs every handler it names or that listens to it (Ansible's ``listen``);
        a handler notified by another runs in the same flush (a later pass when it is defined
        earlier)."""
        handlers = play.handlers
        due: dict[int, set[str]] = {}  # handler index -> the names of the hosts it is due for
        for _ in range(len(handlers) + 1):
            _take_notified(handlers, hosts, due)
            if not due:
                break
            for index, handler in enumerate(handlers):
                names = due.pop(index, set())
                targets = [h for h in hosts if h.active and h.name in names]
                if targets:
                    self._task(handler, targets, handler=True)
                _take_notified(handlers, hosts, due)  # what this handler notified
        for host in hosts:
            host.notified.clear()
        return True

    # ---- structure: variables, meta, includes, run_once, delegate_to ------------------
    def _scope(self, task: Task, host: HostRun) -> templating.Scope:
        return taskvars.task_scope(task, self._play_now, host.inventory_vars, host.data, self.options.extra_vars)

    def _meta(self, task: Task, hosts: list[HostRun]) -> None:
        action = task.args["_raw_params"]
        if action == "flush_handlers":
            self._handlers(self._play_now, self._batch_hosts)
            return
        if action == "noop":
            return
        self.emit(TaskStarted(task.display_name, task.module, str(task.location), False))
        chosen = []
        for host in hosts:
            try:
                if templating.all_true(task.options.when, self._scope(task, host)):
                    chosen.append(host)
                else:  # shown as Ansible shows it, and, as there, not counted in the recap
                    self.emit(HostResult(host.name, task.display_name, Status.SKIPPED, False, msg="condition false"))
            except TemplateError as exc:
                self._record(host, HostResult(host.name, task.display_name, Status.FAILED, False, msg=str(exc)), "meta")
        self.emit(TaskFinished(task.display_name))
        if action == "end_host":
            for host in chosen:
                host.ended = True
        elif action == "end_play" and chosen:
            self._play_ended = True
            for host in self._batch_hosts:
                host.ended = True
        elif action == "clear_host_errors" and chosen:
            # Ansible: the play's failed and unreachable hosts are back for the next plays
            # (not this one: they stopped here) and their failures no longer fail the run
            for host in self._batch_hosts:
                if host.name in self._down:
                    self._down.discard(host.name)
                    counts = self.stats.get(host.name, {})
                    self._cleared[host.name] = (counts.get("failed", 0), counts.get("unreachable", 0))
        elif action == "reset_connection":
            for host in chosen:
                self._reset_connection(host)
        elif action == "end_batch" and chosen:
            # Ansible: the batch's hosts stop here and the next batch (serial) starts; without
            # serial the one batch is the play, as with end_play
            for host in self._batch_hosts:
                host.ended = True
        elif action == "clear_facts" and chosen:
            # Ansible: every host the play matched, not only those of this batch
            for name in self._play_names:
                facts_mod.clear(self._data_of(name))
        elif action == "refresh_inventory" and chosen:
            self._refresh_inventory()

    def _reset_connection(self, host: HostRun) -> None:
        """A connection that keeps a session (SSH) opens a new one for the next task, so
        what the session fixed at login (new group memberships) is seen; a local
        connection starts a process per command and has nothing to reset."""
        reset = getattr(host.conn, "reset", None)
        if callable(reset):
            reset()
        elif not isinstance(host.conn, LocalConnection):
            message = "meta: reset_connection: this connection cannot open a new session; the current one is kept"
            self.emit(Notice("warning", message, host.name))

    def _refresh_inventory(self) -> None:
        """Read the inventory sources again: hosts and groups added by earlier tasks count
        from the next play on, as in Ansible; group_by's groups stay (ansible-core 2.19 keeps them)."""
        self._reload_inventory()

    def _reload_inventory(self) -> None:
        """The inventory read again as the run read it first: group_vars beside the playbook
        run (not beside an imported one), and group_by's groups."""
        playbook_dir = Path(self._playbook_path).resolve().parent if self._playbook_path else None
        self.inventory = load_inventory(self.inventory.sources, playbook_dir=playbook_dir, joined=self._joined)
        self._hostvars = magicvars.HostVars(self.inventory, self._scope_of)
        self._run_magic["groups"] = magicvars.groups_variable(self.inventory)

    def _join_groups(self, new: list[Membership]) -> None:
        """group_by's groups: the inventory read again with them, and the current batch's
        variables made again, so the next task already sees ``groups``, ``group_names`` and
        the new groups' group_vars (Ansible's variable manager reads them per task)."""
        if not new:
            return
        self._joined += new
        self._reload_inventory()
        for host in self._batch_hosts:
            host.inventory_vars = self._templated_vars(host.name, self._batch_vars)

    def _include(self, task: Task, hosts: list[HostRun]) -> None:
        """Decide per host what the include loads (when, loop, templated name), then run
        each distinct inclusion on the hosts that chose it, in the order first chosen."""
        self.emit(TaskStarted(task.display_name, task.module, str(task.location), False))
        chosen: dict[str, tuple[Mapping[str, Any], dict[str, Any], list[HostRun]]] = {}
        for host in hosts:
            for args, pinned in self._inclusions(task, host):
                key = json.dumps([args, pinned], sort_keys=True, default=str)
                chosen.setdefault(key, (args, pinned, []))[2].append(host)
        self.emit(TaskFinished(task.display_name))
        for args, pinned, members in chosen.values():
            try:
                steps = self._included_steps(task, args)
            except RiggerError as exc:
                for host in members:
                    self._record(host, HostResult(host.name, task.display_name, Status.FAILED, False, msg=str(exc)), "")
                continue
            if pinned:
                steps = tuple(taskvars.with_pinned(step, pinned) for step in steps)
            self._steps(steps, [h for h in members if h.active], self._play_now, top=False)

    def _inclusions(self, task: Task, host: HostRun) -> list[tuple[Mapping[str, Any], dict[str, Any]]]:
        scope = self._scope(task, host)
        try:
            if task.loop is None and not templating.all_true(task.options.when, scope):
                self._record(host, HostResult(host.name, task.display_name, Status.SKIPPED, False), task.display_name)
                return []
            items = [None] if task.loop is None else loop_items(task, scope)
            found = []
            for index, item in enumerate(items):
                pinned = {} if task.loop is None else {task.loop_var: item}
                if task.index_var and task.loop is not None:
                    pinned[task.index_var] = index
                # a looped include's `when` is judged per item, as for any looped task
                if task.loop is not None and not templating.all_true(task.options.when, scope.child(pinned)):
                    # shown per item; counted once, and only when no item was included (as Ansible)
                    self.emit(HostResult(host.name, task.display_name, Status.SKIPPED, False, item=item))
                    continue
                args = without_omitted(templating.render(task.args, scope.child(pinned)))
                found.append((args, pinned))
                shown = args.get("file") or args.get("name")
                result = HostResult(host.name, task.display_name, Status.OK, False, msg=f"included: {shown}", item=item)
                self._record(host, result, task.display_name)
            if items and not found:
                summary = HostResult(host.name, task.display_name, Status.SKIPPED, False)
                self._record(host, summary, task.display_name, show=False)
            return found
        except TemplateError as exc:
            self._record(host, HostResult(host.name, task.display_name, Status.FAILED, False, msg=str(exc)), "")
            return []

    def _included_steps(self, task: Task, args: Mapping[str, Any]) -> tuple[Step, ...]:
        include = task.include
        assert include is not None
        target = args.get("file", args.get("name"))
        if include.preloaded is not None and target == include.target:
            return include.preloaded
        return loader.load_include(task, args)

    def _run_once_host(self, task: Task, hosts: list[HostRun]) -> HostRun | None:
        flag = task.options.run_once
        if isinstance(flag, str):
            try:
                flag = to_bool(templating.render(flag, self._scope(task, hosts[0])))
            except TemplateError:
                flag = False
        return hosts[0] if flag else None

    def _share_run_once(self, task: Task, ran: HostRun, outcome: Outcome) -> None:
        """A run_once task's result is every host's: registered, set_fact, and failure."""
        failed = outcome.status == "failed" and not all(r.ignored for r in outcome.results if r.status == "failed")
        for other in self._batch_hosts:
            if other is ran or other.unreachable:
                continue
            if task.register:
                other.data[task.register] = outcome.registered
            if not self._delegates_facts(task):
                facts_mod.store(other.data, outcome.set_vars)
            if failed:
                other.failed = True
                self._down.add(other.name)
                other.last_task = task.display_name

    def _delegated_connection(
        self, task: Task, host: HostRun, scope: templating.Scope
    ) -> tuple[Connection, HostResult | None]:
        """The connection of the host a task is delegated to: its own inventory variables
        (address, user, port, connection) decide how it is reached; the task's variables
        stay the original host's."""
        if not task.options.delegate_to:
            return self._keyword_connection(task, host), None
        try:
            name = str(templating.render(task.options.delegate_to, scope)).strip()
        except TemplateError as exc:
            return host.conn, HostResult(host.name, task.display_name, Status.FAILED, False, msg=f"delegate_to: {exc}")
        self._delegated_to[host.name] = name
        if name == host.name:
            return host.conn, None
        try:
            return self._delegate_connection(name), None
        except HostUnreachable as exc:
            return host.conn, HostResult(host.name, task.display_name, Status.UNREACHABLE, False, msg=f"{name}: {exc}")
        except TaskFailed as exc:
            return host.conn, HostResult(host.name, task.display_name, Status.FAILED, False, msg=exc.msg)

    def _keyword_connection(self, task: Task, host: HostRun) -> Connection:
        """A task's ``connection: local`` runs it on the control machine with the host's
        variables, unless the host's own ``ansible_connection`` says otherwise (variables
        win over keywords in Ansible); ssh, smart and paramiko are the host's own way."""
        if task.options.connection != "local":
            return host.conn
        own = self.inventory.host(host.name).vars
        if "ansible_connection" in own or "ansible_connection" in self.options.extra_vars:
            return host.conn
        key = f"{host.name} (connection: local)"
        with self._delegate_guard:
            if key not in self._connections:
                self._connections[key] = open_connection("localhost", {"ansible_connection": "local"})
            return self._connections[key]

    def _delegate_connection(self, name: str) -> Connection:
        """An inventory host (or the implicit localhost) is reached with its own variables;
        any other name as itself. Its run lock is taken like any host's (a bad
        rigger_run_lock_wait_s raises TaskFailed naming the host)."""
        with self._delegate_guard:
            try:
                host_vars = self._connection_vars(name)
            except KeyError:
                host_vars = dict(self.options.extra_vars)
            if name not in self._connections:
                self._connections[name] = self._open(name, host_vars)
            conn = self._connections[name]
        try:
            self._take_lock(name, host_vars, conn, lambda _: None)
        except TaskFailed as exc:
            raise TaskFailed(f"{name}: {exc.msg}") from None
        return conn

    def _delegates_facts(self, task: Task) -> bool:
        return bool(task.options.delegate_to) and to_bool(task.options.delegate_facts or False)

    def _facts_target(self, task: Task, host: HostRun) -> dict[str, Any]:
        """Where set_fact stores: the delegated host's data with delegate_facts (an inventory
        host outside the play, or the implicit localhost, too: hostvars reads it later)."""
        if not self._delegates_facts(task):
            return host.data
        name = self._delegated_to.get(host.name, host.name)
        try:
            self.inventory.host(name)
        except KeyError:
            return host.data  # not an inventory host: Ansible keeps the facts nowhere either
        return self._data_of(name)


def _flag_value(play: Play, key: str, value: Any) -> bool:
    """A rendered boolean play keyword: Ansible's true/false words, or a clear refusal."""
    if isinstance(value, bool):
        return value
    if str(value).strip().lower() in _BOOL_WORDS:
        return to_bool(value)
    raise ValidationError(
        f"play '{play.name}': {key}: {value!r} is not a boolean", file=play.location.file, line=play.location.line
    )


def _percentage_value(play: Play, value: Any) -> float | None:
    """A rendered ``max_fail_percentage``: a number from 0 to 100 (None: not set)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or not 0 <= number <= 100:
        raise ValidationError(
            f"play '{play.name}': max_fail_percentage: {value!r} is not a number from 0 to 100",
            file=play.location.file,
            line=play.location.line,
        )
    return number


_BOOL_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "1", "0", "y", "n", "t", "f"})


def _serial_value(play: Play, value: Any) -> int | str:
    """A rendered ``serial:`` item: a count, or a percentage such as ``"30%"``."""
    text = str(value).strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    if text.endswith("%") and text[:-1].replace(".", "", 1).isdigit():
        return text
    raise ValidationError(
        f"play '{play.name}': serial: {value!r} is neither a host count nor a percentage",
        file=play.location.file,
        line=play.location.line,
    )


def _read_quarantine() -> dict[str, dict[str, Any]]:
    try:
        return quarantine.load()
    except (OSError, ValueError) as exc:
        raise OptionsError(
            f"cannot read the quarantine file {quarantine.path()}: {exc}; fix or remove it "
            "(`rigger quarantine list` shows what it holds)"
        ) from None


def _close(conn: Connection) -> str | None:
    try:
        conn.close()
    except Exception as exc:  # closing must not hide the run's outcome
        return str(exc)
    return None


def _take_notified(handlers: tuple[Task, ...], hosts: list[HostRun], due: dict[int, set[str]]) -> None:
    """The hosts' notified names as the handlers they make due (``due``: handler index -> host
    names); the names are consumed."""
    for host in hosts:
        for index, handler in enumerate(handlers):
            if host.notified & _handler_names(handler):
                due.setdefault(index, set()).add(host.name)
        host.notified.clear()


def _handler_names(handler: Task) -> set[str]:
    names = {handler.name, *handler.listen}
    if handler.options.role is not None:
        names.add(f"{handler.options.role.name} : {handler.name}")
    return names
