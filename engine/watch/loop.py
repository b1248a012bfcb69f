"""The watcher's rounds, and stopping them cleanly.

Ctrl-C, SIGTERM or SIGHUP during a round abandons it at the current step: the run ends its
commands, releases its run locks and closes its connections; between rounds it just stops.
No run lock is held between rounds, so a person's ``rigger run`` always gets in.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from engine.connection.warm import WarmConnections
from engine.errors import EXIT_INTERRUPTED, EXIT_OK, OptionsError
from engine.model import Inventory, Playbook
from engine.plans import commands as plan_commands
from engine.run.interrupt import STOP_SIGNALS, on_signal, signal_name, wait_unless_stopped
from engine.watch import metrics, status, store
from engine.watch.cycle import Setup, run_cycle
from engine.watch.journal import Journal
from engine.watch.policy import Budget, heal_rules


@dataclass(frozen=True)
class WatchOptions:
    interval_s: float = 60.0
    cycles: int | None = None  # None: until stopped
    budget: Budget = field(default_factory=Budget)
    state_dir: Path | None = None
    events: Path | None = None
    metrics_port: int | None = None


class Watcher:
    def __init__(self, request: plan_commands.Request, options: WatchOptions, show: Callable[[str], None]):
        self._request = request
        self._options = options
        self._show = show
        self._stop = threading.Event()
        self._in_cycle = False
        self._signal = ""  # the stop signal's name, once one came
        self._state = store.WatchState()
        self._metrics = ""  # the last round's figures: a scrape never waits for a round

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = not self._stop.is_set()
        if first:
            self._signal = signal.Signals(signum).name
        self._stop.set()
        if self._in_cycle and first:  # a second signal never cuts the round's clean-up short
            on_signal(signum, frame)  # abandon the round at its current step (its run's next wait)

    def run(self) -> int:
        folder = self._options.state_dir or store.state_dir()
        book, inventory = plan_commands.loaded(self._request)
        setup = Setup(
            request=self._request,
            book=book,
            inventory=inventory,
            rules=heal_rules(book),
            budget=self._options.budget,
            folder=folder,
            warm=WarmConnections(),
            journal=self._journal(book, inventory, folder),
        )
        self._state = store.load(folder)
        # Signals reach the main thread only; a watcher run from another thread (a test harness)
        # stops with its --cycles.
        try:  # first: a port it cannot have is the operator's option (exit 5), nothing started
            server = self._serve_metrics(setup)
        except OptionsError:
            setup.journal.close()
            raise
        in_main = threading.current_thread() is threading.main_thread()
        stop_signals = STOP_SIGNALS if in_main else ()
        previous = {sig: signal.signal(sig, self._on_signal) for sig in stop_signals}
        setup.journal.record("started", heal=[str(r) for r in setup.rules], budget=vars(setup.budget))
        try:
            return self._rounds(setup, folder)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            setup.warm.close_all()
            if server is not None:
                server.close()
            setup.journal.record("stopped", cycles=self._state.cycles)
            setup.journal.close()

    def _rounds(self, setup: Setup, folder: Path) -> int:
        done = 0
        while not self._stop.is_set():
            try:
                self._in_cycle = True
                run_cycle(setup, self._state)
            except KeyboardInterrupt as exc:  # the round's run reports it as a bare KeyboardInterrupt
                self._stop.set()
                setup.journal.record(
                    "interrupted", signal=self._signal or signal_name(exc), round="abandoned at its current step"
                )
            finally:
                self._in_cycle = False
                store.save(self._state, folder)
                self._metrics = metrics.render(self._state, setup.clock(), setup.budget.window_s)
            self._show(status.table(self._state, setup.clock(), setup.budget.window_s))
            done += 1
            if self._options.cycles is not None and done >= self._options.cycles:
                return EXIT_OK
            wait_unless_stopped(self._stop, self._options.interval_s)
        return EXIT_INTERRUPTED

    def _journal(self, book: Playbook, inventory: Inventory, folder: Path) -> Journal:
        # the inventory's, plays' and -e's secret values go into the one mask before any line
        plan_commands.scrubber_for(book, inventory, self._request.extra_vars)
        return Journal(self._options.events or folder / "events.jsonl")

    def _serve_metrics(self, setup: Setup) -> metrics.MetricsServer | None:
        if self._options.metrics_port is None:
            return None

        self._metrics = metrics.render(self._state, setup.clock(), setup.budget.window_s)
        server = metrics.MetricsServer(self._options.metrics_port, lambda: self._metrics)
        setup.journal.record("metrics", url=f"http://127.0.0.1:{server.port}/metrics")
        return server


def resume(folder: Path, hosts: tuple[str, ...], fleet: bool) -> list[str]:
    """Clear pauses (and the repair budget used) of the named hosts, or the fleet breaker."""
    state = store.load(folder)
    cleared = []
    if fleet and state.fleet_pause is not None:
        state.fleet_pause = None
        cleared.append("the fleet breaker")
    for name in hosts:
        host = state.hosts.get(name)
        if host is None or host.pause is None:
            continue
        host.pause, host.repairs, host.failed_repairs = None, [], 0
        host.state = "resumed"
        cleared.append(name)
    store.save(state, folder)
    journal = Journal(folder / "events.jsonl")
    journal.record("resume", cleared=cleared)
    journal.close()
    return cleared
