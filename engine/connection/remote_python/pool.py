"""Commands and probes through the persistent remote interpreter, one per (host, become).

``RemoteInterpreterPool.get(sudo)`` starts the remote python on first use. A host without a usable python
(the remote python does not greet) falls back to one exec channel per command: that is what
bootstrapping a bare host needs. A remote python that dies while the transport is up fails only
the current task; the next call starts a new one.
"""

from __future__ import annotations

import base64
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

from engine import probes
from engine.connection.base import Become, CommandResult
from engine.connection.capture import DEFAULT_CAP_BYTES, CappedBuffer
from engine.connection.remote_python.client import RemoteInterpreter, RemoteInterpreterDied, server_source
from engine.connection.ssh.become import become_handshake
from engine.connection.ssh.command import BecomeMarkers, command_line
from engine.connection.ssh.options import SSHOptions
from engine.errors import CommandFailed, HostUnreachable, TaskFailed
from engine.runlock import lockfile_source

ANSWER_GRACE_S = 5.0


@dataclass
class RemoteInterpreterPool:
    options: SSHOptions
    markers: BecomeMarkers
    open_channel: Callable[[], paramiko.Channel]
    remotes: dict[Become, RemoteInterpreter] = field(default_factory=dict)
    unusable: dict[Become, str] = field(default_factory=dict)
    lock_paths: set[str] = field(default_factory=set)  # run locks held by the plain remote python

    @property
    def host_name(self) -> str:
        return self.options.host_name

    def get(self, sudo: Become) -> RemoteInterpreter | None:
        if not self.options.remote_python or sudo in self.unusable:
            return None
        if sudo in self.remotes and not self.remotes[sudo].alive():
            if not sudo and self.lock_paths:
                # never restart silently: the run lock died with it
                raise HostUnreachable(
                    f"{self.host_name}: the remote python holding this run's lock ended; the host "
                    "is no longer locked for this run, so nothing more is done there"
                )
            self.drop(sudo)  # ended between tasks (killed, OOM): start a fresh one
        if sudo not in self.remotes:
            remote = self._start(sudo)
            if remote is None:
                return None
            self.remotes[sudo] = remote
        return self.remotes[sudo]

    def _start(self, sudo: Become) -> RemoteInterpreter | None:
        argv = [*shlex.split(self.options.python), "-c", server_source()]
        password = self.options.become_password if sudo else None
        line = command_line(
            argv,
            become=self.markers if sudo else None,
            become_password=password is not None,
            become_user=sudo if isinstance(sudo, str) else None,
        )
        chan = self.open_channel()
        deadline = time.monotonic() + self.options.connect_timeout_s
        try:
            chan.exec_command(line)
            leftover = b""
            if sudo:
                leftover = become_handshake(chan, self.markers, password, deadline, self.host_name, self.options.user)
            remote = RemoteInterpreter(chan, self.host_name, leftover)
            remote.hello(deadline)
            return remote
        except (RemoteInterpreterDied, TimeoutError) as exc:
            chan.close()
            self.unusable[sudo] = str(exc)
            return None
        except BaseException:
            chan.close()
            raise

    # -- run lock ----------------------------------------------------------------------

    def lock(self, args: Mapping[str, Any], stale_after_s: float) -> dict[str, Any] | None:
        """Take the run lock inside the plain remote python; None when no remote python runs on this host."""
        remote = self.get(False)
        if remote is None:
            return None
        request = {
            "op": "lock",
            "source": lockfile_source(),
            "args": dict(args),
            "stale_after_s": stale_after_s,
        }
        answer = self._lock_call(remote, request)
        if answer.get("acquired"):
            self.lock_paths.add(answer["path"])
        return answer

    def unlock(self, path: str) -> None:
        """Release and clear the record. While a command still runs (an interrupted run),
        leave it: closing the connection ends the remote python, and the lock with it."""
        remote = self.remotes.get(False)
        if path not in self.lock_paths or remote is None:
            return
        self.lock_paths.discard(path)
        try:
            answer = remote.call_if_idle(
                {"op": "unlock", "path": path}, time.monotonic() + self.options.connect_timeout_s
            )
        except (RemoteInterpreterDied, TimeoutError):
            return  # the remote python is gone, and the lock with it
        if answer is not None and "error" in answer:
            raise HostUnreachable(f"{self.host_name}: run lock release failed: {answer['error']}")

    def heartbeat(self) -> None:
        remote = self.remotes.get(False)
        if remote is not None and self.lock_paths:
            remote.heartbeat()

    def _lock_call(self, remote: RemoteInterpreter, request: dict[str, Any]) -> dict[str, Any]:
        try:
            answer = remote.call(request, time.monotonic() + self.options.connect_timeout_s)
        except (RemoteInterpreterDied, TimeoutError) as exc:
            raise HostUnreachable(f"{self.host_name}: run lock: the remote python failed: {exc}") from None
        if "error" in answer:
            raise HostUnreachable(f"{self.host_name}: run lock failed: {answer['error']}")
        return answer

    def drop(self, sudo: Become) -> None:
        remote = self.remotes.pop(sudo, None)
        if remote is not None:
            remote.close()

    def close(self) -> None:
        for sudo in list(self.remotes):
            self.drop(sudo)

    # -- operations --------------------------------------------------------------------

    def run(
        self,
        remote: RemoteInterpreter,
        sudo: Become,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        cwd: str | None,
        stdin: bytes | None,
        timeout_s: float | None,
    ) -> CommandResult:
        started = time.monotonic()
        request = {
            "op": "run",
            "argv": [str(a) for a in argv],
            "env": {str(k): str(v) for k, v in (env or {}).items()},
            "cwd": cwd,
            "stdin_b64": None if stdin is None else base64.b64encode(stdin).decode(),
            "timeout_s": timeout_s,
            "cap": DEFAULT_CAP_BYTES,
        }
        deadline = None if timeout_s is None else started + timeout_s + ANSWER_GRACE_S
        command = shlex.join(argv)
        try:
            answer = remote.call(request, deadline)
        except TimeoutError:
            self.drop(sudo)
            raise CommandFailed(f"command timed out after {timeout_s:g}s: {command}") from None
        except RemoteInterpreterDied as exc:
            self.drop(sudo)
            raise TaskFailed(f"{self.host_name}: the remote python died running {command}: {exc}") from None
        stdout = _buffer(answer.get("stdout_b64"), answer.get("dropped_stdout", 0)).text()
        stderr = _buffer(answer.get("stderr_b64"), answer.get("dropped_stderr", 0)).text()
        if answer.get("timed_out"):
            raise CommandFailed(
                f"command timed out after {timeout_s:g}s: {command}",
                {"rc": None, "stdout": stdout, "stderr": stderr},
            )
        return CommandResult(
            argv=tuple(argv),
            rc=int(answer["rc"]),
            stdout=stdout,
            stderr=stderr,
            duration_s=time.monotonic() - started,
            truncated=bool(answer.get("dropped_stdout") or answer.get("dropped_stderr")),
        )

    def probe(self, remote: RemoteInterpreter, sudo: Become, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        needed = probes.closure(name)
        sources = {n: source for n, source in needed.items() if n not in remote.sent_probes}
        request = {"op": "probe", "name": name, "sources": sources, "args": dict(args)}
        try:
            answer = remote.call(request, None)
        except RemoteInterpreterDied as exc:
            self.drop(sudo)
            raise probes.ProbeError(f"probe {name} ended the remote python: {exc}") from None
        remote.sent_probes.update(needed)
        if "error" in answer:
            raise probes.ProbeError(f"probe {name} failed: {answer['error']}")
        result: dict[str, Any] = answer["ok"]
        return result


def _buffer(data_b64: str | None, dropped: int) -> CappedBuffer:
    data = bytearray(base64.b64decode(data_b64 or ""))
    return CappedBuffer(cap=DEFAULT_CAP_BYTES, data=data, dropped=int(dropped))
