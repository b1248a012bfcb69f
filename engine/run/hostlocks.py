"""The run's per-machine locks: taken once per machine, released when the run ends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from engine import runlock
from engine.connection.base import Connection
from engine.connection.factory import connection_kind
from engine.errors import pause_unless_stopped


def machine_key(host_name: str, host_vars: Mapping[str, Any]) -> tuple[Any, ...]:
    """Several inventory names can reach one machine; they share one lock."""
    if connection_kind(host_name, host_vars) == "local":
        return ("local",)
    address = host_vars.get("ansible_host", host_vars.get("ansible_ssh_host", host_name))
    return ("ssh", address, host_vars.get("ansible_port", 22), host_vars.get("ansible_user"))


class HostLocks:
    """Locks are taken in parallel across machines: only names of one machine wait for
    each other (the guard never covers an SSH connect)."""

    def __init__(self, stop: threading.Event | None = None) -> None:
        self._stop = stop or threading.Event()  # the run's stop flag: a wait for a lock ends with the run
        self._held: dict[tuple[Any, ...], runlock.LockHandle] = {}
        self._per_machine: dict[tuple[Any, ...], threading.Lock] = {}
        self._guard = threading.Lock()

    def _machine_lock(self, key: tuple[Any, ...]) -> threading.Lock:
        with self._guard:
            return self._per_machine.setdefault(key, threading.Lock())

    def take(
        self,
        host_name: str,
        host_vars: Mapping[str, Any],
        conn: Connection,
        owner: str,
        wait_s: float = 0,
        waiting: Callable[[str], None] = lambda _: None,
    ) -> str | None:
        """Lock the host's machine unless this run holds it already, waiting up to
        ``wait_s`` for another run to finish. Returns a takeover warning, if any; raises
        HostUnreachable (RunLocked) when another run still holds it."""
        key = machine_key(host_name, host_vars)
        with self._machine_lock(key):
            if key in self._held:
                return None
            handle = runlock.acquire_waiting(conn, owner, wait_s, waiting, sleep=self._sleep)
            with self._guard:
                self._held[key] = handle
        return handle.warning

    def _sleep(self, seconds: float) -> None:
        """A pause between tries for a held lock; Interrupted once the run is stopping (the
        wait runs in a fork, where the signal never lands)."""
        pause_unless_stopped(self._stop, seconds)

    def release_all(self, workers: int = 1) -> None:
        """Release every held lock, ``workers`` at a time: each release is a round trip to
        its host, and one after the other they added up at fleet size."""
        with self._guard:
            held = list(self._held.values())
            self._held.clear()
        if workers <= 1 or len(held) <= 1:
            for handle in held:
                runlock.release(handle)
            return
        with ThreadPoolExecutor(max_workers=min(workers, len(held))) as pool:
            list(pool.map(runlock.release, held))
