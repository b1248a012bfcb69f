"""The exception tree. Each class carries the process exit code it maps to (Ansible's)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_TASK_FAILED = 2
EXIT_UNREACHABLE = 3
EXIT_INVALID = 4
EXIT_BAD_OPTIONS = 5
EXIT_INTERRUPTED = 99
EXIT_UNEXPECTED = 250


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM, SIGHUP: engine/run/interrupt.py), or a task that
    found its run stopping before its next command. A KeyboardInterrupt: Ctrl-C and the
    other signals take the same path. Exit code EXIT_INTERRUPTED."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def pause_unless_stopped(stop: threading.Event | None, seconds: float) -> None:
    """Sleep ``seconds``, unless the run is stopping: then raise Interrupted at once. The
    waits of a task run in a fork, where a stop signal never arrives as an exception; the
    run's stop flag says it (engine/run/interrupt.py). No flag: a plain sleep."""
    seconds = max(0.0, seconds)
    if stop is None:
        time.sleep(seconds)
    elif stop.wait(seconds):
        raise Interrupted()


class RiggerError(Exception):
    """Base of every error rigger reports to a user without a traceback."""

    exit_code = EXIT_ERROR


class ValidationError(RiggerError):
    """A playbook, inventory or vars file is invalid. Nothing was touched."""

    exit_code = EXIT_INVALID

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        self.message = message
        self.file = file
        self.line = line
        super().__init__(self.located())

    def located(self) -> str:
        if self.file and self.line:
            return f"{self.file}:{self.line}: {self.message}"
        if self.file:
            return f"{self.file}: {self.message}"
        return self.message


class OptionsError(RiggerError):
    """Bad command-line options."""

    exit_code = EXIT_BAD_OPTIONS


class TemplateError(RiggerError):
    """A Jinja expression failed: syntax, undefined variable, or a filter error."""


class TaskFailed(RiggerError):
    """Raised by a module when the host cannot be brought to the declared state."""

    exit_code = EXIT_TASK_FAILED

    def __init__(self, msg: str, data: Mapping[str, Any] | None = None):
        self.msg = msg
        self.data: Mapping[str, Any] = dict(data or {})
        super().__init__(msg)


class CommandFailed(TaskFailed):
    """A command exited non-zero where success was required; carries its last lines."""


class HostUnreachable(RiggerError):
    """The connection to a host failed: refused, timed out, auth, dropped mid-run."""

    exit_code = EXIT_UNREACHABLE


class WriteRefused(RiggerError):
    """A module tried to change a host while only planning (check mode or plan())."""

    exit_code = EXIT_UNEXPECTED
