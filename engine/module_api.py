"""The contract between the engine and a task module (see the architecture page).

A module is a file in ``modules/`` defining ``SCHEMA``, ``plan(ctx, args)`` and
``apply(ctx, args, change)``. ``plan`` is read-only and returns ``None`` when the host
is already in the declared state; ``apply`` makes the change and returns a ``Result``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.errors import CommandFailed, TaskFailed

if TYPE_CHECKING:
    from engine.connection.base import Connection

__all__ = ["Change", "CommandFailed", "Diff", "Result", "TaskContext", "TaskFailed", "Unchanged"]


@dataclass(frozen=True)
class Diff:
    """Before/after of one thing (a file, a key, a process list). Only output renders it."""

    label: str
    before: str
    after: str


@dataclass(frozen=True)
class Change:
    """What ``apply`` would do. ``payload`` carries what apply needs (pids, paths)."""

    summary: str
    diffs: tuple[Diff, ...] = ()
    payload: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Unchanged:
    """``plan`` may return this instead of ``None`` to explain why nothing is to do.

    ``msg`` is shown on the ``ok`` line ("8 GPUs idle: 0 processes, max 3 MiB used");
    ``data`` is registered like a Result's data.
    """

    msg: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


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
    conn: Connection
    facts: Mapping[str, Any]
    vars: Mapping[str, Any]
    task_name: str = ""
    timeout_s: float | None = None
    progress: ProgressFn = _no_progress
