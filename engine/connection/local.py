"""The local connection: subprocesses on this machine, probes in-process."""

from __future__ import annotations

import base64
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from engine import probes
from engine.connection.base import Become, CommandResult, raise_for_status, sudo_missing
from engine.connection.capture import drain
from engine.connection.interpreter import interpreter_argv
from engine.errors import CommandFailed, HostUnreachable, TaskFailed
from engine.probes.fileio import read_bytes, write_atomic
from engine.runlock import LockHolder, holder_program
from engine.runlock.holders import ProcessHolder, start_holder

SUDO = ("sudo", "-n", "--")


def _needs_sudo(sudo: Become) -> bool:
    """Whether becoming ``sudo`` takes sudo: not when this process already is that user."""
    if isinstance(sudo, str):
        return sudo != pwd.getpwuid(os.geteuid()).pw_name
    return sudo and os.geteuid() != 0


def sudo_prefix(sudo: Become, env_names: Sequence[str] = ()) -> tuple[str, ...]:
    """sudo's argv before the command; another user as Ansible's sudo becomes one
    (``-H -n -u USER``: that user's HOME), the task's environment names kept through sudo."""
    if not _needs_sudo(sudo):
        return ()
    if not isinstance(sudo, str):
        return SUDO
    preserve = (f"--preserve-env={','.join(env_names)}",) if env_names else ()
    return ("sudo", "-H", "-n", "-u", sudo, *preserve, "--")


@dataclass
class LocalConnection:
    host_name: str = "localhost"
    python: str = sys.executable
    _running: set[subprocess.Popen[bytes]] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # the controller's files are this host's files (engine/controller_files.py)
    controller_is_host: ClassVar[bool] = True
    _python_argv: list[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # checked here, before any task: a shell character in it is refused, not "not found"
        # this controller's own python (the default) is one path, whatever it holds
        own = self.python == sys.executable
        self._python_argv = [self.python] if own else interpreter_argv(self.python, self.host_name)

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
    ) -> CommandResult:
        full = (*sudo_prefix(sudo, list(env or {})), *argv)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                full,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env={**os.environ, **env} if env else None,
                start_new_session=True,
            )
        except OSError as exc:
            if full[0] == "sudo" and not _on_path("sudo"):  # not the command: the sudo become needs
                raise TaskFailed(sudo_missing(self.host_name)) from None
            result = CommandResult(tuple(argv), 127, "", f"{argv[0]}: {exc.strerror}")
            return raise_for_status(result) if check else result
        assert proc.stdout is not None and proc.stderr is not None
        deadline = None if timeout_s is None else started + timeout_s
        try:  # from the moment it exists: an interrupt anywhere after this ends it
            with self._lock:
                self._running.add(proc)
            if stdin is not None and proc.stdin is not None:
                _feed_stdin(proc.stdin, stdin)
            buffers, timed_out = drain({"stdout": proc.stdout, "stderr": proc.stderr}, deadline)
        except BaseException:  # interrupted: the command must not outlive the run
            _kill_group(proc)
            raise
        finally:
            with self._lock:
                self._running.discard(proc)
        if timed_out:
            _kill_group(proc)
            raise CommandFailed(
                f"command timed out after {timeout_s:g}s: {' '.join(argv)}",
                {"rc": None, "stdout": buffers["stdout"].text(), "stderr": buffers["stderr"].text()},
            )
        rc = proc.wait()
        result = CommandResult(
            argv=tuple(argv),
            rc=rc,
            stdout=buffers["stdout"].text(),
            stderr=buffers["stderr"].text(),
            duration_s=time.monotonic() - started,
            truncated=any(b.dropped for b in buffers.values()),
        )
        return raise_for_status(result) if check else result

    def read_file(self, path: str, *, sudo: Become = False) -> bytes | None:
        if _needs_sudo(sudo):
            answer = self.run_probe("fileio", {"op": "read", "path": path}, sudo=sudo)
            return base64.b64decode(answer["data"]) if answer["exists"] else None
        try:
            return read_bytes(path)  # the guarded read: regular files, bounded, trusted links only
        except OSError as exc:
            raise TaskFailed(f"cannot read {path}: {exc.strerror or exc}") from None

    def write_file(self, path: str, data: bytes, *, mode: int | None = None, sudo: Become = False) -> None:
        if _needs_sudo(sudo):  # written by that user's process: its files (and temp files) are its own
            payload = {"op": "write", "path": path, "data": base64.b64encode(data).decode(), "mode": mode}
            self.run_probe("fileio", payload, sudo=sudo)
            return
        try:
            atomic_write(path, data, mode)
        except OSError as exc:
            raise TaskFailed(f"cannot write {path}: {exc.strerror or exc}; the file is unchanged") from None

    def run_probe(self, name: str, args: Mapping[str, Any] | None = None, *, sudo: Become = False) -> dict[str, Any]:
        if not _needs_sudo(sudo):
            return probes.run_in_process(name, dict(args or {}))
        tail, stdin = probes.invocation(name, args)
        result = self.run([*self._python_argv, *tail], sudo=sudo, stdin=stdin, check=False)
        return probes.parse_output(name, result.stdout, result.stderr)

    def hold_run_lock(self, request: Mapping[str, Any]) -> tuple[LockHolder, dict[str, Any]]:
        try:
            holder = ProcessHolder([*self._python_argv, "-c", holder_program()])
        except OSError as exc:
            raise HostUnreachable(
                f"{self.host_name}: cannot start {self._python_argv[0]} for the run lock: {exc.strerror or exc} "
                "(set ansible_python_interpreter to an interpreter's path)"
            ) from None
        return start_holder(holder, self.host_name, request)

    def close(self) -> None:
        """End commands still running (Ctrl-C): they run in their own session."""
        with self._lock:
            running = list(self._running)
        for proc in running:
            _kill_group(proc)


def _on_path(program: str) -> bool:
    return shutil.which(program) is not None


def _feed_stdin(pipe: Any, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except BrokenPipeError:
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def atomic_write(path: str, data: bytes, mode: int | None = None) -> None:
    """Temp file in the same directory, fsync, rename; keeps the old mode by default."""
    write_atomic(path, data, mode)
