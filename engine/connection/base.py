"""The narrow Connection contract and the per-task scoped view over it.

Modules only ever see a ``ScopedConnection``: it applies the task's ``become``,
``environment`` and timeout, and while the engine is planning (``plan()`` or
``--check``) it refuses every write, every mutating probe and every command that
was not declared read-only. That is what makes check mode honest.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from engine import probes
from engine.errors import CommandFailed, Interrupted, WriteRefused, pause_unless_stopped

if TYPE_CHECKING:
    from engine.runlock import LockHolder

TAIL_LINES = 20

# Who a command, read, write or probe runs as: False the login user, True root (sudo), a
# user's name that user (``become_user``, through ``sudo -u``; root's name means True).
Become = bool | str


# a login name as useradd takes one: it reaches sudo's argv, so it never starts with "-"
USER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?\Z")


def become_target(become: bool, user: str | None) -> Become:
    """A task's ``become`` and ``become_user`` as one value (root: True, as before).
    ValueError for a name that is not a user's (``-h``, ``a b``)."""
    if not become:
        return False
    if user in (None, "", "root"):
        return True
    if not USER_NAME.match(str(user)):
        raise ValueError(f"become_user {user!r} is not a user name")
    return str(user)


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    duration_s: float = 0.0
    truncated: bool = False

    def tail(self, lines: int = TAIL_LINES) -> str:
        text = (self.stderr or self.stdout).rstrip("\n")
        return "\n".join(text.splitlines()[-lines:])


class Connection(Protocol):
    """What a transport provides. argv lists only: quoting happens inside SSH."""

    @property
    def host_name(self) -> str: ...

    def run(
        self,
        argv: Sequence[str],
        *,
        sudo: Become = False,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        check: bool = True,
        read_only: bool = False,
    ) -> CommandResult: ...

    def read_file(self, path: str, *, sudo: Become = False) -> bytes | None: ...

    def write_file(self, path: str, data: bytes, *, mode: int | None = None, sudo: Become = False) -> None: ...

    def run_probe(
        self, name: str, args: Mapping[str, Any] | None = None, *, sudo: Become = False
    ) -> dict[str, Any]: ...

    def hold_run_lock(self, request: Mapping[str, Any]) -> tuple[LockHolder, dict[str, Any]]:
        """Start what holds the host's run lock (``engine.runlock``) and send it ``request``;
        returns the holder and its answer (``acquired``, ``path``, ``record``/``holder``)."""
        ...

    def close(self) -> None: ...


def sudo_missing(host: str) -> str:
    """What to say when become finds no sudo on the host (rigger becomes users with sudo)."""
    return (
        f"become failed on {host}: sudo is not installed on the host, and become runs through sudo; "
        "install sudo there (apt-get install sudo, as root), or connect as the user the task needs "
        "and drop become"
    )


def raise_for_status(result: CommandResult) -> CommandResult:
    if result.rc != 0:
        raise CommandFailed(
            f"command exited {result.rc}: {' '.join(result.argv)}\n{result.tail()}".rstrip(),
            {"rc": result.rc, "stdout": result.stdout, "stderr": result.stderr},
        )
    return result


@dataclass(frozen=True)
class TaskScope:
    become: Become = False  # become_target(): root is True, another become_user its name
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    planning: bool = False
    # The run's stop flag (set on SIGINT/SIGTERM/SIGHUP): a task in a worker thread stops
    # at its next command, write or probe instead of starting it (engine/run/interrupt.py).
    stop: threading.Event | None = None


