"""The contract between the engine and a task module, and everything a module may import.

A module is a file in a room (``modules/<room>/``, listed in the room's ``MODULES``)
defining a docstring, ``SCHEMA`` (JSON Schema; every argument has a ``description``),
``plan(ctx, args)`` and, unless it is read-only, ``apply(ctx, args, change)``.

- ``args`` arrive validated, with the schema's defaults filled in: index them
  (``args["port"]``); never repeat a default in code.
- ``plan`` only reads (``ctx.conn`` refuses writes, commands not marked ``read_only`` and
  mutating probes while planning). It returns ``None`` or ``Unchanged`` when the host is
  already in the declared state, else a ``Change``; ``apply`` makes that change and
  returns a ``Result``.
- A read-only module (checks, messages, variables) has no ``apply``: ``plan`` does the
  whole job and returns ``Unchanged`` (its ``msg``, ``data``, ``warnings``, ``set_vars``),
  or raises ``TaskFailed``. It therefore runs the same in check mode.
- ``CHECK_MODE = "skip"`` marks a module whose plan cannot tell what apply would do
  (``command``): in check mode its task is skipped.
- A failure on the host is ``TaskFailed`` (or ``ProbeError``, ``CommandFailed``, an
  ``OSError``): the engine reports it as the task's failure, naming the host. Anything
  else escaping a module is reported as a bug in rigger.

Modules import from this file only (and from their own room).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.connection.base import CommandResult, Connection, ScopedConnection
from engine.errors import CommandFailed, TaskFailed, TemplateError, WriteRefused
from engine.facts import FactSource, prefixed
from engine.keypaths import keypath_diff, same_value
from engine.probes import ProbeError

__all__ = [
    "Change",
    "CommandFailed",
    "CommandResult",
    "Diff",
    "FactSource",
    "ProbeError",
    "Result",
    "ScopedConnection",
    "TaskContext",
    "TaskFailed",
    "TemplateError",
    "Unchanged",
    "WriteRefused",
    "content_digest",
    "evaluate",
    "keypath_diff",
    "prefixed",
    "render",
    "render_text",
    "same_value",
    "to_bool",
]


@dataclass(frozen=True)
class Diff:
    """Before/after of one thing (a file, a key, a process list). Only output renders it."""

    label: str
    before: str
    after: str


@dataclass(frozen=True)
class Change:
    """What ``apply`` would do. ``payload`` carries what apply needs (pids, paths).

    ``fingerprint`` names the host state the change was planned from, one entry per thing
    (``file:/etc/x.json`` -> its sha256, ``process:4242`` -> its start time and command,
    ``package:vllm`` -> a version). A saved plan is applied only while it still matches,
    so include what would make the reviewed change wrong if it moved; never a secret.
    """

    summary: str
    diffs: tuple[Diff, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)
    fingerprint: Mapping[str, str] = field(default_factory=dict)


def content_digest(data: bytes | None) -> str:
    """A fingerprint value for file contents: ``sha256:HEX``, or ``absent``."""
    return "absent" if data is None else "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Unchanged:
    """``plan`` may return this instead of ``None`` to explain why nothing is to do.

    ``msg`` is shown on the ``ok`` line ("8 GPUs idle: 0 processes, max 3 MiB used");
    ``data`` is registered like a Result's data; ``set_vars`` are host variables a
    read-only module defines (``set_fact``).
    """

    msg: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    set_vars: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """The outcome of a task on one host. ``data`` is what ``register:`` exposes.

    ``set_vars`` are host variables the task defines (``set_fact``).
    """

    changed: bool
    msg: str = ""
    failed: bool = False
    diffs: tuple[Diff, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    set_vars: Mapping[str, Any] = field(default_factory=dict)


ProgressFn = Callable[[str], None]


def _no_progress(_: str) -> None:
    return None


@dataclass(frozen=True)
class TaskContext:
    """Everything a module may use. Explicit, never global.

    ``conn`` is already scoped for the task: become, environment and timeout applied,
    and, while planning, refusing any write or signal.
    """

    host_name: str
    conn: ScopedConnection
    facts: Mapping[str, Any]
    vars: Mapping[str, Any]
    task_name: str = ""
    timeout_s: float | None = None
    progress: ProgressFn = _no_progress
    connect: Callable[[str], Connection] | None = None

    def peer(self, host: str) -> ScopedConnection:
        """Another inventory host, for a module that acts on a group as one (run with
        ``run_once``): reached with that host's own variables and run lock, as
        ``delegate_to`` reaches it, with this task's scope (become, environment, and
        refusing writes while planning). An unreachable peer raises ``HostUnreachable``; a
        peer whose run lock cannot be taken fails the task."""
        if self.connect is None:
            raise TaskFailed(f"no connection to {host}: this task runs outside a play's inventory")
        return replace(self.conn, inner=self.connect(host))


# Templating helpers, imported on use: a module's own code must load without jinja2 (the
# GPU room's tests run it under a bare system python as another user).


def render(value: Any, variables: Mapping[str, Any]) -> Any:
    """Render templates in ``value`` (strings, lists, mappings) with these variables."""
    from engine import templating

    return templating.render(value, variables)


def render_text(source: str, variables: Mapping[str, Any]) -> str:
    """A whole template file rendered to text: never a native value, trailing newline kept."""
    from engine import templating

    return templating.render_text(source, variables)


def evaluate(expression: Any, variables: Mapping[str, Any]) -> Any:
    """The value of a Jinja expression without braces (``when:``-style)."""
    from engine import templating

    return templating.evaluate(expression, variables)


def to_bool(value: Any) -> bool:
    """Ansible's truthiness of a value ("yes", "on", 1, ...)."""
    from engine.filters import to_bool as convert

    return convert(value)