@dataclass(frozen=True)
class ScopedConnection:
    """The connection a module receives: the task's scope applied, writes guarded.

    ``touched`` lists what the task did that may change the host (commands not declared
    read-only, writes, mutating probes), shared by its planning view: a task interrupted
    after one of them is counted as changed (it stopped an old server, say)."""

    inner: Connection
    scope: TaskScope = TaskScope()
    touched: list[str] = field(default_factory=list, compare=False, kw_only=True)
    # detached servers an interrupted task leaves starting by design (serve_vllm), for the
    # run's ``interrupted`` event
    left_running: list[str] = field(default_factory=list, compare=False, kw_only=True)

    def _stop_point(self) -> None:
        if self.scope.stop is not None and self.scope.stop.is_set():
            raise Interrupted()

    @contextmanager
    def _stop_points(self) -> Iterator[None]:
        """Nothing starts once the run is stopping, and what the interrupt ended (a killed
        command, a closed connection) is reported as the interruption, not as the task's
        failure or result."""
        self._stop_point()
        try:
            yield
        except Exception:
            self._stop_point()
            raise
        self._stop_point()

    def pause(self, seconds: float) -> None:
        """A module's wait between checks (``time.sleep`` for modules): a run that is
        stopping does not wait it out. Tasks run in forks, where the signal never arrives as
        an exception; the stop flag says it (engine/run/interrupt.py)."""
        pause_unless_stopped(self.scope.stop, seconds)

    def _touch(self, what: str) -> None:
        self._stop_point()
        self.touched.append(what)

    @property
    def host_name(self) -> str:
        return self.inner.host_name

    def planning(self, planning: bool = True) -> ScopedConnection:
        return replace(self, scope=replace(self.scope, planning=planning))

    def _refuse(self, what: str) -> None:
        if self.scope.planning:
            raise WriteRefused(f"refused while planning (check mode or plan()): {what}")

    def run(
        self,
        argv: Sequence[str],
        *,
        sudo: Become | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        stdin: bytes | None = None,
        timeout_s: float | None = None,
        check: bool = True,
        read_only: bool = False,
    ) -> CommandResult:
        if not read_only:
            self._refuse(f"command {' '.join(argv)}")
            self._touch(f"ran {argv[0] if argv else '?'}")
        merged_env = {**self.scope.environment, **(env or {})}
        with self._stop_points():
            return self.inner.run(
                argv,
                sudo=self.scope.become if sudo is None else sudo,
                env=merged_env,
                cwd=cwd,
                stdin=stdin,
                timeout_s=timeout_s if timeout_s is not None else self.scope.timeout_s,
                check=check,
                read_only=read_only,
            )

    def read_file(self, path: str, *, sudo: Become | None = None) -> bytes | None:
        with self._stop_points():
            return self.inner.read_file(path, sudo=self.scope.become if sudo is None else sudo)

    def write_file(self, path: str, data: bytes, *, mode: int | None = None, sudo: Become | None = None) -> None:
        self._refuse(f"write {path}")
        self._touch(f"wrote {path}")
        with self._stop_points():
            self.inner.write_file(path, data, mode=mode, sudo=self.scope.become if sudo is None else sudo)

    def run_probe(
        self, name: str, args: Mapping[str, Any] | None = None, *, sudo: Become | None = None
    ) -> dict[str, Any]:
        if probes.probe_mutates(name):
            self._refuse(f"probe {name}")
            self._touch(f"probe {name}")
        with self._stop_points():
            return self.inner.run_probe(name, args, sudo=self.scope.become if sudo is None else sudo)

    def run_probe_under(
        self, python: str, name: str, args: Mapping[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> dict[str, Any]:
        """Run a probe with another interpreter on the host (the one vLLM or
        huggingface_hub is installed for). Its args travel on stdin, never in argv."""
        mutates = probes.probe_mutates(name)
        if mutates:
            self._refuse(f"probe {name} (under {python})")
        tail, stdin = probes.invocation(name, args)
        result = self.run(
            [python, *tail],
            stdin=stdin,
            check=False,
            read_only=not mutates,
            timeout_s=timeout_s,
        )
        if result.rc == 127 and not result.stdout:
            raise probes.ProbeError(f"{python} not found on {self.host_name}")
        return probes.parse_output(name, result.stdout, result.stderr)

    def hold_run_lock(self, request: Mapping[str, Any]) -> tuple[LockHolder, dict[str, Any]]:
        return self.inner.hold_run_lock(request)

    def close(self) -> None:
        self.inner.close()
